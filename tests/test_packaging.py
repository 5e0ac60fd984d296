"""Packaging as users install it (issue 18, item 9): the package declares ranges, the lock file pins.

`pip install airflow-provider-bellamy[spark]` must not force a Spark version onto a user's
workers; the versions the tests run on are pinned in requirements.lock / lock-constraints.txt.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")
ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _locked(name: str) -> str:
    match = re.search(rf"^{re.escape(name)}==(\S+)$", (ROOT / "requirements.lock").read_text(), re.M)
    assert match, f"{name} is not pinned in requirements.lock"
    return match.group(1)


def test_no_requirement_of_the_package_pins_an_exact_version() -> None:
    project = _project()
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    pinned = [r for r in requirements if "==" in r]
    assert pinned == [], f"exact pins belong in lock-constraints.txt, not the package: {pinned}"
    assert not any(r.startswith("pyspark") for r in project["optional-dependencies"]["spark"])


def test_the_tests_spark_is_pinned_by_the_lock() -> None:
    constraints = (ROOT / "lock-constraints.txt").read_text().splitlines()
    assert "pyspark==4.2.0" in constraints
    assert _locked("pyspark") == "4.2.0"


def test_plotting_has_its_own_extra() -> None:
    extras = _project()["optional-dependencies"]
    assert any(r.startswith("matplotlib") for r in extras["plot"])
    assert any(r.startswith("matplotlib") for r in extras["bench"])


def test_the_airflow_floor_is_the_tested_version() -> None:
    (airflow,) = [r for r in _project()["dependencies"] if re.match(r"apache-airflow\b(?!-)", r)]
    assert airflow == f"apache-airflow>={_locked('apache-airflow')}"
