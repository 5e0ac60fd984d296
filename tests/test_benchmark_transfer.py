"""The transfer protocols (leave-machine-type-out, leave-environment-out) and their baseline, the
nearest-curves heuristic: splits, the heuristic's arithmetic, reports and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.benchmarks.common import (
    NearestCurves,
    benchmark_runs,
    held_out_tasks,
    with_context_ids,
)
from airflow_provider_bellamy.benchmarks.sizing import K_SIZING, TARGETS_PER_CONTEXT, run_sizing
from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.decisions import Candidate
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.sizing import meeting_score


def _sort_contexts(per_machine_type: int) -> pd.DataFrame:
    """The first ``per_machine_type`` bundled C3O sort contexts of each of its machine types, as a
    user's export would hold them."""
    runs = load_traces("c3o", job_type="sort").drop(columns=["dataset"])
    keys = [c for c in runs.columns if c not in ("scale_out", "runtime_s")]
    runs["_ctx"] = runs.groupby(keys, dropna=False, sort=True).ngroup()
    rank = runs.groupby("machine_type")["_ctx"].rank(method="dense")
    return runs[rank <= per_machine_type].drop(columns="_ctx").reset_index(drop=True)


def test_c3o_machine_types_are_held_out_whole_and_never_trained_on() -> None:
    data = benchmark_runs("c3o", protocol="leave-machine-type-out")
    assert data.report_fields() == {
        "protocol": "leave-machine-type-out",
        "skipped_job_types": {},
        "held_out_dimension": "machine_type",
        "skipped_held_out": {},
    }
    tasks = list(held_out_tasks(data, seed=0))
    runs = data.runs
    for job in runs["job_type"].unique():
        of_job = [t for t in tasks if t.algorithm == job]
        machine_types = set(runs.loc[runs["job_type"] == job, "machine_type"])
        assert {t.held_out_value for t in of_job} == machine_types
        for task in of_job:
            # every run of the held-out machine type is tested, none trained on
            assert set(task.held_out["machine_type"]) == {task.held_out_value}
            assert task.label() == f"held out {task.held_out_value}"
            assert task.held_out_value not in set(task.train["machine_type"])
            mine = runs[(runs["job_type"] == job) & (runs["machine_type"] == task.held_out_value)]
            assert len(task.held_out) == len(mine)
            # pre-trained per job type, on all its runs of the other machine types
            assert set(task.train["job_type"]) == {job}
            assert len(task.train) + len(task.held_out) == int((runs["job_type"] == job).sum())


def test_c3o_input_size_ends_are_held_out_and_never_trained_on() -> None:
    data = benchmark_runs("c3o", protocol="leave-size-out")
    assert data.report_fields() == {
        "protocol": "leave-size-out",
        "skipped_job_types": {},
        "held_out_property": "data_size_mb",
        "skipped_held_out": {},
    }
    tasks = list(held_out_tasks(data, seed=0))
    runs = data.runs
    for job in runs["job_type"].unique():
        mine = runs[runs["job_type"] == job]
        sizes = sorted(mine["data_size_mb"].unique())
        third = max(1, round(len(sizes) / 3))
        largest, smallest = [t for t in tasks if t.algorithm == job]
        assert set(largest.held_out["data_size_mb"]) == set(sizes[-third:])
        assert set(smallest.held_out["data_size_mb"]) == set(sizes[:third])
        assert largest.label() == f"held out data_size_mb >= {sizes[-third]:g}"
        for task in (largest, smallest):
            # a held-out size is never trained on; everything else of the job type is
            assert not set(task.held_out["data_size_mb"]) & set(task.train["data_size_mb"])
            assert set(task.train["job_type"]) == {job}
            assert len(task.train) + len(task.held_out) == len(mine)
        # the held-out end lies beyond every trained size
        assert largest.held_out["data_size_mb"].min() > largest.train["data_size_mb"].max()
        assert smallest.held_out["data_size_mb"].max() < smallest.train["data_size_mb"].min()


def test_leave_size_out_names_a_job_type_with_too_few_sizes_and_refuses_a_file_without_sizes(
    tmp_path: Path,
) -> None:
    two_sizes = _sort_contexts(3)
    two_sizes = two_sizes[two_sizes["data_size_mb"].isin(sorted(two_sizes["data_size_mb"].unique())[:2])]
    path = tmp_path / "two.csv"
    two_sizes.to_csv(path, index=False)
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs(traces=path, protocol="leave-size-out")
    assert err.value.field == "traces" and "fewer than 3" in str(err.value)
    path = tmp_path / "nosize.csv"
    _sort_contexts(3).drop(columns=["data_size_mb"]).to_csv(path, index=False)
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs(traces=path, protocol="leave-size-out")
    assert err.value.field == "protocol" and "data_size_mb" in str(err.value)


def test_a_traces_file_is_held_out_by_environment_with_the_bundled_traces_trained_on(
    tmp_path: Path,
) -> None:
    sort = _sort_contexts(1)
    # one machine type's runs copied as they are (the bundled C3O environment), two on a new one
    frame = pd.concat(
        [
            sort[sort["machine_type"] == "c4.2xlarge"],
            sort[sort["machine_type"] != "c4.2xlarge"].assign(environment="on-prem"),
        ],
        ignore_index=True,
    )
    # a run of another context recorded without its environment (a run of the same context without
    # it would be refused on reading: records.conform_context)
    frame.loc[len(frame)] = {**frame.iloc[-1].to_dict(), "environment": np.nan, "machine_type": "unlabelled"}
    path = tmp_path / "envs.csv"
    frame.to_csv(path, index=False)
    data = benchmark_runs(traces=path, protocol="leave-environment-out")
    assert data.report_fields()["skipped_held_out"] == {
        "sort": {"(missing)": "1 run(s) with no environment: pre-trained on, never held out"}
    }
    tasks = {t.held_out_value: t for t in held_out_tasks(data, seed=0)}
    assert sorted(tasks) == ["aws-emr", "on-prem"]
    for value, task in tasks.items():
        assert set(task.held_out["environment"]) == {value}
        assert value not in set(task.train["environment"].dropna())
        assert len(task.held_out) == int((frame["environment"] == value).sum())
    # holding out aws-emr takes every bundled C3O run (and the file's copy) out of training
    assert set(tasks["aws-emr"].train["dataset"].dropna()) == {"bell"}
    assert "on-prem" in set(tasks["aws-emr"].train["environment"])
    assert "c3o" in set(tasks["on-prem"].train["dataset"])


def _curve(machine_type: str, cores: float, size: float, factor: float) -> pd.DataFrame:
    """A context's runs: runtime = factor × (100 + 800 / n) s at n = 2, 4, 8, 16, two runs each."""
    n = np.repeat([2, 4, 8, 16], 2)
    return pd.DataFrame(
        {
            "job_type": "sort",
            "framework": "spark",
            "scale_out": n,
            "runtime_s": factor * (100 + 800 / n),
            "machine_type": machine_type,
            "cores": cores,
            "data_size_mb": size,
        }
    )


def test_the_nearest_curves_match_a_scaled_copy_of_another_machine_type_exactly() -> None:
    train = with_context_ids(
        pd.concat(
            [
                _curve("a", 8.0, 1000.0, 1.0),
                _curve("a", 8.0, 4000.0, 3.0),  # other job parameters: not the held-out one's
                _curve("b", 16.0, 1000.0, 2.0),
                _curve("b", 16.0, 4000.0, 7.0),
            ],
            ignore_index=True,
        )
    )
    held = with_context_ids(_curve("c", 4.0, 1000.0, 1.3))
    nearest = NearestCurves(train, "machine_type", held)
    # cores go with the machine type; the data size is a job parameter
    assert nearest.parameters == {"sort": ["data_size_mb"]}
    context = held.iloc[0].to_dict()
    test_n = np.array([2, 3, 8, 16, 32])
    truth = 1.3 * (100 + 800 / test_n)
    # k = 0: the geometric mean of the same-size curves of a (× 1) and b (× 2)
    k0 = nearest.predict(context, held.iloc[:0], test_n)
    assert k0 is not None
    assert np.allclose(k0[[0, 2, 3]], np.sqrt(2.0) * (100 + 800 / test_n[[0, 2, 3]]))
    # k = 1 (at 4 nodes): the level is the run's, the shape the curves': exact at measured scale-outs
    one = held[held["scale_out"] == 4].iloc[[0]]
    k1 = nearest.predict(context, one, test_n)
    assert k1 is not None
    assert np.allclose(k1[[0, 2, 3]], truth[[0, 2, 3]])
    # between and beyond the measured scale-outs: a power law through the neighbours (log-log)
    assert truth[2] < k1[1] < truth[0] and 0 < k1[4] < truth[3]
    # no context shares the parameters on a machine type: the nearest data size stands in
    odd = {**context, "data_size_mb": 3000.0}
    assert np.allclose(
        nearest.predict(odd, one, test_n)[[2, 3]],
        nearest.predict(  # type: ignore[index]
            {**context, "data_size_mb": 4000.0}, one, test_n
        )[[2, 3]],
    )
    # a job type with no curve on another machine type: no prediction
    assert nearest.predict({**context, "job_type": "grep"}, one, test_n) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dataset": "c3o", "protocol": "leave-environment-out"}, "protocol"),  # one environment
        ({"dataset": "bell", "protocol": "leave-machine-type-out"}, "protocol"),  # one per job
        ({"dataset": "c3o", "protocol": "leave-one-out"}, "protocol"),
        ({"protocol": "leave-machine-type-out", "drop": "machine_type"}, "protocol"),
        ({"protocol": "leave-environment-out", "drop": "environment"}, "protocol"),
    ],
)
def test_protocols_that_do_not_fit_the_runs_are_refused_naming_the_field(
    kwargs: dict[str, str], field: str, tmp_path: Path
) -> None:
    if "drop" in kwargs:
        path = tmp_path / "runs.csv"
        _sort_contexts(1).drop(columns=[kwargs.pop("drop")]).to_csv(path, index=False)
        kwargs = {**kwargs, "traces": str(path)}
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs(**kwargs)
    assert err.value.field == field
    assert kwargs["protocol"] in str(err.value)


def test_a_file_on_one_machine_type_names_what_it_cannot_hold_out(tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    _sort_contexts(2).query("machine_type == 'c4.2xlarge'").to_csv(path, index=False)
    with pytest.raises(InvalidInputError) as err:
        benchmark_runs(traces=path, protocol="leave-machine-type-out")
    assert err.value.field == "traces" and "one machine type" in str(err.value)


def test_the_cli_refuses_an_unknown_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["benchmark", "accuracy", "--dataset", "c3o", "--protocol", "random"]) == 2
    err = capsys.readouterr().err
    assert "protocol" in err and "random" in err and "leave-machine-type-out" in err


@pytest.fixture(scope="module")
def machine_types_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sort context on each of two of C3O's machine types: two pre-trainings per run."""
    path = tmp_path_factory.mktemp("transfer") / "machines.csv"
    _sort_contexts(1).query("machine_type != 'r4.2xlarge'").to_csv(path, index=False)
    return path


def test_leave_machine_type_out_accuracy_reports_the_heuristic_beside_the_models(
    machine_types_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "acc.json"
    command = ["benchmark", "accuracy", "--traces", str(machine_types_file), "--quick"]
    assert main([*command, "--protocol", "leave-machine-type-out", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["protocol"], report["held_out_dimension"]) == ("leave-machine-type-out", "machine_type")
    assert report["skipped_job_types"] == {} and report["skipped_held_out"] == {}
    assert list(report["results"]) == ["bellamy", "ernest", "gbm", "nearest_curves"]
    assert report["timings"]["pretrains"] == 2
    for model in ("bellamy", "gbm", "nearest_curves"):
        assert all(np.isfinite(report["results"][model][str(k)]) for k in range(6)), model
    assert report["per_algorithm"]["sort"]["nearest_curves"] == report["results"]["nearest_curves"]
    assert all(0.0 <= report["coverage"]["overall"][str(k)] <= 1.0 for k in range(6))
    band = report["band"]["bellamy"]
    assert list(band["overall"]) == ["under_upper", "above_lower", "inside", "mean_log_width"]
    assert list(band["per_algorithm"]) == ["sort"] and band["overall"] == band["per_algorithm"]["sort"]


def test_leave_size_out_accuracy_reports_the_models_on_both_ends(tmp_path: Path) -> None:
    path = tmp_path / "sizes.csv"
    _sort_contexts(3).to_csv(path, index=False)
    out = tmp_path / "acc.json"
    command = ["benchmark", "accuracy", "--traces", str(path), "--quick", "--seeds", "1"]
    assert main([*command, "--protocol", "leave-size-out", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["protocol"], report["held_out_property"]) == ("leave-size-out", "data_size_mb")
    # the models a split without a held-out categorical value compares (no nearest-curves heuristic)
    assert list(report["results"]) == ["bellamy", "ernest", "gbm"]
    assert report["timings"]["pretrains"] == 2
    assert all(np.isfinite(report["results"]["bellamy"][str(k)]) for k in range(6))
    assert all(0.0 <= report["band"]["bellamy"]["overall"]["under_upper"][str(k)] <= 1.0 for k in range(6))


def test_leave_machine_type_out_sizing_replays_the_heuristic_as_a_policy(
    machine_types_file: Path, tmp_path: Path
) -> None:
    decisions = tmp_path / "decisions.jsonl"
    report = run_sizing(
        traces=machine_types_file,
        protocol="leave-machine-type-out",
        seeds=1,
        quick=True,
        min_draws=1,
        decisions=decisions,
    )
    assert report["protocol"] == "leave-machine-type-out"
    assert list(report["policies"]) == [
        "bellamy",
        "bellamy_relaxed",
        "bellamy_min_cost",
        "ernest",
        "gbm",
        "nearest_curves",
        "always_max",
        "oracle",
    ]
    per_context = TARGETS_PER_CONTEXT["leave-machine-type-out"]
    for policy, stats in report["policies"].items():
        assert stats["decisions"] == 2 * per_context * len(K_SIZING), policy
        assert len(stats["interval_95"]["attainment"]) == 2
    assert report["policies"]["oracle"]["node_seconds_vs_oracle"] == 1.0
    # where the node-seconds go: per job type and per held-out machine type, every policy
    tasks = report["per_task"]["sort"]
    assert list(report["per_algorithm"]) == ["sort"] and len(tasks) == 2
    assert all(t.startswith("held out ") for t in tasks)
    for policy, stats in report["policies"].items():
        sort = report["per_algorithm"]["sort"][policy]
        assert sort["node_seconds_vs_oracle"] == pytest.approx(stats["node_seconds_vs_oracle"])
        assert sort["adds_to_ratio"] == pytest.approx(stats["node_seconds_vs_oracle"] - 1)
        assert sum(t[policy]["decisions"] for t in tasks.values()) == stats["decisions"]
    # every decision in full, and they add up to the report's figures
    lines = [json.loads(line) for line in decisions.read_text().splitlines()]
    assert len(lines) == report["policies"]["bellamy"]["decisions"]
    assert {line["task"] for line in lines} == set(tasks)
    for line in lines:
        ns, worst = line["scale_outs"], line["real_max_s"]
        oracle = line["decisions"]["oracle"]["scale_out"]
        assert oracle == next(n for n, w in zip(ns, worst, strict=True) if w <= line["target_s"])
        assert len(line["tuned_on"]) == line["k"] and set(line["tuned_on"]) <= set(ns)
        bellamy = line["predicted"]["bellamy"]
        chosen = line["decisions"]["bellamy"]["scale_out"]
        meets = [n for n, hi in zip(ns, bellamy["upper_s"], strict=True) if hi <= line["target_s"]]
        # none meets it: the most likely to (the band as recorded, lower bound included)
        bands = zip(ns, bellamy["mean_s"], bellamy["lower_s"], bellamy["upper_s"], strict=True)
        score = {
            n: meeting_score(Candidate(n, m, lo, hi, 0.0, None, False), line["target_s"], 0.9)
            for n, m, lo, hi in bands
        }
        upper = dict(zip(ns, bellamy["upper_s"], strict=True))
        likeliest = min(ns, key=lambda n: (-score[n], upper[n], n))
        assert chosen == (min(meets) if meets else likeliest)
        relaxed = line["decisions"]["bellamy_relaxed"]
        likely = [n for n, m in zip(ns, bellamy["mean_s"], strict=True) if m <= line["target_s"]]
        assert relaxed["scale_out"] == (chosen if meets or not likely else min(likely))
        if relaxed["scale_out"] == chosen:
            assert relaxed == line["decisions"]["bellamy"]
        # min_cost: the least node-hours at the upper bound among those meeting the target (or, where
        # none does, among those predicted to meet it)
        pool = meets or likely
        upper = dict(zip(ns, bellamy["upper_s"], strict=True))
        cheapest = min(pool, key=lambda n: (n * upper[n], n)) if pool else chosen
        assert line["decisions"]["bellamy_min_cost"]["scale_out"] == cheapest
    for policy, stats in report["policies"].items():
        spent = sum(line["decisions"][policy]["node_seconds"] for line in lines)
        oracle_spent = sum(line["decisions"]["oracle"]["node_seconds"] for line in lines)
        assert spent / oracle_spent == pytest.approx(stats["node_seconds_vs_oracle"])
        met = np.mean([line["decisions"][policy]["met"] for line in lines])
        assert met == pytest.approx(stats["attainment"])
