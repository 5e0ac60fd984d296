"""The Bellamy façade end to end on real stores: train, version, predict, size, fall back, refuse bad input.

Training uses a slice of the bundled C3O sort traces and a small ensemble so the module stays quick.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

from airflow_provider_bellamy import facade
from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.exceptions import InvalidInputError, UnknownJobTypeError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.model import TrainingConfig
from airflow_provider_bellamy.records import context_columns

CONTEXT_KEYS = ["machine_type", "data_size_mb", "lines"]
SMALL = {"members": 2, "max_epochs": 100, "min_epochs": 20, "patience": 20}


def _sort_contexts() -> list[pd.DataFrame]:
    frame = load_traces("c3o", job_type="sort")
    return [group for _, group in frame.groupby(CONTEXT_KEYS, sort=True)]


@pytest.fixture(scope="module")
def contexts() -> list[pd.DataFrame]:
    return _sort_contexts()


def _context_of(runs: pd.DataFrame) -> dict[str, Any]:
    row = runs.iloc[0]
    return {k: row[k] for k in context_columns(runs.columns) if pd.notna(row[k])}


@pytest.fixture(scope="module")
def trained_db(tmp_path_factory: pytest.TempPathFactory, contexts: list[pd.DataFrame]) -> Iterator[Path]:
    """A store with 8 sort contexts (240 runs) and an active general sort model."""
    path = tmp_path_factory.mktemp("trained") / "bellamy.db"
    b = Bellamy(f"sqlite:///{path}")
    b.record_runs(pd.concat(contexts[:8], ignore_index=True))
    reports = b.train(config=TrainingConfig(**SMALL))
    assert [r.outcome for r in reports] == ["promoted"]
    yield path


@pytest.fixture
def trained(trained_db: Path, tmp_path: Path) -> Bellamy:
    """A private copy of the trained store (tests may add runs, models and decisions)."""
    copy = tmp_path / "bellamy.db"
    with sqlite3.connect(trained_db) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    return Bellamy(f"sqlite:///{copy}")


def _count_decisions(b: Bellamy) -> int:
    return len(b.list_decisions(limit=None))


# ---------------------------------------------------------------------------------------- training


def test_first_training_promotes_and_reports(trained: Bellamy) -> None:
    (model,) = trained.list_models()
    assert model["status"] == "active" and model["label"] == "sort/v1"
    metrics = model["metrics"]
    assert metrics["data_rows"] == 240 and metrics["holdout_rows"] == 36 and metrics["train_rows"] == 204
    assert 0 < metrics["holdout_mre"] < 1
    assert model["newest_run_id"] == 204  # trained on the older runs; the newest 15% were held out


def test_training_without_new_runs_is_up_to_date(trained: Bellamy) -> None:
    (report,) = trained.train("sort", config=TrainingConfig(**SMALL))
    assert report.outcome == "up_to_date" and not report.promoted
    assert len(trained.list_models()) == 1


def test_retraining_compares_promotes_invalidates_and_rolls_back(
    trained: Bellamy, contexts: list[pd.DataFrame]
) -> None:
    ctx = _context_of(contexts[1])
    assert trained.predict("sort", ctx, [4]).model_version.endswith("(from sort/v1)")

    trained.record_runs(pd.concat(contexts[8:10], ignore_index=True))
    (report,) = trained.train("sort", config=TrainingConfig(**SMALL), seed=1)
    m = report.metrics
    assert report.holdout_rows == m["holdout_rows"] > 0 and report.version == 2
    # Candidate and active model are compared on runs the active one never saw.
    assert m["active_version_id"] == 1 and m["active_holdout_mre"] is not None
    assert report.promoted == (m["holdout_mre"] <= m["active_holdout_mre"])
    statuses = {v["version"]: v["status"] for v in trained.list_models("sort")}
    assert statuses == ({1: "retired", 2: "active"} if report.promoted else {1: "active", 2: "candidate"})
    if not report.promoted:
        trained.promote(report.version_id)

    # The context's fine-tuned copy of v1 is stale once v2 is active.
    assert trained.predict("sort", ctx, [4]).model_version.endswith("(from sort/v2)")
    assert trained.rollback("sort")["label"] == "sort/v1"
    assert trained.predict("sort", ctx, [4]).model_version.endswith("(from sort/v1)")
    assert [v["status"] for v in trained.list_models("sort")] == ["retired", "active"]
    (again,) = trained.train("sort", config=TrainingConfig(**SMALL))
    assert again.outcome == "up_to_date" and again.version == 2


def test_train_refuses_what_it_cannot_train(tmp_path: Path) -> None:
    b = Bellamy(f"sqlite:///{tmp_path / 'b.db'}")
    with pytest.raises(InvalidInputError, match="no successful runs"):
        b.train()
    b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=5.0, status="failed")
    with pytest.raises(UnknownJobTypeError, match="job_type='sort'"):
        b.train("sort")
    with pytest.raises(InvalidInputError, match="job_type='grep': has no successful runs"):
        b.train("grep")
    with pytest.raises(InvalidInputError, match="holdout_fraction"):
        b.train(holdout_fraction=1.0)
    assert b.list_models() == []


# ---------------------------------------------------------------------------------------- predict


def test_predict_fine_tunes_once_and_reuses_the_stored_copy(
    trained: Bellamy, contexts: list[pd.DataFrame]
) -> None:
    runs = contexts[2]
    ctx = _context_of(runs)
    first = trained.predict("sort", ctx, [2, 4, 8, 12], confidence=0.9)
    assert first.method == "bellamy" and first.fallback_reason is None
    assert first.model_version.startswith("sort/ctx-") and first.model_version.endswith("/v1 (from sort/v1)")
    assert all(lo <= m <= hi for lo, m, hi in zip(first.lower_s, first.mean_s, first.upper_s, strict=True))
    assert first.mean_s[0] > first.mean_s[-1]  # more nodes, faster
    tuned = [m for m in trained.list_models(scope="context")]
    assert len(tuned) == 1 and tuned[0]["train_rows"] == len(runs)

    facade.clear_model_cache()  # a fresh process: the copy comes from the store, not a new fine-tune
    again = trained.predict("sort", ctx, [2, 4, 8, 12], confidence=0.9)
    assert again.mean_s == pytest.approx(first.mean_s)
    assert len(trained.list_models(scope="context")) == 1

    # A new run of the context makes the stored copy stale.
    trained.record_run(
        job_type="sort",
        framework="spark",
        scale_out=6,
        runtime_s=float(runs["runtime_s"].median()),
        context=ctx,
    )
    newer = trained.predict("sort", ctx, [2, 4, 8, 12])
    assert newer.model_version.split(" ")[0].endswith("/v2")
    versions = {m["version"]: m["status"] for m in trained.list_models(scope="context")}
    assert versions == {1: "retired", 2: "active"}

    # Copies do not pile up: the active one and the one before are kept.
    decision = trained.size("sort", ctx, [2, 4, 8, 12], 400.0)
    trained.record_run(job_type="sort", framework="spark", scale_out=10, runtime_s=100.0, context=ctx)
    assert trained.predict("sort", ctx, [4]).model_version.split(" ")[0].endswith("/v3")
    versions = {m["version"]: m["status"] for m in trained.list_models(scope="context")}
    assert versions == {2: "retired", 3: "active"}
    trained.record_run(job_type="sort", framework="spark", scale_out=10, runtime_s=101.0, context=ctx)
    trained.predict("sort", ctx, [4])
    assert sorted(m["version"] for m in trained.list_models(scope="context")) == [3, 4]
    audit = next(d for d in trained.list_decisions() if d["id"] == decision.decision_id)
    assert audit["model_version_id"] is None  # its copy (v2) was pruned ...
    assert audit["model_version"] == decision.model_version  # ... but the decision still names it


def test_unseen_context_gets_the_general_model_and_says_so(
    trained: Bellamy, contexts: list[pd.DataFrame]
) -> None:
    ctx = _context_of(contexts[12])  # never recorded
    pred = trained.predict("sort", ctx, [2, 4])
    assert pred.model_version == "sort/v1"
    assert "not fine-tuned" in pred.fallback_reason
    assert trained.list_models(scope="context") == []


def test_fine_tuned_prediction_is_closer_than_the_general_one(
    trained: Bellamy, contexts: list[pd.DataFrame]
) -> None:
    """The held-out context 7: fine-tuning on its runs must not be worse than the general model."""
    runs = contexts[7]
    ctx = _context_of(runs)
    truth = runs.groupby("scale_out")["runtime_s"].mean()
    general = trained.load_model(job_type="sort")
    gen_pred = general.predict({**ctx, "job_type": "sort"}, list(truth.index))
    tuned = trained.predict("sort", ctx, list(truth.index))
    gen_err = float((abs(gen_pred - truth.values) / truth.values).mean())
    tuned_err = float((abs(pd.Series(tuned.mean_s, index=truth.index) - truth) / truth).mean())
    assert tuned_err <= gen_err + 0.01


# ---------------------------------------------------------------------------------------- fallbacks


def test_no_model_falls_back_to_ernest_then_to_the_default(tmp_path: Path) -> None:
    b = Bellamy(f"sqlite:///{tmp_path / 'b.db'}")
    runs = load_traces("bell", job_type="grep")
    ctx = _context_of(runs)
    b.record_runs(runs[runs["scale_out"].isin([4, 8, 12])])
    pred = b.predict("grep", ctx, [4, 6, 8, 10, 12])
    assert pred.method == "ernest" and "Ernest" in pred.fallback_reason
    assert pred.mean_s[0] > pred.mean_s[-1]

    other = {**ctx, "data_size_mb": 1.0}
    b.record_run(job_type="grep", framework="spark", scale_out=4, runtime_s=50.0, context=other)
    with pytest.raises(InvalidInputError, match="Ernest needs >= 2 scale-outs"):
        b.predict("grep", other, [4, 8])


def test_unreadable_active_model_falls_back_and_says_why(
    trained: Bellamy, contexts: list[pd.DataFrame]
) -> None:
    ctx = _context_of(contexts[0])
    with trained.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE model_versions SET weights = :w WHERE id = 1"), {"w": b"garbage"})
    facade.clear_model_cache()  # as in a fresh process
    decision = trained.size("sort", ctx, [2, 4, 8, 12], 300.0)
    assert "active model sort/v1 cannot be read" in decision.fallback_reason
    assert "Ernest" in decision.fallback_reason  # the context has runs at 6 scale-outs
    assert decision.model_version is None and decision.decision_id is not None


def test_a_model_of_an_older_format_falls_back_until_retrained(
    trained: Bellamy, contexts: list[pd.DataFrame]
) -> None:
    """A stored model written by an earlier version (another model format): a launch falls back and
    says to retrain; `bellamy train` replaces it though no run changed, and launches use the new one."""
    import json

    from safetensors.numpy import load, save

    from airflow_provider_bellamy.store import ModelRepository

    data = trained.load_model(job_type="sort").to_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(json.loads(data[8 : 8 + size])["__metadata__"]["bellamy"])
    header["format"] = "bellamy-runtime-model/3"
    older = save(load(data), metadata={"bellamy": json.dumps(header)})
    trained.store.write(
        lambda s: ModelRepository(s).add(job_type="sort", scope="general", weights=older, status="active")
    )
    facade.clear_model_cache()
    ctx = _context_of(contexts[0])
    decision = trained.size("sort", ctx, [2, 4, 8, 12], 300.0)
    assert "active model sort/v2 cannot be read" in decision.fallback_reason
    assert "bellamy-runtime-model/3" in decision.fallback_reason and "retrain" in decision.fallback_reason
    assert decision.model_version is None

    (report,) = trained.train("sort", config=TrainingConfig(**SMALL))
    assert report.promoted and report.version == 3
    assert "active sort/v2 cannot be read" in report.reason and "replaced" in report.reason
    again = trained.size("sort", ctx, [2, 4, 8, 12], 300.0)
    assert again.fallback_reason is None and again.model_version.endswith("(from sort/v3)")


def test_a_model_predicting_nan_falls_back_and_says_why(
    trained: Bellamy, contexts: list[pd.DataFrame]
) -> None:
    """Weights gone NaN with a valid checksum: the band would size nothing (issue 18, D5)."""
    import numpy as np

    from airflow_provider_bellamy.store import ModelRepository

    model = trained.load_model(job_type="sort")
    for value in model.params.values():
        value[...] = np.nan
    weights = model.to_bytes()
    trained.store.write(
        lambda s: ModelRepository(s).add(job_type="sort", scope="general", weights=weights, status="active")
    )
    facade.clear_model_cache()
    ctx = _context_of(contexts[0])
    decision = trained.size("sort", ctx, [2, 4, 8, 12], 300.0)
    assert (
        "sort/v2" in decision.fallback_reason and "predicted non-finite runtimes" in decision.fallback_reason
    )
    assert "Ernest" in decision.fallback_reason  # the context has runs at 6 scale-outs
    assert all(np.isfinite([c.upper_s for c in decision.candidates]))
    # stored like any launch's decision, with its reason
    [row] = [d for d in trained.list_decisions(limit=None) if d["id"] == decision.decision_id]
    assert row["fallback_reason"] == decision.fallback_reason and row["model_version"] is None
    prediction = trained.predict("sort", ctx, [2, 4])
    assert prediction.method == "ernest" and "non-finite" in prediction.fallback_reason
    # a context without runs has no fallback model: the default scale-out, and the reason
    unseen = {**ctx, "data_size_mb": 123456.0}
    default = trained.size("sort", unseen, [2, 4, 8], 300.0)
    assert default.chosen_scale_out == 8 and "non-finite" in default.fallback_reason
    [row] = [d for d in trained.list_decisions(limit=None) if d["id"] == default.decision_id]
    assert row["chosen_scale_out"] == 8 and row["fallback_reason"] == default.fallback_reason
    with pytest.raises(InvalidInputError, match=r"cannot predict: .*non-finite"):
        trained.predict("sort", unseen, [2, 4])


# ---------------------------------------------------------------------------------------- bad input

BAD_SIZE_INPUTS = [
    ({"scale_outs": []}, "scale_outs"),
    ({"scale_outs": [0, 4]}, "scale_outs"),
    ({"scale_outs": [-2]}, "scale_outs"),
    ({"scale_outs": "4"}, "scale_outs"),  # one candidate, or 1 to 4?
    ({"scale_outs": 4}, "scale_outs"),
    ({"scale_outs": "4-1"}, "scale_outs"),
    ({"target_s": 0}, "target_s"),
    ({"target_s": -5.0}, "target_s"),
    ({"target_s": float("nan")}, "target_s"),
    ({"target_s": float("inf")}, "target_s"),
    ({"confidence": 0.0}, "confidence"),
    ({"confidence": 1.0}, "confidence"),
    ({"confidence": float("nan")}, "confidence"),
    ({"objective": "cheapest"}, "objective"),
    ({"price_per_node_hour": -1.0}, "price_per_node_hour"),
    ({"default_scale_out": 3}, "default_scale_out"),
    ({"provenance": {"dag": "x"}}, "provenance"),
    ({"context": {"data_size_mb": float("inf")}}, "context.data_size_mb"),
    ({"job_type": ""}, "job_type"),
]


@pytest.mark.parametrize(("override", "field"), BAD_SIZE_INPUTS)
def test_bad_size_input_names_field_and_writes_nothing(
    trained: Bellamy, contexts: list[pd.DataFrame], override: dict[str, Any], field: str
) -> None:
    args: dict[str, Any] = {
        "job_type": "sort",
        "context": _context_of(contexts[0]),
        "scale_outs": [2, 4, 8],
        "target_s": 600.0,
    }
    args.update(override)
    models_before = len(trained.list_models(scope=None))
    with pytest.raises(InvalidInputError) as err:
        trained.size(**args)
    assert err.value.field == field
    assert _count_decisions(trained) == 0
    assert len(trained.list_models(scope=None)) == models_before


def test_the_model_of_all_job_types_sizes_a_job_type_without_its_own(tmp_path: Path) -> None:
    """A new pipeline's job type has a few runs and no model: sized by the one model pre-trained on
    every job type (``train("all")``), fine-tuned on its runs, instead of Ernest's fallback; a job
    type with a model of its own keeps it; a context the model cannot read falls back, saying why."""
    c3o = load_traces("c3o")
    b = Bellamy(f"sqlite:///{tmp_path / 'b.db'}")
    for job in ("grep", "sgd"):
        runs = c3o[c3o["job_type"] == job]
        keys = context_columns(runs.columns)
        first = runs.groupby(keys, dropna=False, sort=True).ngroup() < 6
        b.record_runs(runs[first].dropna(axis=1, how="all"))
    b.train("grep", config=TrainingConfig(**SMALL))
    kmeans = c3o[c3o["job_type"] == "kmeans"].dropna(axis=1, how="all")
    first = kmeans.groupby(context_columns(kmeans.columns), dropna=False, sort=True).ngroup() == 0
    ctx_runs = kmeans[first]
    b.record_runs(ctx_runs.groupby("scale_out").head(1).iloc[:3])
    context = _context_of(ctx_runs)
    before = b.size("kmeans", context, [2, 4, 6, 8, 10, 12], 600.0)
    assert before.model_version is None and "Ernest" in (before.fallback_reason or "")

    (report,) = b.train("all", config=TrainingConfig(**SMALL))
    assert (report.job_type, report.outcome) == ("all", "promoted")
    assert {"grep", "sgd"} <= set(report.metrics["job_types"])  # kmeans' runs, the newest, held out
    assert set(report.metrics["unseen_job_type_validation_mre"]) == {"0", "1", "2", "3", "4", "5"}
    after = b.size("kmeans", context, [2, 4, 6, 8, 10, 12], 600.0)
    assert after.fallback_reason is None
    assert after.model_version.startswith("all/ctx-") and after.model_version.endswith("(from all/v1)")
    other = _context_of(kmeans[~first].iloc[:1])  # kmeans, another context, no runs of its own
    unseen = b.size("kmeans", other, [2, 4, 6, 8, 10, 12], 600.0, default_scale_out=6)
    assert unseen.chosen_scale_out == 6 and "never saw this job type run" in (unseen.fallback_reason or "")
    own = b.predict("grep", _context_of(c3o[c3o["job_type"] == "grep"].iloc[:1]), [2, 4])
    assert own.model_version.startswith("grep/")  # a job type with its own model keeps it

    b.record_run(job_type="etl", framework="spark", scale_out=4, runtime_s=100.0, context={"lines": 5.0})
    b.record_run(job_type="etl", framework="spark", scale_out=8, runtime_s=60.0, context={"lines": 5.0})
    etl = b.size("etl", {"lines": 5.0}, [4, 8], 90.0)
    assert etl.model_version is None
    assert "all/v1 cannot read this context" in (etl.fallback_reason or "")
    assert "Ernest" in (etl.fallback_reason or "")


def test_all_is_no_job_type_a_run_or_a_request_may_carry(trained: Bellamy) -> None:
    runs_before = trained.count_runs()
    with pytest.raises(InvalidInputError) as err:
        trained.record_run(job_type="all", framework="spark", scale_out=2, runtime_s=10.0)
    assert (err.value.field, err.value.value) == ("job_type", "all")
    with pytest.raises(InvalidInputError) as err:
        trained.size("all", {}, [2, 4], 100.0)
    assert err.value.field == "job_type"
    assert trained.count_runs() == runs_before


def test_unknown_job_type_is_refused_with_the_known_ones(trained: Bellamy) -> None:
    with pytest.raises(UnknownJobTypeError, match=r"job_type='wordcount'.*known job types: sort"):
        trained.size("wordcount", {"data_size_mb": 1.0}, [2, 4], 100.0)
    with pytest.raises(UnknownJobTypeError):
        trained.predict("wordcount", {}, [2])
    assert _count_decisions(trained) == 0
    empty = Bellamy(f"sqlite:///{trained.store.sqlite_file.parent / 'none' / 'b.db'}")
    with pytest.raises(UnknownJobTypeError, match="no job types are known yet"):
        empty.predict("sort", {}, [2])


# ---------------------------------------------------------------------------------------- size


def test_size_stores_the_decision_with_provenance(trained: Bellamy, contexts: list[pd.DataFrame]) -> None:
    runs = contexts[3]
    ctx = _context_of(runs)
    mean_at_4 = float(runs[runs["scale_out"] == 4]["runtime_s"].mean())
    prov = {"dag_id": "etl", "task_id": "sort", "run_id": "scheduled__1", "map_index": -1, "try_number": 1}
    decision = trained.size(
        "sort", ctx, [2, 4, 6, 8, 10, 12], 1.3 * mean_at_4, framework="spark", provenance=prov
    )
    assert decision.decision_id is not None and decision.created_at
    assert decision.feasible and decision.chosen_scale_out in (2, 4, 6)
    assert decision.model_version and decision.model_version.startswith("sort/ctx-")
    stored = trained.get_decision(decision.decision_id)
    assert stored.chosen_scale_out == decision.chosen_scale_out
    assert [c.scale_out for c in stored.candidates] == [2, 4, 6, 8, 10, 12]
    row = trained.list_decisions()[0]
    assert (row["dag_id"], row["task_id"], row["try_number"]) == ("etl", "sort", 1)
    assert row["model_version_id"] is not None and row["target_s"] == pytest.approx(1.3 * mean_at_4)

    run_row = trained.record_run(
        job_type="sort",
        framework="spark",
        scale_out=decision.chosen_scale_out,
        runtime_s=mean_at_4,
        context=ctx,
        decision_id=decision.decision_id,
        **prov,
    )
    assert trained.list_decisions()[0]["run_row_id"] == run_row


def test_infeasible_target_chooses_the_fastest(trained: Bellamy, contexts: list[pd.DataFrame]) -> None:
    ctx = _context_of(contexts[3])
    decision = trained.size("sort", ctx, [2, 4, 8], 1.0)
    assert not decision.feasible and decision.shortfall_s and decision.shortfall_s > 0
    assert decision.decision_id is not None


def test_size_without_any_model_uses_the_default_scale_out(tmp_path: Path) -> None:
    b = Bellamy(f"sqlite:///{tmp_path / 'b.db'}")
    b.record_run(
        job_type="wordcount", framework="flink", scale_out=4, runtime_s=80.0, context={"data_size_mb": 10.0}
    )
    largest = b.size("wordcount", {"data_size_mb": 10.0}, [2, 4, 8], 60.0)
    assert largest.chosen_scale_out == 8 and "default" in largest.fallback_reason
    chosen = b.size("wordcount", {"data_size_mb": 10.0}, [2, 4, 8], 60.0, default_scale_out=4)
    assert chosen.chosen_scale_out == 4 and chosen.decision_id == largest.decision_id + 1
    assert b.list_decisions()[0]["fallback_reason"] == chosen.fallback_reason


# Its latency is `bellamy benchmark speed`'s ("first size in a fresh process"): no timing here.
_FRESH_PROCESS = """
import json, sys
from airflow_provider_bellamy.facade import Bellamy
b = Bellamy(sys.argv[1])
heavy = sorted(m for m in ("torch", "pandas") if m in sys.modules)
d = b.size("sort", json.loads(sys.argv[2]), [2, 4, 6, 8, 10, 12], 300.0)
print(json.dumps({"chosen": d.chosen_scale_out, "model": d.model_version, "heavy_after_import": heavy}))
"""


def test_first_size_in_a_fresh_process(
    trained: Bellamy, contexts: list[pd.DataFrame], tmp_path: Path
) -> None:
    ctx = _context_of(contexts[4])
    trained.size("sort", ctx, [2, 4, 6, 8, 10, 12], 300.0)  # the fine-tuned copy is in the store
    versions = len(trained.list_models(scope=None))
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        # A deployed package has compiled bytecode; where the environment forbids writing it
        # next to the sources, keep it in a cache that outlives the test run instead.
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "bellamy-test-pycache")
    out = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, str(trained.store.url), json.dumps(ctx)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=env,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["heavy_after_import"] == []  # importing the façade loads neither torch nor pandas
    # The fresh process loaded the stored copies: it neither fine-tuned nor trained anything.
    assert len(trained.list_models(scope=None)) == versions
    assert result["model"].endswith("(from sort/v1)")


@pytest.mark.postgres
def test_train_predict_size_on_postgres(postgres_url: str) -> None:
    b = Bellamy(postgres_url)
    b.upgrade()
    frame = pd.concat(_sort_contexts()[:4], ignore_index=True)
    b.record_runs(frame)
    (report,) = b.train(config=TrainingConfig(**SMALL))
    assert report.promoted
    ctx = _context_of(frame)
    decision = b.size("sort", ctx, [2, 4, 8], 600.0)
    assert decision.decision_id is not None and decision.model_version.startswith("sort/ctx-")
    assert len(b.list_models(scope="context")) == 1
    assert b.get_decision(decision.decision_id).chosen_scale_out == decision.chosen_scale_out


def test_a_context_far_outside_the_training_data_is_flagged_with_a_wide_band(
    trained: Bellamy, contexts: list[pd.DataFrame]
) -> None:
    ctx = _context_of(contexts[0])
    inside = trained.size("sort", ctx, [2, 4, 8, 12], target_s=600)
    far = trained.size("sort", {**ctx, "data_size_mb": 1e308}, [2, 4, 8, 12], target_s=600)
    assert "extrapolating" not in inside.reason and not inside.extrapolation["kinds"]
    assert (
        "[extrapolating: data_size_mb 1e+308 is" in far.reason and "above the largest trained" in far.reason
    )
    assert far.extrapolation["kinds"] == ["numeric"]

    def width(d: Any) -> float:
        return max(c.upper_s / c.predicted_s for c in d.candidates)

    assert width(far) > 10 * width(inside)
    assert trained.get_decision(far.decision_id).reason == far.reason  # stored as decided
    # and what it claimed, beyond the reason's words
    stored = trained.get_decision(far.decision_id)
    assert stored.extrapolation == far.extrapolation and stored.extrapolating is True
    assert stored.band_note == far.band_note is not None
    assert stored.requested_confidence == far.requested_confidence == 0.9 and not stored.capped
    assert trained.get_decision(inside.decision_id).extrapolating is False


def test_size_spec_sizes_a_parsed_spec_without_parsing_it_again(
    trained: Bellamy, contexts: list[pd.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator parses its sizing arguments once per launch; the façade sizes that spec as
    ``size()`` sizes the same arguments, without a second parse."""
    from airflow_provider_bellamy.spec import SizingSpec

    ctx = _context_of(contexts[3])
    arguments = {"job_type": "sort", "properties": ctx, "scale_outs": [2, 4, 8, 12], "confidence": 0.8}
    spec = SizingSpec.parse({**arguments, "deadline": "2030-01-01T00:00:00+00:00"})
    parsed: list[Any] = []
    real_parse = SizingSpec.parse.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        SizingSpec, "parse", classmethod(lambda cls, *a, **k: parsed.append(a) or real_parse(cls, *a, **k))
    )
    prov = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1, "try_number": 1}
    via_spec = trained.size_spec(spec, target_s=600.0, provenance=prov)  # the deadline's target
    assert parsed == []
    via_args = trained.size("sort", ctx, [2, 4, 8, 12], 600.0, confidence=0.8)
    assert len(parsed) == 1
    for key in ("chosen_scale_out", "feasible", "target_s", "confidence", "context", "candidates"):
        assert getattr(via_spec, key) == getattr(via_args, key), key
    stored = trained.get_decision(via_spec.decision_id)
    assert stored.target_s == 600.0 and stored.chosen_scale_out == via_spec.chosen_scale_out
    assert trained.list_decisions(limit=2)[1]["task_id"] == "t"

    # what it refuses, naming the field; nothing is stored for it
    before = _count_decisions(trained)
    with pytest.raises(InvalidInputError, match="spec"):
        trained.size_spec(arguments)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"spec\.scale_outs"):
        trained.size_spec(SizingSpec.parse({"job_type": "sort"}, require_scale_outs=False))
    unrendered = SizingSpec.parse({**arguments, "scale_outs": "{{ params.n }}"}, defer_templates=True)
    with pytest.raises(InvalidInputError, match=r"spec\.scale_outs='\{\{ params\.n \}\}'"):
        trained.size_spec(unrendered)
    with pytest.raises(InvalidInputError, match="provenance"):
        trained.size_spec(spec, provenance={"dag": "d"})
    assert _count_decisions(trained) == before

    # record_run's keyword arguments: a wrong or missing name is a TypeError as for any call
    row = trained.record_run(job_type="sort", framework="spark", scale_out=3, runtime_s=90.0, context=ctx)
    assert trained.list_runs("sort", limit=1)[0]["id"] == row
    runs = trained.count_runs("sort")
    with pytest.raises(TypeError, match="'runtime'"):
        trained.record_run(job_type="sort", framework="spark", scale_out=3, runtime=90.0)
    with pytest.raises(TypeError, match="'runtime_s'"):
        trained.record_run(job_type="sort", framework="spark", scale_out=3)
    assert trained.count_runs("sort") == runs
