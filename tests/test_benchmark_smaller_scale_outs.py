"""The smaller-scale-outs protocol, larger-scale-outs' mirror: each job type's smallest third of
scale-outs held out, the held-out contexts fine-tuned above the cut and tested below it, no training
run below it; splits, draws, skipped job types, refusals and small end-to-end reports."""

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
from airflow_provider_bellamy.benchmarks.sizing import (
    K_SIZING,
    TARGETS_PER_CONTEXT,
    render_sizing,
    run_sizing,
)
from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.exceptions import InvalidInputError

from .test_benchmark_transfer import _sort_contexts

PROTOCOL = "smaller-scale-outs"


def test_c3o_holds_out_its_two_smallest_scale_outs_in_the_folds_and_never_trains_below_the_cut() -> None:
    data = benchmark_runs("c3o", protocol=PROTOCOL)
    jobs = sorted(data.runs["job_type"].unique())
    # C3O ran at 2..12: the smallest third (2, 4) held out, 6..12 kept
    assert data.report_fields() == {
        "protocol": PROTOCOL,
        "skipped_job_types": {},
        "held_out_scale_outs": {job: [2, 4] for job in jobs},
    }
    tasks = list(held_out_tasks(data, seed=0))
    folds = list(held_out_tasks(benchmark_runs("c3o"), seed=0))
    assert [(t.algorithm, t.fold) for t in tasks] == [(t.algorithm, t.fold) for t in folds]
    for task, fold in zip(tasks, folds, strict=True):
        assert (task.cut, task.side) == (6, "below")
        assert task.label() == f"fold {task.fold}, scale-out < 6"
        # the folds protocol's contexts, every one of which has runs below the cut
        assert task.held_out.equals(fold.held_out)
        # trained on the other folds' runs at or above the cut: nothing below it, no held-out context
        assert task.train["scale_out"].min() == 6
        assert not set(task.train["context_id"]) & set(task.held_out["context_id"])
        assert task.train.equals(fold.train[fold.train["scale_out"] >= 6])


def test_bell_holds_out_each_job_and_every_run_below_its_cut_leaves_the_training_data() -> None:
    data = benchmark_runs("bell", protocol=PROTOCOL)
    assert data.structure == "leave-job-out"
    assert data.report_fields()["held_out_scale_outs"] == {
        job: [4, 8, 12, 16, 20] for job in ("grep", "pagerank", "sgd")
    }
    tasks = list(held_out_tasks(data, seed=0))
    assert [t.algorithm for t in tasks] == ["grep", "pagerank", "sgd"]
    for task in tasks:
        assert task.cut == 24
        assert (
            set(task.held_out["job_type"]) == {task.algorithm} and task.held_out["context_id"].nunique() == 1
        )
        # every run below the cut leaves, C3O's (2..12) included: the other Bell jobs' runs remain
        assert task.train["scale_out"].min() == 24
        assert set(task.train["dataset"]) == {"bell"}
        others = data.runs[~data.runs["context_id"].isin(set(task.held_out["context_id"]))]
        assert len(task.train) == int((others["scale_out"] >= 24).sum())


def test_a_draw_fine_tunes_above_the_cut_and_tests_every_run_below_it() -> None:
    runs = with_context_ids(_sort_contexts(1).iloc[:0])
    context = with_context_ids(_sort_contexts(1)).query("machine_type == 'c4.2xlarge'")
    task = HeldOutTask("sort", 0, runs, context, cut=6, side="below")
    for k in range(6):
        points, test = task.draw(context, k, np.random.default_rng(k))
        assert len(points) == min(k, 4) and points["scale_out"].nunique() == len(points)
        assert (points["scale_out"] >= 6).all()
        assert test.equals(context[context["scale_out"] < 6])
        # k = 5 finds only 4 kept scale-outs (6..12): left out at k = 5
        assert task.draws_fall_short(points, k) == (k == 5)
    # the same context cut at the other end: drawn below, tested above
    above = HeldOutTask("sort", 0, runs, context, cut=8)
    points, test = above.draw(context, 4, np.random.default_rng(0))
    assert (points["scale_out"] <= 8).all() and test.equals(context[context["scale_out"] > 8])


@pytest.mark.parametrize(
    ("protocol", "third", "held"), [(PROTOCOL, "smaller", [2, 4]), ("larger-scale-outs", "larger", [10, 12])]
)
def test_job_types_with_fewer_than_three_scale_outs_are_named_and_a_file_of_only_those_refused(
    tmp_path: Path, protocol: str, third: str, held: list[int]
) -> None:
    sort = _sort_contexts(2)
    small = sort[sort["scale_out"] >= 10].assign(job_type="grep")
    path = tmp_path / "mixed.csv"
    pd.concat([sort, small], ignore_index=True).to_csv(path, index=False)
    data = benchmark_runs(traces=path, protocol=protocol)
    fields = data.report_fields()
    assert fields["skipped_job_types"] == {
        "grep": f"2 scale-out(s): fewer than 3, no {third} third to hold out with scale-outs left to fine-tune on"
    }
    assert fields["held_out_scale_outs"] == {"sort": held}
    assert {t.algorithm for t in held_out_tasks(data, seed=0)} == {"sort"}
    path = tmp_path / "small.csv"
    small.to_csv(path, index=False)
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs(traces=path, protocol=protocol)
    assert err.value.field == "traces" and protocol in str(err.value) and "fewer than 3" in str(err.value)


def test_a_held_out_context_without_a_run_below_the_cut_is_neither_tested_nor_trained_on(
    tmp_path: Path,
) -> None:
    sort = _sort_contexts(2)
    # c4.2xlarge's contexts ran only from the cut up (the job type's other contexts set it at 6)
    path = tmp_path / "runs.csv"
    sort[~(sort["machine_type"].eq("c4.2xlarge") & (sort["scale_out"] < 6))].to_csv(path, index=False)
    data = benchmark_runs(traces=path, protocol=PROTOCOL)
    runs = data.runs
    lost = set(runs.loc[runs["machine_type"].eq("c4.2xlarge"), "context_id"])
    assert len(lost) == 2
    tasks = list(held_out_tasks(data, seed=0))
    seen = set().union(*(set(t.held_out["context_id"]) for t in tasks))
    assert seen == set(runs["context_id"]) - lost
    folds = list(held_out_tasks(benchmark_runs(traces=path), seed=0))
    for task in tasks:
        assert task.cut == 6
        assert (task.held_out.groupby("context_id")["scale_out"].min() < task.cut).all()
        assert not set(folds[task.fold].held_out["context_id"]) & set(task.train["context_id"])


def test_the_bundled_sets_serve_the_protocol_and_a_wrong_one_is_refused_naming_the_field() -> None:
    for dataset in ("c3o", "bell"):
        assert benchmark_runs(dataset, protocol=PROTOCOL).protocol == PROTOCOL
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs("bell", protocol="leave-size-out")
    assert err.value.field == "protocol" and PROTOCOL in str(err.value)
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs("c3o", protocol="smallest-scale-outs")
    assert err.value.field == "protocol" and PROTOCOL in str(err.value)


@pytest.fixture(scope="module")
def two_contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two sort contexts (two folds: two pre-trainings) and a model cache accuracy and sizing share."""
    folder = tmp_path_factory.mktemp("smaller")
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
    assert PROTOCOL in printed and "sort scale-outs 2, 4" in printed
    report = json.loads(out.read_text())
    assert (report["protocol"], report["held_out_scale_outs"]) == (PROTOCOL, {"sort": [2, 4]})
    assert report["timings"]["pretrains"] == 2
    # 6, 8, 10, 12 kept: k = 0..4 measured, k = 5 left out for every model and band measure
    for model in ("bellamy", "gbm"):
        assert all(np.isfinite(report["results"][model][str(k)]) for k in range(5)), model
        assert report["results"][model]["5"] is None, model
    band = report["band"]["bellamy"]
    assert all(0.0 <= band["overall"]["under_upper"][str(k)] <= 1.0 for k in range(5))
    assert band["overall"]["under_upper"]["5"] is None


def test_sizing_replays_the_smaller_scale_outs_and_reports_the_targets_below_the_cut(
    two_contexts: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
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
    assert report["protocol"] == PROTOCOL and report["held_out_scale_outs"] == {"sort": [2, 4]}
    assert report["k"] == [k for k in K_SIZING if k <= 4] and "5" not in report["per_k"]
    assert report["policies"]["oracle"]["decisions"] == 2 * TARGETS_PER_CONTEXT["folds"] * 4
    # the decisions past the cut are named for their side; larger-scale-outs' key is absent
    assert "beyond_cut" not in report
    lines = [json.loads(line) for line in decisions.read_text().splitlines()]
    assert len(lines) == report["policies"]["bellamy"]["decisions"]
    for line in lines:
        assert line["cut"] == 6 and line["task"].endswith("scale-out < 6")
        # fine-tuned above the cut, deciding among every scale-out, the smaller ones included
        assert len(line["tuned_on"]) == line["k"] and min(line["tuned_on"]) >= 6
        assert line["scale_outs"] == [2, 4, 6, 8, 10, 12]
    below = [line["decisions"]["oracle"]["scale_out"] < 6 for line in lines]
    assert any(below)
    assert report["below_cut"]["share"] == pytest.approx(np.mean(below))
    for policy, stats in report["below_cut"]["policies"].items():
        assert stats["decisions"] == sum(below)
        met = [line["decisions"][policy]["met"] for line, b in zip(lines, below, strict=True) if b]
        assert stats["attainment"] == pytest.approx(np.mean(met))
        spent = sum(
            line["decisions"][policy]["node_seconds"] for line, b in zip(lines, below, strict=True) if b
        )
        oracle = sum(
            line["decisions"]["oracle"]["node_seconds"] for line, b in zip(lines, below, strict=True) if b
        )
        assert stats["node_seconds_vs_oracle"] == pytest.approx(spent / oracle)
    render_sizing(report)
    printed = " ".join(capsys.readouterr().out.split())
    assert "a scale-out below the cut meets" in printed
