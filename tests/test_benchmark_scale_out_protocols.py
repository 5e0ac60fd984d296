"""The scale-out protocols: larger-scale-outs holds out each job type's largest third of scale-outs
(the held-out contexts fine-tuned below the cut, tested above it, no training run above it) and
smaller-scale-outs, its mirror, the smallest third (fine-tuned above, tested below, no training run
below); splits, draws, skipped job types, refusals and small end-to-end reports, for both."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
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


@dataclass(frozen=True)
class Protocol:
    """One scale-out protocol and what it cuts from the bundled sets (C3O ran at 2..12, Bell at 4..60)."""

    name: str
    side: str
    third: str
    sign: str
    c3o_cut: int
    c3o_held: list[int]
    bell_cut: int
    bell_held: list[int]
    bell_trained_on: set[str]
    bell_jobs: list[str]
    report_key: str

    def kept(self, scale_out: pd.Series, cut: int) -> pd.Series:
        return scale_out <= cut if self.side == "above" else scale_out >= cut


LARGER = Protocol(
    "larger-scale-outs",
    "above",
    "larger",
    ">",
    8,
    [10, 12],
    40,
    [44, 48, 52, 56, 60],
    {"bell", "c3o"},
    ["grep", "pagerank", "sgd"],
    "beyond_cut",
)
# every C3O run (2..12) lies below Bell's cut: only the other Bell jobs' runs are pre-trained on, and
# both give iterations, which Bell's grep lacks (it is left out, see the test below)
SMALLER = Protocol(
    "smaller-scale-outs",
    "below",
    "smaller",
    "<",
    6,
    [2, 4],
    24,
    [4, 8, 12, 16, 20],
    {"bell"},
    ["pagerank", "sgd"],
    "below_cut",
)
BOTH = pytest.mark.parametrize("p", [LARGER, SMALLER], ids=lambda p: p.name)


@BOTH
def test_c3o_holds_out_a_third_of_its_scale_outs_in_the_folds_and_never_trains_past_the_cut(
    p: Protocol,
) -> None:
    data = benchmark_runs("c3o", protocol=p.name)
    jobs = sorted(data.runs["job_type"].unique())
    assert data.report_fields() == {
        "protocol": p.name,
        "skipped_job_types": {},
        "held_out_scale_outs": {job: p.c3o_held for job in jobs},
    }
    tasks = list(held_out_tasks(data, seed=0))
    folds = list(held_out_tasks(benchmark_runs("c3o"), seed=0))
    assert [(t.algorithm, t.fold) for t in tasks] == [(t.algorithm, t.fold) for t in folds]
    for task, fold in zip(tasks, folds, strict=True):
        assert (task.cut, task.side) == (p.c3o_cut, p.side)
        assert task.label() == f"fold {task.fold}, scale-out {p.sign} {p.c3o_cut}"
        # the folds protocol's contexts, every one of which has runs past the cut
        assert task.held_out.equals(fold.held_out)
        # trained on the other folds' runs on the kept side: nothing past the cut, no held-out context
        assert (
            p.kept(task.train["scale_out"], p.c3o_cut).all() and (task.train["scale_out"] == p.c3o_cut).any()
        )
        assert not set(task.train["context_id"]) & set(task.held_out["context_id"])
        assert task.train.equals(fold.train[p.kept(fold.train["scale_out"], p.c3o_cut)])


@BOTH
def test_bell_holds_out_each_job_and_every_run_past_its_cut_leaves_the_training_data(p: Protocol) -> None:
    data = benchmark_runs("bell", protocol=p.name)
    assert data.structure == "leave-job-out"
    assert data.report_fields()["held_out_scale_outs"] == {job: p.bell_held for job in p.bell_jobs}
    tasks = list(held_out_tasks(data, seed=0))
    assert [t.algorithm for t in tasks] == p.bell_jobs
    for task in tasks:
        assert task.cut == p.bell_cut
        assert set(task.held_out["dataset"]) == {"bell"} and task.held_out["context_id"].nunique() == 1
        assert set(task.held_out["job_type"]) == {task.algorithm}
        # pre-trained on every other run on the kept side of the cut, whichever set it comes from
        assert p.kept(task.train["scale_out"], p.bell_cut).all()
        assert set(task.train["dataset"]) == p.bell_trained_on
        assert not set(task.train["context_id"]) & set(task.held_out["context_id"])
        others = data.runs[~data.runs["context_id"].isin(set(task.held_out["context_id"]))]
        assert len(task.train) == int(p.kept(others["scale_out"], p.bell_cut).sum())


def test_a_job_type_the_runs_left_by_the_cut_cannot_serve_is_named() -> None:
    # Bell's grep held out below 24 nodes: left to pre-train on are Bell's pagerank and sgd, both with
    # iterations, which grep lacks (a model refuses a job type it never saw without it)
    bell = benchmark_runs("bell", protocol=SMALLER.name)
    why = bell.job_types_skipped()
    assert list(why) == ["grep"] and why["grep"].startswith("lacks iterations")
    assert "at or above the cut, 24" in why["grep"]
    # one job type left to pre-train on: refused whatever its properties
    two = bell.runs[bell.runs["job_type"].isin(["pagerank", "sgd"]) & bell.runs["dataset"].eq("bell")]
    data = replace(bell, runs=two, evaluated=np.ones(len(two), dtype=bool))
    assert set(data.job_types_skipped()) == {"pagerank", "sgd"}
    assert "fewer than two job types" in data.job_types_skipped()["sgd"]
    assert benchmark_runs("bell", protocol=LARGER.name).job_types_skipped() == {}


@BOTH
def test_a_draw_fine_tunes_on_the_kept_side_and_tests_every_run_past_the_cut(p: Protocol) -> None:
    runs = with_context_ids(_sort_contexts(1).iloc[:0])
    context = with_context_ids(_sort_contexts(1)).query("machine_type == 'c4.2xlarge'")
    task = HeldOutTask("sort", 0, runs, context, cut=p.c3o_cut, side=p.side)
    kept = p.kept(context["scale_out"], p.c3o_cut)
    for k in range(6):
        points, test = task.draw(context, k, np.random.default_rng(k))
        assert len(points) == min(k, 4) and points["scale_out"].nunique() == len(points)
        assert p.kept(points["scale_out"], p.c3o_cut).all()
        assert test.equals(context[~kept])
        # k = 5 finds only 4 kept scale-outs: left out at k = 5, not reported under its name
        assert task.draws_fall_short(points, k) == (k == 5)
    # the other protocols' draws, and their short draws, are as before
    plain = HeldOutTask("sort", 0, runs, context)
    points, test = plain.draw(context, 6, np.random.default_rng(0))
    assert len(points) == 6 and test.empty and not plain.draws_fall_short(points, 7)


@BOTH
def test_job_types_with_fewer_than_three_scale_outs_are_named_and_a_file_of_only_those_refused(
    tmp_path: Path, p: Protocol
) -> None:
    sort = _sort_contexts(2)
    small = sort[sort["scale_out"] <= 4].assign(job_type="grep")
    path = tmp_path / "mixed.csv"
    pd.concat([sort, small], ignore_index=True).to_csv(path, index=False)
    data = benchmark_runs(traces=path, protocol=p.name)
    fields = data.report_fields()
    assert fields["skipped_job_types"] == {
        "grep": f"2 scale-out(s): fewer than 3, no {p.third} third to hold out with scale-outs left to fine-tune on"
    }
    assert fields["held_out_scale_outs"] == {"sort": p.c3o_held}
    assert {t.algorithm for t in held_out_tasks(data, seed=0)} == {"sort"}
    path = tmp_path / "small.csv"
    small.to_csv(path, index=False)
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs(traces=path, protocol=p.name)
    assert err.value.field == "traces" and p.name in str(err.value) and "fewer than 3" in str(err.value)


@BOTH
def test_a_held_out_context_without_a_run_past_the_cut_is_neither_tested_nor_trained_on(
    tmp_path: Path, p: Protocol
) -> None:
    sort = _sort_contexts(2)
    # c4.2xlarge's contexts ran only on the kept side (the job type's other contexts set the cut)
    path = tmp_path / "runs.csv"
    sort[~sort["machine_type"].eq("c4.2xlarge") | p.kept(sort["scale_out"], p.c3o_cut)].to_csv(
        path, index=False
    )
    data = benchmark_runs(traces=path, protocol=p.name)
    runs = data.runs
    lost = set(runs.loc[runs["machine_type"].eq("c4.2xlarge"), "context_id"])
    assert len(lost) == 2
    tasks = list(held_out_tasks(data, seed=0))
    seen = set().union(*(set(t.held_out["context_id"]) for t in tasks))
    assert seen == set(runs["context_id"]) - lost
    folds = list(held_out_tasks(benchmark_runs(traces=path), seed=0))
    for task in tasks:
        assert task.cut == p.c3o_cut
        past = ~p.kept(task.held_out["scale_out"], p.c3o_cut)
        assert set(task.held_out.loc[past, "context_id"]) == set(task.held_out["context_id"])
        # a lost context is in some fold: never trained on where it is held out
        assert not set(folds[task.fold].held_out["context_id"]) & set(task.train["context_id"])


def test_the_bundled_sets_serve_the_protocols_and_a_wrong_one_is_refused_naming_the_field() -> None:
    for dataset in ("c3o", "bell"):
        for p in (LARGER, SMALLER):
            assert benchmark_runs(dataset, protocol=p.name).protocol == p.name
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs("bell", protocol="leave-size-out")
    assert err.value.field == "protocol"
    assert LARGER.name in str(err.value) and SMALLER.name in str(err.value)
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs("c3o", protocol="smallest-scale-outs")
    assert err.value.field == "protocol" and SMALLER.name in str(err.value)


@pytest.fixture(scope="module")
def two_contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two sort contexts (two folds: two pre-trainings per protocol) and a model cache accuracy and
    sizing share."""
    folder = tmp_path_factory.mktemp("scale-outs")
    path = folder / "runs.csv"
    _sort_contexts(1).query("machine_type != 'r4.2xlarge'").to_csv(path, index=False)
    return path, folder / "cache"


@BOTH
def test_accuracy_reports_the_k_the_kept_scale_outs_allow(
    two_contexts: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], p: Protocol
) -> None:
    path, cache = two_contexts
    out = tmp_path / "acc.json"
    command = ["benchmark", "accuracy", "--traces", str(path), "--quick", "--seeds", "1"]
    assert main([*command, "--protocol", p.name, "--model-cache", str(cache), "--json", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert p.name in printed and f"sort scale-outs {', '.join(map(str, p.c3o_held))}" in printed
    report = json.loads(out.read_text())
    assert (report["protocol"], report["held_out_scale_outs"]) == (p.name, {"sort": p.c3o_held})
    assert list(report["results"]) == ["bellamy", "ernest", "gbm"]
    assert report["timings"]["pretrains"] == 2
    # four scale-outs kept: k = 0..4 measured, k = 5 left out for every model and band measure
    for model in ("bellamy", "gbm"):
        assert all(np.isfinite(report["results"][model][str(k)]) for k in range(5)), model
        assert report["results"][model]["5"] is None, model
    band = report["band"]["bellamy"]
    for measure in ("above_lower", "under_upper"):
        assert all(0.0 <= band["overall"][measure][str(k)] <= 1.0 for k in range(5))
        assert band["overall"][measure]["5"] is None
    assert band["interval_95"]["inside"]["5"] is None and report["coverage"]["overall"]["5"] is None


@BOTH
def test_sizing_replays_the_held_out_scale_outs_as_candidates_and_reports_the_targets_past_the_cut(
    two_contexts: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], p: Protocol
) -> None:
    path, cache = two_contexts
    decisions = tmp_path / "decisions.jsonl"
    report = run_sizing(
        traces=path, protocol=p.name, seeds=1, quick=True, min_draws=1, model_cache=cache, decisions=decisions
    )
    assert report["protocol"] == p.name and report["held_out_scale_outs"] == {"sort": p.c3o_held}
    # k = 5 needs five kept scale-outs: not decided
    assert report["k"] == [k for k in K_SIZING if k <= 4] and "5" not in report["per_k"]
    assert report["policies"]["oracle"]["decisions"] == 2 * TARGETS_PER_CONTEXT["folds"] * 4
    # the decisions past the cut under their side's key only
    assert {"beyond_cut", "below_cut"} & set(report) == {p.report_key}
    lines = [json.loads(line) for line in decisions.read_text().splitlines()]
    assert len(lines) == report["policies"]["bellamy"]["decisions"]
    for line in lines:
        assert line["cut"] == p.c3o_cut and line["task"].endswith(f"scale-out {p.sign} {p.c3o_cut}")
        # fine-tuned on the kept side, deciding among every scale-out, the held-out ones included
        assert len(line["tuned_on"]) == line["k"] and p.kept(pd.Series(line["tuned_on"]), p.c3o_cut).all()
        assert line["scale_outs"] == [2, 4, 6, 8, 10, 12]
    oracle = pd.Series([line["decisions"]["oracle"]["scale_out"] for line in lines])
    past = (~p.kept(oracle, p.c3o_cut)).to_numpy()
    assert past.any()
    assert report[p.report_key]["share"] == pytest.approx(past.mean())
    chosen = [line for line, b in zip(lines, past, strict=True) if b]
    for policy, stats in report[p.report_key]["policies"].items():
        assert stats["decisions"] == past.sum()
        low, high = stats["interval_95"]["attainment"]
        assert 0.0 <= low <= high <= 1.0
        assert stats["attainment"] == pytest.approx(
            np.mean([line["decisions"][policy]["met"] for line in chosen])
        )
        spent = sum(line["decisions"][policy]["node_seconds"] for line in chosen)
        assert stats["node_seconds_vs_oracle"] == pytest.approx(
            spent / sum(line["decisions"]["oracle"]["node_seconds"] for line in chosen)
        )
    render_sizing(report)
    printed = " ".join(capsys.readouterr().out.split())
    assert f"{p.third} than any trained" in printed
