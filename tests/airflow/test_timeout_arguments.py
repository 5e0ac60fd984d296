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


# -- the store's connect timeout: the argument of the operators and the sensor, the connection's extra


@pytest.mark.parametrize("make", [_operator, _sensor], ids=["operator", "sensor"])
@pytest.mark.parametrize(("given", "seconds"), GOOD)
def test_connect_timeout_reads_as_a_duration(make: Any, given: Any, seconds: float) -> None:
    task = make(connect_timeout_s=given)
    assert task.connect_timeout_s == seconds
    assert task._bellamy_store_hook().connect_timeout_s == seconds


@pytest.mark.parametrize("make", [_operator, _sensor], ids=["operator", "sensor"])
@pytest.mark.parametrize("given", BAD)
def test_a_bad_connect_timeout_is_refused_at_parse_naming_it(make: Any, given: Any) -> None:
    with pytest.raises(InvalidInputError) as info:
        make(connect_timeout_s=given)
    assert info.value.field == "connect_timeout_s"
    assert info.value.value is given


@pytest.mark.parametrize(("given", "seconds"), GOOD[:4])
def test_the_connections_connect_timeout_reads_as_a_duration(
    monkeypatch: pytest.MonkeyPatch, given: Any, seconds: float
) -> None:
    from airflow_provider_bellamy.hooks.bellamy import BellamyHook
    from tests.fixtures.airflow import connection_json

    monkeypatch.setenv(
        "AIRFLOW_CONN_BELLAMY_T",
        connection_json("bellamy", extra={"store_url": "sqlite://", "connect_timeout": given}),
    )
    assert BellamyHook("bellamy_t").connect_timeout_s == seconds
    with pytest.raises(InvalidInputError) as info:
        BellamyHook("bellamy_t", connect_timeout_s="soon").resolve()
    assert (info.value.field, info.value.value) == ("connect_timeout_s", "soon")
