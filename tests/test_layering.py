"""Where each concern lives (issue 19): the operators and the sensor write no SQL, the sensor
records through the mixin the operators use, not through an operator module."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_provider_bellamy

PACKAGE = Path(airflow_provider_bellamy.__file__).parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_operator_or_sensor_module_builds_sql() -> None:
    for folder in ("operators", "sensors"):
        for path in sorted((PACKAGE / folder).glob("*.py")):
            sql = {
                name
                for name in _imports(path)
                if name.split(".")[0] == "sqlalchemy" or name.startswith("airflow_provider_bellamy.store")
            }
            assert not sql, (
                f"{path.relative_to(PACKAGE)} imports {sorted(sql)}: ask the Bellamy façade instead"
            )


def test_the_sensor_records_through_the_operators_mixin() -> None:
    from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator
    from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator
    from airflow_provider_bellamy.recording import BellamyRecordingMixin
    from airflow_provider_bellamy.sensors.job import BellamyJobSensor

    sensor_imports = _imports(PACKAGE / "sensors" / "job.py")
    assert not {n for n in sensor_imports if n.startswith("airflow_provider_bellamy.operators")}
    for cls in (BellamyJobSensor, BellamyFlinkOperator, BellamySparkSubmitOperator):
        assert issubclass(cls, BellamyRecordingMixin), cls
        assert cls.record_job_run is BellamyRecordingMixin.record_job_run, cls
