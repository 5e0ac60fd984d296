"""BellamyTrainOperator's templated inputs as they render without ``render_template_as_native_obj``:
``time_budget_s`` is read as every other duration (``spec.parse_duration``: ``"15m"``), and a
``job_types`` list rendered as text (``"['grep', 'sort']"``) is read back as the list, never split
on its commas into names such as ``"['grep'"``."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.operators.train import BellamyTrainOperator


def _op(**kwargs: Any) -> BellamyTrainOperator:
    return BellamyTrainOperator(task_id="train", **kwargs)


@pytest.mark.parametrize(
    ("given", "seconds"),
    [(120, 120.0), ("120", 120.0), ("15m", 900.0), ("PT15M", 900.0), (None, None), ("", None)],
)
def test_time_budget_is_read_as_any_duration(given: Any, seconds: float | None) -> None:
    assert _op(time_budget_s=given)._time_budget_s() == seconds


@pytest.mark.parametrize("given", ["15 minutes", "0", "-5", "inf"])
def test_a_time_budget_that_is_no_duration_is_refused_by_name(given: str) -> None:
    with pytest.raises(InvalidInputError, match=r"time_budget_s="):
        _op(time_budget_s=given)._time_budget_s()


@pytest.mark.parametrize(
    ("given", "names"),
    [
        ("['grep', 'sort']", ["grep", "sort"]),  # a list as Jinja renders it
        ('["grep", "sort"]', ["grep", "sort"]),
        ("grep, sort", ["grep", "sort"]),
        (["grep", "sort"], ["grep", "sort"]),
        ("all", ["all"]),
        ("[]", None),
        ("", None),
        (None, None),
    ],
)
def test_job_types_text_is_read_as_the_list_it_shows(given: Any, names: list[str] | None) -> None:
    assert _op(job_types=given)._job_types() == names


def test_job_types_text_that_is_no_list_is_refused_by_name() -> None:
    with pytest.raises(
        InvalidInputError, match=r"job_types='\[grep, sort': must be a list of job type names"
    ):
        _op(job_types="[grep, sort")._job_types()
