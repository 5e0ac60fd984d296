"""``BellamyTrainOperator``: retrain the general models of job types that have new runs.

For each job type (all by default) the façade pre-trains a candidate on the stored
successful runs, holds out the newest runs the active version has not seen,
compares candidate and active version on them (mean relative error), promotes the
candidate only if it is not worse and keeps the previous version for rollback
(``bellamy models rollback``). Job types without new runs are reported
``up_to_date`` and not retrained. The metrics of every job type go to the log and
the returned XCom.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.spec import parse_argument_list, parse_duration

if TYPE_CHECKING:
    from airflow.sdk import Context


class BellamyTrainOperator(BaseOperator):
    """Retrain and (conditionally) promote Bellamy models.

    :param job_types: job types to consider, a list, its rendered text (``"['grep', 'sort']"``) or
        names separated by commas; None = every job type in the store; "all" = the
        model of every job type (it sizes job types without a model of their own).
    :param time_budget_s: pre-training time budget per job type (early stop): seconds, or a
        duration's text (``"15m"``, ``"PT15M"``) as ``spec.parse_duration`` reads it.
    :param holdout_fraction: share of the newest unseen runs held out for the comparison.
    :param force: retrain even job types without new runs.
    :param seed: training seed (reproducible runs).
    :param fail_on_error: fail the task when a job type cannot be trained (default: log it
        and go on with the others, so one bad job type does not block the rest).
    """

    template_fields: Sequence[str] = ("job_types", "time_budget_s")
    ui_color = "#f5e6cc"

    def __init__(
        self,
        *,
        job_types: Sequence[str] | str | None = None,
        time_budget_s: float | None = None,
        holdout_fraction: float = 0.15,
        force: bool = False,
        seed: int = 0,
        fail_on_error: bool = False,
        bellamy_conn_id: str = "bellamy_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(holdout_fraction, (int, float)) or not 0 <= holdout_fraction < 1:
            raise InvalidInputError("holdout_fraction", holdout_fraction, "must be in [0, 1)")
        self.job_types = job_types
        self.time_budget_s = time_budget_s
        self.holdout_fraction = float(holdout_fraction)
        self.force = force
        self.seed = seed
        self.fail_on_error = fail_on_error
        self.bellamy_conn_id = bellamy_conn_id

    def _job_types(self) -> list[str] | None:
        value = self.job_types
        if value in (None, "", []):
            return None
        if isinstance(value, str):
            text = value.strip()
            if text[:1] in "[(":  # a list as a template renders it, never split on its commas
                try:
                    value = parse_argument_list(text, "job_types")
                except InvalidInputError:
                    raise InvalidInputError(
                        "job_types", self.job_types, "must be a list of job type names"
                    ) from None
            else:
                value = [v.strip() for v in text.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise InvalidInputError("job_types", self.job_types, "must be a list of job type names")
        return list(value) or None  # "[]" as [] and None: every job type

    def _time_budget_s(self) -> float | None:
        if self.time_budget_s in (None, ""):
            return None
        return parse_duration(self.time_budget_s, "time_budget_s")  # "900", "15m", "PT15M"

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from airflow_provider_bellamy.hooks.bellamy import BellamyHook

        facade = BellamyHook(self.bellamy_conn_id).get_facade()
        budget = self._time_budget_s()
        selected = self._job_types()
        targets: list[str | None] = list(selected) if selected else [None]
        reports: list[dict[str, Any]] = []
        errors: list[str] = []
        for job_type in targets:
            try:
                done = facade.train(
                    job_type,
                    seed=self.seed,
                    time_budget_s=budget,
                    holdout_fraction=self.holdout_fraction,
                    force=self.force,
                )
            except Exception as exc:
                if self.fail_on_error:
                    raise
                errors.append(f"{job_type or 'all'}: {type(exc).__name__}: {exc}")
                self.log.error("Bellamy: training %s failed: %s", job_type or "all job types", exc)
                continue
            for report in done:
                data = report.to_dict()
                reports.append(data)
                self.log.info(
                    "Bellamy: %s → %s (%s); version %s, active %s, %s train / %s held-out runs, "
                    "%.1f s; metrics %s",
                    data["job_type"],
                    data["outcome"],
                    data["reason"],
                    data.get("version"),
                    data.get("active_version_id"),
                    data.get("train_rows"),
                    data.get("holdout_rows"),
                    data.get("seconds", 0.0),
                    data.get("metrics"),
                )
        if errors and not reports:
            raise RuntimeError("Bellamy: no job type could be trained: " + "; ".join(errors))
        return reports
