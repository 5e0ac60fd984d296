"""One table, three doors: the same sizing inputs given in a pipeline YAML file, to an operator
(as Jinja renders them: text) and to the façade's ``size`` are accepted alike and size alike, or
refused alike, naming the same argument and value."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from airflow_provider_bellamy.config import load_pipeline_config
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

CONTEXT = {"machine_type": "m5.xlarge", "cores": 8, "data_size_mb": 2048}
BASE: dict[str, Any] = {"job_type": "grep", "properties": CONTEXT, "scale_outs": [2, 4, 8]}

# the sizing arguments the façade's size() takes, under its names
FACADE = {
    "job_type": "job_type",
    "properties": "context",
    "scale_outs": "scale_outs",
    "target": "target_s",
    "confidence": "confidence",
    "objective": "objective",
    "price_per_node_hour": "price_per_node_hour",
    "default_scale_out": "default_scale_out",
    "framework": "framework",
    "on_infeasible": "on_infeasible",
}

# (the arguments over BASE, None when all doors accept them, else the argument refused and its value)
TABLE: list[tuple[dict[str, Any], tuple[str, Any] | None]] = [
    ({"target": "15m"}, None),
    ({"target": "300"}, None),
    ({"target": "0:05:00"}, None),  # {{ macros.timedelta(minutes=5) }} as Jinja renders it
    ({"target": "PT5M"}, None),
    ({"target": "1h30"}, ("target", "1h30")),
    ({"target": 300, "confidence": "0.8"}, None),
    ({"scale_outs": "[8, 2, 4]", "default_scale_out": "4"}, None),
    ({"scale_outs": "2-8:2", "default_scale_out": "4"}, None),  # as the CLI's --scale-outs
    ({"scale_outs": "8-2"}, ("scale_outs", "8-2")),
    ({"target": "1h30m", "objective": "min_cost", "price_per_node_hour": "0.25"}, None),
    ({"properties": {**CONTEXT, "cores": "8"}, "target": "5m"}, None),
    ({"target": "soon"}, ("target", "soon")),
    ({"target": 0}, ("target", 0)),
    ({"confidence": "1.5"}, ("confidence", "1.5")),
    ({"confidence": 0.3}, ("confidence", 0.3)),
    ({"scale_outs": [2, 0]}, ("scale_outs", None)),
    ({"default_scale_out": 3}, ("default_scale_out", 3)),
    ({"objective": "cheapest"}, ("objective", "cheapest")),
    ({"objective": "min_cost"}, ("price_per_node_hour", None)),
    ({"price_per_node_hour": "-1"}, ("price_per_node_hour", "-1")),
    ({"properties": {**CONTEXT, "cores": "nan"}}, ("properties", "nan")),
    ({"properties": {**CONTEXT, "scale_out": 4}}, ("properties", 4)),
    ({"job_type": "all"}, ("job_type", "all")),
    # no size meets 150 s at 90 % on the history below; 8 is predicted to (130 s)
    ({"target": "150", "on_infeasible": "run_likely"}, None),
    ({"target": "150", "on_infeasible": "run-max"}, None),
    ({"on_infeasible": "likely"}, ("on_infeasible", "likely")),
    ({"on_infeasible": "run-likely", "objective": "fastest"}, ("on_infeasible", "run-likely")),
]


def _history(facade: Any) -> None:
    """Runs of the context at three scale-outs: the Ernest fallback sizes it."""
    for n, runtime in ((2, 400.0), (4, 220.0), (8, 130.0)):
        facade.record_run(job_type="grep", framework="spark", scale_out=n, runtime_s=runtime, context=CONTEXT)


def _yaml(tmp_path: Path, arguments: dict[str, Any]) -> Any:
    job = {("scale_out" if k == "scale_outs" else k): v for k, v in arguments.items()}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"jobs": {"j": {"framework": "spark", **job}}}))
    return load_pipeline_config(path).job("j")


def _operator(arguments: dict[str, Any]) -> BellamySizingOperator:
    return BellamySizingOperator(task_id="size", **arguments)


def _execute(op: BellamySizingOperator) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="d", task_id="size", run_id="manual__1", map_index=-1, try_number=1)
    return op.execute({"ti": ti, "task": op})


def _facade_size(facade: Any, arguments: dict[str, Any]) -> Any:
    return facade.size(**{"target_s": None, **{FACADE[k]: v for k, v in arguments.items()}})


def _refused(call: Any) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as err:
        call()
    return err.value


def _argument(field: str, prefix: str = "", names: dict[str, str] | None = None) -> str:
    """The argument an error names, without the door's prefix, renaming or position."""
    base = field.removeprefix(prefix).split(".")[0].split("[")[0]
    return {v: k for k, v in (names or {}).items()}.get(base, base)


@pytest.mark.parametrize(("over", "refused"), TABLE)
def test_yaml_operator_and_facade_agree(
    bellamy_store: Any, tmp_path: Path, over: dict[str, Any], refused: tuple[str, Any] | None
) -> None:
    _history(bellamy_store)
    arguments = {**BASE, **over}
    if refused is None:
        job = _yaml(tmp_path, arguments)
        op = _operator(arguments)
        assert job.spec == op.sizing_spec()
        from_yaml = _execute(BellamySizingOperator.from_config(job, task_id="size"))
        from_operator = _execute(op)
        from_facade = _facade_size(bellamy_store, arguments).to_dict()
        for key in (
            "chosen_scale_out",
            "target_s",
            "confidence",
            "objective",
            "price_per_node_hour",
            "feasible",
        ):
            assert from_yaml[key] == from_operator[key] == from_facade[key], key
        assert from_yaml["candidates"] == from_operator["candidates"] == from_facade["candidates"]
        assert from_yaml["context"] == from_operator["context"] == from_facade["context"]
        return
    argument, value = refused
    errors = {
        "yaml": _refused(lambda: _yaml(tmp_path, arguments)),
        "operator": _refused(lambda: _operator(arguments)),
        "facade": _refused(lambda: _facade_size(bellamy_store, arguments)),
    }
    assert _argument(errors["yaml"].field, "jobs.j.", {"scale_outs": "scale_out"}) == argument
    assert _argument(errors["operator"].field) == argument
    assert _argument(errors["facade"].field, "", {k: v for k, v in FACADE.items() if k != v}) == argument
    for door, err in errors.items():
        if value is not None:
            assert repr(value) in str(err), (door, str(err))
    assert bellamy_store.list_decisions() == []  # refused before anything was stored


def test_each_operator_lists_only_its_own_arguments_and_dag_defaults_reach_the_sizing_ones() -> None:
    import datetime as dt
    import inspect

    from airflow.sdk import DAG

    from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator
    from airflow_provider_bellamy.operators.sizing import BellamySizingMixin
    from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator
    from airflow_provider_bellamy.spec import SIZING_ARGUMENTS

    mixin = set(inspect.signature(BellamySizingMixin.__init__).parameters)
    assert set(SIZING_ARGUMENTS) < mixin
    for operator in (BellamySizingOperator, BellamySparkSubmitOperator, BellamyFlinkOperator):
        own = set(inspect.signature(operator.__init__).parameters)
        assert not own & set(SIZING_ARGUMENTS), operator.__name__
    defaults = {"confidence": 0.8, "bellamy_conn_id": "bellamy_other", "on_infeasible": "fail"}
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    with DAG("defaults", schedule=None, start_date=start, default_args=defaults):
        ops = [
            BellamySizingOperator(task_id="size", job_type="wc", scale_outs=[1, 2]),
            BellamySparkSubmitOperator(task_id="spark", job_type="wc", scale_outs=[1, 2], application="a.py"),
            BellamyFlinkOperator(task_id="flink", job_type="wc", application="a.py", confidence=0.95),
        ]
    assert [(op.confidence, op.bellamy_conn_id, op.on_infeasible) for op in ops] == [
        (0.8, "bellamy_other", "fail"),
        (0.8, "bellamy_other", "fail"),
        (0.95, "bellamy_other", "fail"),
    ]
    assert (ops[1].framework, ops[2].framework, ops[2].scale_outs) == ("spark", "flink", None)
    with pytest.raises(
        InvalidInputError, match="framework='flink': BellamySparkSubmitOperator launches spark"
    ):
        BellamySparkSubmitOperator(
            task_id="x", job_type="wc", scale_outs=[1], application="a.py", framework="flink"
        )


def test_an_xcom_reference_is_checked_once_resolved(bellamy_store: Any) -> None:
    import datetime as dt

    from airflow.sdk import DAG, task

    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    with DAG("xcom_args", schedule=None, start_date=start):

        @task
        def sizes() -> list[int]:
            return [1, 2]

        listed = sizes()
        op = BellamySizingOperator(task_id="size", job_type="wc", scale_outs=listed, properties=listed)
    assert op.upstream_task_ids == {"sizes"}
    op.scale_outs, op.properties = "[1, 2]", "[1, 2]"  # what the references could resolve to
    with pytest.raises(InvalidInputError) as err:
        op.sizing_spec()
    assert (err.value.field, err.value.value) == ("properties", [1, 2])
