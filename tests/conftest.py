"""Session-wide test setup. Service fixtures live in tests/fixtures/, one module per service."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Every test session gets its own AIRFLOW_HOME and an embedded store under it, so nothing
# a test writes can touch a user's real Airflow or Bellamy store.
_HOME = tempfile.mkdtemp(prefix="bellamy-test-airflow-")
# (the home holds the test store and Airflow's database: gone when the session ends)
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")

pytest_plugins: list[str] = [
    "tests.fixtures.postgres",
    "tests.fixtures.flink",
    "tests.fixtures.airflow_db",
    "tests.fixtures.airflow",
    "tests.fixtures.spark",
    "tests.fixtures.fake_flink",  # after tests.fixtures.airflow, which it imports
]
