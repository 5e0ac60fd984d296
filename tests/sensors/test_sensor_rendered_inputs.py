"""BellamyJobSensor's inputs as a DAG author gives them: ``properties`` is a template field, so a
whole-mapping template (``"{{ ti.xcom_pull(...) }}"``) must survive parsing and, rendered as
text (no ``render_template_as_native_obj``), be read back as the mapping it shows; a
``scale_out`` given as text is converted when it is a number and refused, named, otherwise."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.hooks.job_status import JobStatus
from airflow_provider_bellamy.sensors.job import BellamyJobSensor

PROPS = {"machine_type": "m5.xlarge", "cores": 4, "data_size_mb": 2048.0}


def _sensor(**kwargs: Any) -> BellamyJobSensor:
    return BellamyJobSensor(
        task_id="wait",
        job_id="a" * 32,
        kind="flink",
        endpoint="http://127.0.0.1:8081",
        job_type="wc",
        **kwargs,
    )


def test_a_templated_properties_mapping_is_recorded_as_the_mapping_it_renders(bellamy_store: Any) -> None:
    sensor = _sensor(properties="{{ params.props }}", scale_out=2, params={"props": PROPS})
    ti = SimpleNamespace(dag_id="d", task_id="wait", run_id="manual__1", map_index=-1, try_number=1)
    context: dict[str, Any] = {"ti": ti, "task": sensor, "params": {"props": PROPS}}
    sensor.render_template_fields(context)
    assert isinstance(sensor.properties, str)  # what Jinja renders a dict to
    status = JobStatus(
        kind="flink",
        job_id="a" * 32,
        state="FINISHED",
        terminal=True,
        succeeded=True,
        start_time_ms=1_700_000_000_000,
        end_time_ms=1_700_000_042_000,
        duration_ms=42_000,
        parallelism=2,
    )
    out = sensor._complete(context, status)
    (run,) = bellamy_store.runs_frame("wc").to_dict("records")
    assert out["run_row_id"] == run["id"]
    assert {key: run[key] for key in PROPS} == PROPS
    assert run["scale_out"] == 2 and run["runtime_s"] == pytest.approx(42.0)


def test_a_rendered_properties_text_that_is_no_mapping_is_refused_by_name(bellamy_store: Any) -> None:
    sensor = _sensor(properties="{{ params.props }}", scale_out=2, params={"props": "cores=4"})
    ti = SimpleNamespace(dag_id="d", task_id="wait", run_id="manual__1", map_index=-1, try_number=1)
    context: dict[str, Any] = {"ti": ti, "task": sensor, "params": {"props": "cores=4"}}
    sensor.render_template_fields(context)
    status = JobStatus(
        kind="flink", job_id="a" * 32, state="FINISHED", terminal=True, succeeded=True, duration_ms=1_000
    )
    with pytest.raises(InvalidInputError, match=r"properties='cores=4'"):
        sensor._complete(context, status)
    assert bellamy_store.count_runs("wc") == 0


def test_scale_out_text_is_converted_or_refused_by_name() -> None:
    assert _sensor(scale_out="4").scale_out == 4
    with pytest.raises(InvalidInputError, match=r"scale_out='four': must be an integer >= 1"):
        _sensor(scale_out="four")
    with pytest.raises(InvalidInputError, match=r"properties\.scale_out=3"):
        _sensor(properties={"scale_out": 3})
