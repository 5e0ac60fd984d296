"""BellamySparkSubmitOperator's templated ``conf`` and ``application_args`` as a DAG author writes
them: one template for the whole mapping or list. Rendered as text (no
``render_template_as_native_obj``), the conf was a bare ``ValueError`` after sizing had stored a
decision for a launch that never happened, and the arguments the template's characters. Only
the command is built here: what matters is what spark-submit would be given."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator
from tests.fixtures.airflow import connection_json

ARGS = ["--lines", "400", "--output", "/data/out dir"]
CONF = {"spark.sql.shuffle.partitions": "6", "spark.eventLog.enabled": "true"}


def _prepare(monkeypatch: pytest.MonkeyPatch, params: dict[str, Any]) -> list[str]:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", connection_json("spark", host="yarn"))
    op = BellamySparkSubmitOperator(
        task_id="grep",
        job_type="grep",
        conn_id="spark_yarn",
        application="job.py",
        application_args="{{ params.args }}",
        conf="{{ params.conf }}",
        scale_outs=[1, 2],
        default_scale_out=2,
        params=params,
    )
    ti = SimpleNamespace(dag_id="d", task_id="grep", run_id="manual__1", map_index=-1, try_number=1)
    context: dict[str, Any] = {"ti": ti, "task": op, "params": params}
    op.render_template_fields(context)  # no native rendering: the list and the mapping become text
    assert isinstance(op.application_args, str) and isinstance(op.conf, str)
    return op.prepare_launch(context)[-1]


def test_a_templated_conf_and_argument_list_reach_spark_submit_as_rendered(
    monkeypatch: pytest.MonkeyPatch, bellamy_store: Any
) -> None:
    command = _prepare(monkeypatch, {"args": ARGS, "conf": CONF})
    assert "spark.sql.shuffle.partitions=6" in command and "spark.eventLog.enabled=true" in command
    assert command[command.index("--num-executors") + 1] == "2"
    # the exact argument list: "/data/out dir" stays one argument (it was split on spaces)
    assert command[-len(ARGS) - 1 :] == ["job.py", *ARGS]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"args": "--lines 400", "conf": CONF}, "application_args"),  # one string: never split
        ({"args": ARGS, "conf": "spark.sql.shuffle.partitions=6"}, "conf"),
        # a rendered option without a value was passed on as "spark.eventLog.dir=None"
        ({"args": ARGS, "conf": {**CONF, "spark.eventLog.dir": None}}, "conf.spark.eventLog.dir"),
    ],
)
def test_a_rendered_value_of_the_wrong_shape_is_refused_before_sizing(
    monkeypatch: pytest.MonkeyPatch, bellamy_store: Any, params: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInputError) as err:
        _prepare(monkeypatch, params)
    assert err.value.field == field
    assert bellamy_store.list_decisions() == []  # no decision for a launch that cannot happen


def test_an_argument_string_is_refused_when_the_dag_is_parsed() -> None:
    with pytest.raises(InvalidInputError, match=r"application_args='--lines 400': must be a list"):
        BellamySparkSubmitOperator(
            task_id="t", job_type="grep", scale_outs=[1], application_args="--lines 400"
        )
    with pytest.raises(InvalidInputError, match=r"conf=\['a'\]: must be a mapping"):
        BellamySparkSubmitOperator(task_id="t", job_type="grep", scale_outs=[1], conf=["a"])
    with pytest.raises(InvalidInputError, match=r"application_args\[1\]=None: must be one argument"):
        BellamySparkSubmitOperator(
            task_id="t", job_type="grep", scale_outs=[1], application_args=["--out", None]
        )
    with pytest.raises(InvalidInputError, match=r"conf\.spark\.jars=\['a', 'b'\]: must be one value"):
        BellamySparkSubmitOperator(
            task_id="t", job_type="grep", scale_outs=[1], conf={"spark.jars": ["a", "b"]}
        )


def test_the_pushed_command_keeps_each_argument_whole_and_its_secrets_masked(
    monkeypatch: pytest.MonkeyPatch, bellamy_store: Any
) -> None:
    """The ``spark_submit_command`` XCom is the argument list: a value with a space stays one
    argument, and a secret is masked whether it follows its flag or sits in a ``key=value``."""
    args = ["--password", "hunter2pw", "--title", "word count", "--opt", "db.secret=s3cr3t"]
    command = _prepare(monkeypatch, {"args": args, "conf": CONF})
    assert command[-len(args) : -1] == ["--password", "***", "--title", "word count", "--opt"]
    assert command[-1].startswith("db.secret=***")
    assert not any("hunter2pw" in a or "s3cr3t" in a for a in command)
