"""The benchmarks on a user's own runs (`--traces FILE`): splits, reports and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.benchmarks.accuracy import run_accuracy
from airflow_provider_bellamy.benchmarks.common import (
    HeldOutTask,
    benchmark_runs,
    held_out_tasks,
    map_held_out_tasks,
    pretrain,
)
from airflow_provider_bellamy.benchmarks.sizing import K_SIZING, TARGETS_PER_CONTEXT, run_sizing
from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.exceptions import InvalidInputError


def _contexts(job_type: str, count: int) -> pd.DataFrame:
    """``count`` bundled C3O contexts of one job type, as a user's export would hold them."""
    runs = load_traces("c3o", job_type=job_type).drop(columns=["dataset"])
    keys = [c for c in runs.columns if c not in ("scale_out", "runtime_s")]
    ids = runs.groupby(keys, dropna=False, sort=True).ngroup()
    return runs[ids < count].dropna(axis=1, how="all")


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    """Three contexts of sort, one of grep (no second grep context: the folds cannot hold it out),
    and a failed run that must not count."""
    frame = pd.concat([_contexts("sort", 3), _contexts("grep", 1)], ignore_index=True)
    failed = frame.iloc[[0]].assign(status="failed", runtime_s=1.0)
    path = tmp_path / "my_runs.csv"
    pd.concat([frame, failed], ignore_index=True).to_csv(path, index=False)
    return path


def test_bundled_sets_keep_their_protocols() -> None:
    c3o = benchmark_runs("c3o")
    assert (c3o.protocol, c3o.report_fields()) == ("folds", {})
    tasks = list(held_out_tasks(c3o, seed=0))
    assert len(tasks) == 5 * c3o.runs["job_type"].nunique()
    for job in c3o.runs["job_type"].unique():
        held = [set(t.held_out["context_id"]) for t in tasks if t.algorithm == job]
        assert set().union(*held) == set(c3o.runs.loc[c3o.runs["job_type"] == job, "context_id"])
        assert sum(len(h) for h in held) == len(set().union(*held))  # the folds are disjoint
    bell = list(held_out_tasks("bell", seed=0))
    assert [t.algorithm for t in bell] == ["grep", "pagerank", "sgd"]
    for task in bell:  # one Bell job held out, every other bundled run (C3O's too) trained on
        assert set(task.held_out["dataset"]) == {"bell"}
        assert set(task.held_out["job_type"]) == {task.algorithm}
        assert "c3o" in set(task.train["dataset"])
        assert not set(task.train["context_id"]) & set(task.held_out["context_id"])


def test_a_traces_file_is_split_into_folds_of_its_own_contexts(traces: Path) -> None:
    data = benchmark_runs(traces=traces)
    assert data.protocol == "folds" and data.name == "my_runs.csv"
    assert (data.runs["status"] != "failed").all()
    assert data.job_types_skipped() == {"grep": "one context: nothing of its job type left to pre-train on"}
    tasks = list(held_out_tasks(data, seed=0))
    assert [(t.algorithm, t.fold) for t in tasks] == [("sort", 0), ("sort", 1), ("sort", 2)]
    assert all(t.held_out["context_id"].nunique() == 1 for t in tasks)
    assert all(set(t.train["job_type"]) == {"sort"} for t in tasks)


def test_leave_job_out_pretrains_a_file_s_job_on_everything_else(traces: Path) -> None:
    data = benchmark_runs(traces=traces, protocol="leave-job-out")
    assert data.job_types_skipped() == {}
    assert int(data.evaluated.sum()) == len(pd.read_csv(traces)) - 1  # the failed run left out
    tasks = {t.algorithm: t for t in held_out_tasks(data, seed=0)}
    assert sorted(tasks) == ["grep", "sort"]
    sort = tasks["sort"]
    assert set(sort.held_out["job_type"]) == {"sort"}
    assert sort.held_out["context_id"].nunique() == 3
    # the bundled traces (C3O's own sort contexts, minus those the file holds) and the file's grep
    assert len(sort.train) > 1000 and not set(sort.train["context_id"]) & set(sort.held_out["context_id"])
    # the file repeats bundled runs: those leave the training data, only the file's are replayed
    file_sort = pd.read_csv(traces).query("job_type == 'sort' and status != 'failed'")
    assert len(sort.held_out) == len(file_sort)


def test_the_sizing_replay_runs_on_a_traces_file(traces: Path) -> None:
    report = run_sizing(traces=traces, seeds=1, quick=True, min_draws=1)
    assert report["dataset"] == "my_runs.csv" and report["protocol"] == "folds"
    assert report["skipped_job_types"] == {
        "grep": "one context: nothing of its job type left to pre-train on"
    }
    per_context = TARGETS_PER_CONTEXT["folds"]
    for policy, stats in report["policies"].items():
        assert stats["decisions"] == 3 * per_context * len(K_SIZING), policy
        assert 0.0 <= stats["attainment"] <= 1.0
    oracle = report["policies"]["oracle"]
    assert oracle["attainment"] == 1.0 and oracle["node_seconds_vs_oracle"] == 1.0
    # always-max pays for the largest cluster on every target
    assert report["policies"]["always_max"]["node_seconds_vs_oracle"] > 1.0


def test_the_accuracy_command_runs_on_a_traces_file(traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "acc.json"
    command = ["benchmark", "accuracy", "--traces", str(traces), "--quick", "--confidence", "0.8"]
    assert main([*command, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["dataset"], report["protocol"], report["seeds"]) == ("my_runs.csv", "folds", 1)
    assert list(report["per_algorithm"]) == ["sort"]
    errors = [report["results"][m][str(k)] for m in ("bellamy", "gbm") for k in range(6)]
    assert all(e is not None and np.isfinite(e) and e >= 0 for e in errors)
    assert report["timings"]["pretrains"] == 3
    # the band's coverage of the runs it was not tuned on: one algorithm, so overall is its own
    coverage = report["coverage"]
    assert coverage["confidence"] == 0.8 and coverage["overall"] == coverage["per_algorithm"]["sort"]
    assert all(0.5 < coverage["overall"][str(k)] <= 1.0 for k in range(6))
    # beside it what makes it honest: the lower bound, both, and the width, for each model with a band
    band = report["band"]
    assert band["confidence"] == 0.8 and set(band) == {"confidence", "bellamy", "ernest"}
    bellamy = band["bellamy"]
    assert bellamy["overall"]["under_upper"] == coverage["overall"]
    for k in map(str, range(6)):
        shares = bellamy["overall"]
        assert shares["inside"][k] <= min(shares["under_upper"][k], shares["above_lower"][k])
        assert shares["mean_log_width"][k] > 0
        for measure in ("under_upper", "above_lower", "inside", "mean_log_width"):
            low, high = bellamy["interval_95"][measure][k]
            assert low <= shares[measure][k] <= high
    # Ernest has no band without runs
    assert band["ernest"]["overall"]["inside"]["0"] is None
    assert band["ernest"]["overall"]["inside"]["2"] is not None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dataset": "bell", "protocol": "folds"}, "protocol"),  # the bundled sets have their own
        ({"dataset": "tpch"}, "dataset"),
        ({"protocol": "random"}, "protocol"),
        ({"traces_name": "missing.csv"}, "path"),
    ],
)
def test_bad_benchmark_runs_are_refused_naming_the_field(
    kwargs: dict[str, str], field: str, traces: Path
) -> None:
    if "traces_name" in kwargs:
        kwargs = {"traces": str(traces.parent / kwargs["traces_name"])}
    elif "protocol" in kwargs and "dataset" not in kwargs:
        kwargs = {**kwargs, "traces": str(traces)}
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs(**kwargs)
    assert err.value.field == field


def test_a_file_no_split_can_use_is_refused_before_any_training(tmp_path: Path) -> None:
    one_context = tmp_path / "one.csv"
    _contexts("sort", 1).to_csv(one_context, index=False)
    with pytest.raises(InvalidInputError) as err:
        run_sizing(traces=one_context, quick=True)
    assert err.value.field == "traces" and "folds" in str(err.value)
    only_failed = tmp_path / "failed.csv"
    _contexts("sort", 2).assign(status="failed").to_csv(only_failed, index=False)
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs(traces=only_failed)
    assert err.value.field == "traces" and "no successful run" in str(err.value)


@pytest.mark.parametrize("confidence", [0.0, 1.5, float("nan")])
def test_a_band_confidence_outside_0_1_is_refused_before_any_training(confidence: float) -> None:
    for run in (run_accuracy, run_sizing):
        with pytest.raises(InvalidInputError) as err:
            run(dataset="bell", confidence=confidence)
        assert err.value.field == "confidence"


def test_the_cli_refuses_a_protocol_for_a_bundled_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["benchmark", "sizing", "--dataset", "bell", "--protocol", "folds"]) == 2
    assert "protocol" in capsys.readouterr().err


def _describe(data: object, seed: int, task: HeldOutTask, *, salt: int) -> tuple[object, ...]:
    """What a worker saw of its task (module level: spawned workers import it)."""
    rng = np.random.default_rng(seed * 100 + task.fold + salt)
    return (seed, task.algorithm, task.fold, len(task.train), len(task.held_out), float(rng.random()))


def test_workers_get_every_task_once_and_results_come_back_in_task_order(traces: Path) -> None:
    runs = {"dataset": "c3o", "traces": traces, "protocol": None}
    one = map_held_out_tasks(_describe, 2, **runs, salt=7)
    two = map_held_out_tasks(_describe, 2, **runs, workers=2, salt=7)
    assert two == one
    # seed by seed, each seed's folds of sort (grep is skipped: one context)
    assert [(s, a, f) for s, a, f, *_ in one] == [(s, "sort", f) for s in (0, 1) for f in range(3)]


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_a_bad_worker_count_is_refused_naming_the_field(traces: Path, workers: object) -> None:
    for run in (run_accuracy, run_sizing):
        with pytest.raises(InvalidInputError) as error:
            run(traces=traces, quick=True, workers=workers)  # type: ignore[operator]
        assert error.value.field == "workers"


def test_a_model_cache_pretrains_each_split_once(traces: Path, tmp_path: Path) -> None:
    data = benchmark_runs(traces=traces)
    task = next(held_out_tasks(data, 0))
    cache = tmp_path / "models"
    first = pretrain(task, 0, True, cache)
    [stored] = cache.iterdir()
    again = pretrain(task, 0, True, cache)
    assert list(cache.iterdir()) == [stored]  # read back, not trained anew
    context = task.held_out.iloc[0].drop(["context_id", "runtime_s"]).to_dict()
    np.testing.assert_array_equal(again.predict(context, [1, 4, 8]), first.predict(context, [1, 4, 8]))
    pretrain(task, 1, True, cache)  # another seed is another model
    assert len(list(cache.iterdir())) == 2


def test_more_draws_keep_the_first_draw_and_each_context_one_bootstrap_unit(
    traces: Path, tmp_path: Path
) -> None:
    from airflow_provider_bellamy.benchmarks.accuracy import _evaluate_task

    data = benchmark_runs(traces=traces)
    task = next(held_out_tasks(data, 0))
    kwargs = {"quick": True, "confidence": 0.9, "model_cache": tmp_path / "models"}
    one = _evaluate_task(data, 0, task, **kwargs)
    three = _evaluate_task(data, 0, task, draws=3, **kwargs)
    contexts = task.held_out["context_id"].nunique()
    for k in range(1, 6):
        # the first draw is the one-draw benchmark's, run for run; the others add as many again
        assert three.covered[k][: len(one.covered[k])] == one.covered[k]
        assert len(three.covered[k]) > len(one.covered[k])
        assert len(three.errors["bellamy"][k]) == len(three.covered[k])
        # one band row per context, holding every draw's runs
        rows = np.array(three.bands["bellamy"][k])
        assert len(rows) == len(one.bands["bellamy"][k]) == contexts
        assert rows[:, 0].sum() == len(three.covered[k])
        assert rows[:, 1].sum() == sum(three.covered[k])


def test_a_draw_count_under_one_is_refused_naming_the_field(traces: Path) -> None:
    with pytest.raises(InvalidInputError) as error:
        run_accuracy(traces=traces, quick=True, draws=0)
    assert error.value.field == "draws"
