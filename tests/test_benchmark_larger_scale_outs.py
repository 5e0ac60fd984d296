"""The larger-scale-outs protocol: each job type's largest third of scale-outs held out, the held-out
contexts fine-tuned below the cut and tested above it, no training run above it; splits, draws,
skipped job types, refusals and small end-to-end reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.benchmarks.common import (
    HeldOutTask,
    benchmark_runs,
    held_out_tasks,
    with_context_ids,
)
from airflow_provider_bellamy.benchmarks.sizing import K_SIZING, TARGETS_PER_CONTEXT, run_sizing
from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.exceptions import InvalidInputError

from .test_benchmark_transfer import _sort_contexts

PROTOCOL = "larger-scale-outs"


def test_c3o_holds_out_its_two_largest_scale_outs_in_the_folds_and_never_trains_above_the_cut() -> None:
    data = benchmark_runs("c3o", protocol=PROTOCOL)
    jobs = sorted(data.runs["job_type"].unique())
    # C3O ran at 2..12: the largest third (10, 12) held out, 2..8 kept
    assert data.report_fields() == {
        "protocol": PROTOCOL,
        "skipped_job_types": {},
        "held_out_scale_outs": {job: [10, 12] for job in jobs},
    }
    tasks = list(held_out_tasks(data, seed=0))
    folds = list(held_out_tasks(benchmark_runs("c3o"), seed=0))
    assert [(t.algorithm, t.fold) for t in tasks] == [(t.algorithm, t.fold) for t in folds]
    for task, fold in zip(tasks, folds, strict=True):
        assert task.cut == 8 and task.label() == f"fold {task.fold}, scale-out > 8"
        # the folds protocol's contexts, every one of which has runs above the cut
        assert set(task.held_out["context_id"]) == set(fold.held_out["context_id"])
        assert task.held_out.equals(fold.held_out)
        # trained on the other folds' runs at or below the cut: nothing above it, no held-out context
        assert task.train["scale_out"].max() == 8
        assert not set(task.train["context_id"]) & set(task.held_out["context_id"])
        assert task.train.equals(fold.train[fold.train["scale_out"] <= 8])


def test_bell_holds_out_each_job_and_every_run_above_its_cut_leaves_the_training_data() -> None:
    data = benchmark_runs("bell", protocol=PROTOCOL)
    assert data.structure == "leave-job-out"
    assert data.report_fields()["held_out_scale_outs"] == {
        job: [44, 48, 52, 56, 60] for job in ("grep", "pagerank", "sgd")
    }
    tasks = list(held_out_tasks(data, seed=0))
    assert [t.algorithm for t in tasks] == ["grep", "pagerank", "sgd"]
    for task in tasks:
        assert task.cut == 40
        assert set(task.held_out["dataset"]) == {"bell"} and task.held_out["context_id"].nunique() == 1
        assert set(task.held_out["job_type"]) == {task.algorithm}
        # pre-trained on every other run (C3O's and the other Bell jobs') up to the cut
        assert task.train["scale_out"].max() == 40
        assert set(task.train["dataset"]) == {"bell", "c3o"}
        assert not set(task.train["context_id"]) & set(task.held_out["context_id"])
        others = data.runs[~data.runs["context_id"].isin(set(task.held_out["context_id"]))]
        assert len(task.train) == int((others["scale_out"] <= 40).sum())


def test_a_draw_fine_tunes_below_the_cut_and_tests_every_run_above_it() -> None:
    runs = with_context_ids(_sort_contexts(1).iloc[:0])
    context = with_context_ids(_sort_contexts(1)).query("machine_type == 'c4.2xlarge'")
    task = HeldOutTask("sort", 0, runs, context, cut=8)
    for k in range(6):
        points, test = task.draw(context, k, np.random.default_rng(k))
        assert len(points) == min(k, 4) and points["scale_out"].nunique() == len(points)
        assert (points["scale_out"] <= 8).all()
        assert test.equals(context[context["scale_out"] > 8])
        # k = 5 finds only 4 kept scale-outs: left out at k = 5, not reported under its name
        assert task.draws_fall_short(points, k) == (k == 5)
    # the other protocols' draws, and their short draws, are as before
    plain = HeldOutTask("sort", 0, runs, context)
    points, test = plain.draw(context, 6, np.random.default_rng(0))
    assert len(points) == 6 and test.empty and not plain.draws_fall_short(points, 7)


def test_job_types_with_fewer_than_three_scale_outs_are_named_and_a_file_of_only_those_refused(
    tmp_path: Path,
) -> None:
    sort = _sort_contexts(2)
    small = sort[sort["scale_out"] <= 4].assign(job_type="grep")
    path = tmp_path / "mixed.csv"
    pd.concat([sort, small], ignore_index=True).to_csv(path, index=False)
    data = benchmark_runs(traces=path, protocol=PROTOCOL)
    fields = data.report_fields()
    assert fields["skipped_job_types"] == {
        "grep": "2 scale-out(s): fewer than 3, no larger third to hold out with scale-outs left to fine-tune on"
    }
    assert fields["held_out_scale_outs"] == {"sort": [10, 12]}
    assert {t.algorithm for t in held_out_tasks(data, seed=0)} == {"sort"}
    path = tmp_path / "small.csv"
    small.to_csv(path, index=False)
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs(traces=path, protocol=PROTOCOL)
    assert err.value.field == "traces" and PROTOCOL in str(err.value) and "fewer than 3" in str(err.value)


def test_a_held_out_context_without_a_run_above_the_cut_is_neither_tested_nor_trained_on(
    tmp_path: Path,
) -> None:
    sort = _sort_contexts(2)
    # c4.2xlarge's contexts ran only up to the cut (the job type's other contexts set it at 8)
    path = tmp_path / "runs.csv"
    sort[~(sort["machine_type"].eq("c4.2xlarge") & (sort["scale_out"] > 8))].to_csv(path, index=False)
    data = benchmark_runs(traces=path, protocol=PROTOCOL)
    runs = data.runs
    lost = set(runs.loc[runs["machine_type"].eq("c4.2xlarge"), "context_id"])
    assert len(lost) == 2
    tasks = list(held_out_tasks(data, seed=0))
    seen = set().union(*(set(t.held_out["context_id"]) for t in tasks))
    assert seen == set(runs["context_id"]) - lost
    for task in tasks:
        assert task.cut == 8
        assert (task.held_out.groupby("context_id")["scale_out"].max() > task.cut).all()
        # a lost context is in some fold: never trained on where it is held out
        folds = list(held_out_tasks(benchmark_runs(traces=path), seed=0))
        held = set(folds[task.fold].held_out["context_id"])
        assert not held & set(task.train["context_id"])


def test_the_bundled_sets_serve_the_protocol_and_a_wrong_one_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs("bell", protocol="leave-size-out")
    assert err.value.field == "protocol" and "larger-scale-outs" in str(err.value)


@pytest.fixture(scope="module")
def two_contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two sort contexts (two folds: two pre-trainings) and a model cache accuracy and sizing share."""
    folder = tmp_path_factory.mktemp("larger")
    path = folder / "runs.csv"
    _sort_contexts(1).query("machine_type != 'r4.2xlarge'").to_csv(path, index=False)
    return path, folder / "cache"


def test_accuracy_reports_the_k_the_kept_scale_outs_allow(
    two_contexts: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, cache = two_contexts
    out = tmp_path / "acc.json"
    command = ["benchmark", "accuracy", "--traces", str(path), "--quick", "--seeds", "1"]
    assert main([*command, "--protocol", PROTOCOL, "--model-cache", str(cache), "--json", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "larger-scale-outs" in printed and "sort scale-outs 10, 12" in printed
    report = json.loads(out.read_text())
    assert (report["protocol"], report["held_out_scale_outs"]) == (PROTOCOL, {"sort": [10, 12]})
    assert list(report["results"]) == ["bellamy", "ernest", "gbm"]
    assert report["timings"]["pretrains"] == 2
    # 2, 4, 6, 8 kept: k = 0..4 measured, k = 5 left out for every model and band measure
    for model in ("bellamy", "gbm"):
        assert all(np.isfinite(report["results"][model][str(k)]) for k in range(5)), model
        assert report["results"][model]["5"] is None, model
    band = report["band"]["bellamy"]
    assert all(0.0 <= band["overall"]["above_lower"][str(k)] <= 1.0 for k in range(5))
    assert band["overall"]["above_lower"]["5"] is None and band["interval_95"]["inside"]["5"] is None
    assert report["coverage"]["overall"]["5"] is None


def test_sizing_replays_the_larger_scale_outs_as_candidates(
    two_contexts: tuple[Path, Path], tmp_path: Path
) -> None:
    path, cache = two_contexts
    decisions = tmp_path / "decisions.jsonl"
    report = run_sizing(
        traces=path,
        protocol=PROTOCOL,
        seeds=1,
        quick=True,
        min_draws=1,
        model_cache=cache,
        decisions=decisions,
    )
    assert report["protocol"] == PROTOCOL and report["held_out_scale_outs"] == {"sort": [10, 12]}
    # k = 5 needs five kept scale-outs: not decided
    assert report["k"] == [k for k in K_SIZING if k <= 4] and "5" not in report["per_k"]
    per_context = TARGETS_PER_CONTEXT["folds"]
    assert report["policies"]["oracle"]["decisions"] == 2 * per_context * 4
    lines = [json.loads(line) for line in decisions.read_text().splitlines()]
    assert len(lines) == report["policies"]["bellamy"]["decisions"]
    for line in lines:
        assert line["cut"] == 8 and line["task"].endswith("scale-out > 8")
        # fine-tuned below the cut, deciding among every scale-out, the larger ones included
        assert len(line["tuned_on"]) == line["k"] and max(line["tuned_on"]) <= 8
        assert line["scale_outs"] == [2, 4, 6, 8, 10, 12]
    beyond = [line["decisions"]["oracle"]["scale_out"] > 8 for line in lines]
    assert report["beyond_cut"]["share"] == pytest.approx(np.mean(beyond))
    for policy, stats in report["beyond_cut"]["policies"].items():
        assert stats["decisions"] == sum(beyond)
        if any(beyond):
            low, high = stats["interval_95"]["attainment"]
            assert 0.0 <= low <= high <= 1.0
        if any(beyond):
            met = [line["decisions"][policy]["met"] for line, b in zip(lines, beyond, strict=True) if b]
            assert stats["attainment"] == pytest.approx(np.mean(met))
