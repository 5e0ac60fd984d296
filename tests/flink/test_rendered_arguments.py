"""BellamyFlinkOperator's templated ``application_args`` and ``conf`` as a DAG author writes them:
one template for the whole list or mapping (``"{{ params.args }}"``). Until session 24 the list
became the template's characters (``['{', '{', ' ', 'p', …]`` handed to ``flink run``) and the
mapping a ``ValueError`` at parse time. The cluster is a stand-in: what matters is what would be
submitted, and that a refused value stops the task before anything is sized or submitted."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.hooks.flink import FlinkHook
from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator
from tests.fixtures.airflow import connection_json

ARGS = ["--lines", "400", "--output", "/data/out dir"]
CONF = {"taskmanager.memory.process.size": "1g", "parallelism.default": 2}


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A stand-in cluster: 4 free slots, no earlier job; each submission's arguments noted."""
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", connection_json("flink", host="127.0.0.1", port=8081))
    calls: list[dict[str, Any]] = []

    def submit(self: FlinkHook, application: str, parallelism: int, **kwargs: Any) -> str:
        calls.append({"parallelism": parallelism, **kwargs})
        return str(kwargs["job_id"])

    monkeypatch.setattr(FlinkHook, "free_slots", lambda self: (4, 4))
    monkeypatch.setattr(FlinkHook, "check_free_slots", lambda self, p: (4, 4))
    monkeypatch.setattr(FlinkHook, "find_job", lambda self, job_id: None)
    monkeypatch.setattr(FlinkHook, "submit", submit)
    return calls


def _launch(tmp_path: Path, params: dict[str, Any]) -> dict[str, Any]:
    script = tmp_path / "wordcount.py"
    script.write_text("print('wc')\n")
    op = BellamyFlinkOperator(
        task_id="wc",
        job_type="wc",
        application=str(script),
        application_args="{{ params.args }}",
        conf="{{ params.conf }}",
        scale_outs=[1, 2],
        default_scale_out=2,
        wait_for_completion=False,
        params=params,
    )
    pushed: dict[str, Any] = {}
    ti = SimpleNamespace(
        dag_id="d",
        task_id="wc",
        run_id="manual__1",
        map_index=-1,
        try_number=1,
        xcom_push=lambda key, value: pushed.__setitem__(key, value),
    )
    context: dict[str, Any] = {"ti": ti, "task": op, "params": params}
    op.render_template_fields(context)  # no native rendering: the list and the mapping become text
    assert isinstance(op.application_args, str) and isinstance(op.conf, str)
    return op.execute(context)


def test_a_templated_argument_list_and_conf_are_submitted_as_rendered(
    tmp_path: Path, bellamy_store: Any, submitted: list[dict[str, Any]]
) -> None:
    out = _launch(tmp_path, {"args": ARGS, "conf": CONF})
    (call,) = submitted
    assert call["application_args"] == ARGS
    assert call["conf"] == CONF
    assert out["parallelism"] == call["parallelism"] == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"args": "--lines 400", "conf": CONF}, "application_args"),  # one string: never split
        ({"args": ARGS, "conf": "parallelism.default=2"}, "conf"),
    ],
)
def test_a_rendered_value_of_the_wrong_shape_is_refused_before_sizing(
    tmp_path: Path, bellamy_store: Any, submitted: list[dict[str, Any]], params: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInputError) as err:
        _launch(tmp_path, params)
    assert err.value.field == field
    assert submitted == [] and bellamy_store.list_decisions() == []


def test_an_argument_string_is_refused_when_the_dag_is_parsed(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"application_args='--lines 400': must be a list"):
        BellamyFlinkOperator(task_id="wc", job_type="wc", application="wc.py", application_args="--lines 400")
    with pytest.raises(InvalidInputError, match=r"conf=\['a'\]: must be a mapping"):
        BellamyFlinkOperator(task_id="wc", job_type="wc", application="wc.py", conf=["a"])


def test_poll_interval_and_timeouts_given_as_text_are_converted_or_refused_by_name() -> None:
    """``poll_interval_s="5"`` (default_args, a pipeline file) was a bare TypeError at parse time."""

    def op(**kwargs: Any) -> BellamyFlinkOperator:
        return BellamyFlinkOperator(task_id="wc", job_type="wc", application="wc.py", **kwargs)

    made = op(poll_interval_s="5", job_timeout_s="10m", submit_timeout_s="120")
    assert (made.poll_interval_s, made.job_timeout_s, made.submit_timeout_s) == (5.0, 600.0, 120.0)
    assert op(poll_interval_s=0.5).job_timeout_s is None
    for field, bad in [("poll_interval_s", "five"), ("poll_interval_s", 0), ("job_timeout_s", "10 min")]:
        with pytest.raises(InvalidInputError, match=rf"{field}={bad!r}: must be a"):
            op(**{field: bad})
