"""Properties as Jinja renders them (strings, unless render_template_as_native_obj=True) size a
job exactly like the native values (issue 18, D2): same context, same prediction."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

NATIVE = {"machine_type": "m5.xlarge", "cores": 4, "data_size_mb": 2048.0}


def _size(properties: Any, params: dict[str, Any]) -> dict[str, Any]:
    op = BellamySizingOperator(
        task_id="size", job_type="wc", properties=properties, scale_outs=[1, 2, 4], target=200, params=params
    )
    ti = SimpleNamespace(dag_id="d", task_id="size", run_id="manual__1", map_index=-1, try_number=1)
    context: dict[str, Any] = {"ti": ti, "task": op, "params": params}
    op.render_template_fields(context)
    return {"rendered": op.properties, "decision": op.execute(context)}


def test_rendered_strings_size_like_native_values(bellamy_store: Any) -> None:
    bellamy_store.record_runs(
        [
            {"job_type": "wc", "framework": "spark", "scale_out": n, "runtime_s": t, **NATIVE}
            for n, t in ((1, 300.0), (2, 160.0), (4, 90.0))
        ]
    )
    templated = {key: "{{ params.%s }}" % key for key in NATIVE}  # noqa: UP031 - Jinja braces
    rendered = _size(templated, NATIVE)
    assert rendered["rendered"] == {"machine_type": "m5.xlarge", "cores": "4", "data_size_mb": "2048.0"}
    native = _size(NATIVE, {})
    for out in (rendered, native):
        assert "Ernest fitted on this context's 3 runs" in out["decision"]["fallback_reason"]
    assert rendered["decision"]["context"] == native["decision"]["context"]
    assert [c["predicted_s"] for c in rendered["decision"]["candidates"]] == [
        c["predicted_s"] for c in native["decision"]["candidates"]
    ]
    with pytest.raises(InvalidInputError, match=r"context\.cores='abc'"):
        _size({**NATIVE, "cores": "{{ params.cores }}"}, {"cores": "abc"})
