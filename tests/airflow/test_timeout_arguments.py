"""The time budgets of the operators (``sizing_timeout_s``) and of the sensor
(``request_timeout_s``) are durations read by ``spec.parse_duration``, the one reader of
durations (as the Flink operator's ``job_timeout_s``): text such as ``"30s"`` is read as it reads
everywhere, and a value that is no duration > 0 is refused when the DAG is parsed, naming the
argument and the value: never a raw ``ValueError`` (at launch, or at parse for the sensor) nor a
silent fallback (a sizing budget of -1 s made every launch give up sizing at once)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.operators.sizing import BellamySizingOperator
from airflow_provider_bellamy.sensors.job import BellamyJobSensor

BAD = ["soon", -1, 0, float("nan"), float("inf"), True, "1h30"]
GOOD: list[tuple[Any, float]] = [
    (30, 30.0),
    ("30", 30.0),
    ("30s", 30.0),
    ("2m", 120.0),
    (dt.timedelta(minutes=1), 60.0),
]


def _operator(**kwargs: Any) -> BellamySizingOperator:
    return BellamySizingOperator(task_id="size", job_type="grep", scale_outs=[1, 2, 4], **kwargs)


@pytest.mark.parametrize(("given", "seconds"), GOOD)
def test_sizing_timeout_reads_as_a_duration(given: Any, seconds: float) -> None:
    assert _operator(sizing_timeout_s=given).sizing_timeout_s == seconds


@pytest.mark.parametrize("given", BAD)
def test_a_bad_sizing_timeout_is_refused_at_parse_naming_it(given: Any) -> None:
    with pytest.raises(InvalidInputError) as info:
        _operator(sizing_timeout_s=given)
    assert info.value.field == "sizing_timeout_s"
    assert info.value.value is given


def _sensor(**kwargs: Any) -> BellamyJobSensor:
    return BellamyJobSensor(task_id="wait", job_id="a" * 32, kind="flink", **kwargs)


@pytest.mark.parametrize(("given", "seconds"), GOOD)
def test_the_sensors_request_timeout_reads_as_a_duration(given: Any, seconds: float) -> None:
    assert _sensor(request_timeout_s=given).request_timeout_s == seconds


@pytest.mark.parametrize("given", BAD)
def test_a_bad_request_timeout_is_refused_at_parse_naming_it(given: Any) -> None:
    with pytest.raises(InvalidInputError) as info:
        _sensor(request_timeout_s=given)
    assert info.value.field == "request_timeout_s"
    assert info.value.value is given
