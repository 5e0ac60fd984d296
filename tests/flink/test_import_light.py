"""The Flink hook and operator and the job sensor stay light to import (DAG parsing)."""

from __future__ import annotations

from tests.airflow.test_import_cost import BASE, _added_cost, _check

# What DAG files import. The trigger module is loaded by the triggerer (and by a task only
# when it defers): it pulls Airflow's own trigger package (~30 ms), so it is checked for
# torch/pandas only.
MODULES = [
    "airflow_provider_bellamy.hooks.flink",
    "airflow_provider_bellamy.hooks.job_status",
    "airflow_provider_bellamy.operators.flink",
    "airflow_provider_bellamy.sensors.job",
]


def test_flink_modules_import_neither_torch_nor_pandas_and_cost_little() -> None:
    _check(BASE, MODULES)


def test_trigger_module_imports_neither_torch_nor_pandas() -> None:
    _, new = _added_cost(BASE, ["airflow_provider_bellamy.triggers.job"])
    assert not sorted(m for m in new if m.split(".")[0] in ("torch", "pandas"))
