"""Accuracy benchmark (DESIGN.md): Bellamy vs Ernest vs gradient boosting on the same splits.

For each held-out context and k ∈ {0..5}: k runs at k distinct scale-outs are the
fine-tuning data; the test set is every run at the context's other scale-outs. Metric:
mean relative error |pred − actual| / actual, per algorithm and overall, per k; and the share of
test runs under Bellamy's upper band at the requested confidence (what sizing relies on: a 90 %
band should cover 90 % of the runs it was not tuned on).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from airflow_provider_bellamy.benchmarks.common import (
    K_VALUES,
    BenchmarkRuns,
    GbmBaseline,
    HeldOutTask,
    NearestCurves,
    cached_benchmark_runs,
    draw_points,
    ernest_predict,
    map_held_out_tasks,
    pretrain,
    protocol_title,
    render_skipped,
    validate_workers,
)
from airflow_provider_bellamy.records import validate_confidence

MODELS = ("bellamy", "ernest", "gbm")
# the transfer protocols' bar: a held-out value's contexts predicted from the same job's curves on
# the other values (common.NearestCurves)
TRANSFER_MODELS = (*MODELS, "nearest_curves")


def _mre(pred: np.ndarray, actual: np.ndarray) -> list[float]:
    return list(np.abs(pred - actual) / actual)


def run_accuracy(
    dataset: str = "c3o",
    seeds: int = 3,
    quick: bool = False,
    progress: Any = None,
    *,
    traces: str | Path | None = None,
    protocol: str | None = None,
    confidence: float = 0.9,
    workers: int = 1,
    model_cache: str | Path | None = None,
) -> dict[str, Any]:
    """The accuracy protocol on a bundled set, or on the runs of a ``traces`` file split by
    ``protocol`` (see ``benchmark_runs``); ``confidence``: the band whose coverage is measured;
    ``workers``: processes the held-out tasks are spread over (the same figures); ``model_cache``:
    a folder pre-trained models are kept in and read back from (``common.pretrain``)."""
    confidence = validate_confidence(confidence)
    validate_workers(workers)
    data = cached_benchmark_runs(dataset, traces, protocol)
    models = MODELS if data.dimension is None else TRANSFER_MODELS
    # errors[model][algorithm][k] → list of per-run relative errors
    errors: dict[str, dict[str, dict[int, list[float]]]] = {
        m: defaultdict(lambda: defaultdict(list)) for m in models
    }
    covered: dict[str, dict[int, list[bool]]] = defaultdict(lambda: defaultdict(list))
    pretrain_s: list[float] = []
    finetune_s: list[float] = []
    predict_s: list[float] = []
    for result in map_held_out_tasks(
        _evaluate_task,
        seeds,
        dataset=dataset,
        traces=traces,
        protocol=protocol,
        workers=workers,
        progress=progress,
        quick=quick,
        confidence=confidence,
        models=models,
        model_cache=model_cache,
    ):
        for model, by_k in result.errors.items():
            for k, values in by_k.items():
                errors[model][result.algorithm][k].extend(values)
        for k, values in result.covered.items():
            covered[result.algorithm][k].extend(values)
        pretrain_s.append(result.pretrain_s)
        finetune_s.extend(result.finetune_s)
        predict_s.extend(result.predict_s)
    return _summarise(
        errors,
        data.name,
        seeds,
        quick,
        pretrain_s,
        finetune_s,
        predict_s,
        {**data.report_fields(), "coverage": _coverage(covered, confidence)},
    )


@dataclass
class _TaskResult:
    """One held-out task's figures, merged in task order into the report."""

    algorithm: str
    errors: dict[str, dict[int, list[float]]]
    covered: dict[int, list[bool]]
    pretrain_s: float
    finetune_s: list[float] = field(default_factory=list)
    predict_s: list[float] = field(default_factory=list)


def _evaluate_task(
    data: BenchmarkRuns,
    seed: int,
    task: HeldOutTask,
    *,
    quick: bool,
    confidence: float,
    models: tuple[str, ...],
    model_cache: str | Path | None,
) -> _TaskResult:
    t0 = time.perf_counter()
    general = pretrain(task, seed, quick, model_cache)
    result = _TaskResult(
        task.algorithm,
        {m: defaultdict(list) for m in models},
        defaultdict(list),
        time.perf_counter() - t0,
    )
    errors = result.errors
    gbm = GbmBaseline(task.train, seed)
    nearest = None if data.dimension is None else NearestCurves(task.train, data.dimension, task.held_out)
    rng = np.random.default_rng(10_000 + seed * 100 + task.fold)
    # every held-out context gets its k points first, so GBM trains once per k
    draws = {
        k: {cid: draw_points(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)}
        for k in K_VALUES
    }
    for k in K_VALUES:
        points_all = [p for p, _ in draws[k].values()]
        tests_all = [t for _, t in draws[k].values()]
        extra = pd.concat(points_all) if k else task.held_out.iloc[:0]
        test_frame = pd.concat(tests_all)
        gbm_pred = gbm.fit_predict(extra.drop(columns=["context_id"]), test_frame)
        errors["gbm"][k].extend(_mre(gbm_pred, test_frame["runtime_s"].to_numpy()))
        for points, test in draws[k].values():
            if test.empty:
                continue
            ctx = test.iloc[0].to_dict()
            ns = test["scale_out"].to_numpy()
            actual = test["runtime_s"].to_numpy()
            t1 = time.perf_counter()
            tuned = general.finetune(points.drop(columns=["context_id"]))
            result.finetune_s.append(time.perf_counter() - t1)
            t2 = time.perf_counter()
            pred = tuned.predict(ctx, list(range(1, 21)))
            result.predict_s.append(time.perf_counter() - t2)
            pred, _, upper = tuned.predict_band(ctx, ns.tolist(), confidence)
            errors["bellamy"][k].extend(_mre(pred, actual))
            result.covered[k].extend(bool(c) for c in actual <= upper)
            ern = ernest_predict(points, ns)
            if ern is not None:
                errors["ernest"][k].extend(_mre(ern, actual))
            near = None if nearest is None else nearest.predict(ctx, points, ns)
            if near is not None:
                errors["nearest_curves"][k].extend(_mre(near, actual))
    return result


def _by_algorithm(
    values: dict[str, dict[int, list[float]]] | dict[str, dict[int, list[bool]]], algorithms: list[str]
) -> tuple[dict[str, dict[str, float | None]], dict[str, float | None]]:
    """Per algorithm and k the mean of ``values``, and per k the mean over algorithms of those means
    (every algorithm weighs the same, however many runs it has); None where there is nothing."""
    per_algorithm = {
        a: {str(k): float(np.mean(values[a][k])) if values[a][k] else None for k in K_VALUES}
        for a in algorithms
    }
    overall: dict[str, float | None] = {}
    for k in K_VALUES:
        means = [m[str(k)] for m in per_algorithm.values() if m[str(k)] is not None]
        overall[str(k)] = float(np.mean(means)) if means else None
    return per_algorithm, overall


def _coverage(covered: dict[str, dict[int, list[bool]]], confidence: float) -> dict[str, Any]:
    """Share of test runs under the upper band, per algorithm and k, and overall (as the errors)."""
    per_algorithm, overall = _by_algorithm(covered, sorted(covered))
    return {"confidence": confidence, "overall": overall, "per_algorithm": per_algorithm}


def _summarise(
    errors: dict[str, dict[str, dict[int, list[float]]]],
    dataset: str,
    seeds: int,
    quick: bool,
    pretrain_s: list[float],
    finetune_s: list[float],
    predict_s: list[float],
    fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    results: dict[str, dict[str, float | None]] = {}
    per_algorithm: dict[str, dict[str, dict[str, float | None]]] = {}
    algorithms = sorted({a for m in errors for a in errors[m]})
    for model in errors:
        by_algorithm, results[model] = _by_algorithm(errors[model], algorithms)
        for a in algorithms:
            per_algorithm.setdefault(a, {})[model] = by_algorithm[a]
    return {
        "benchmark": "accuracy",
        "dataset": dataset,
        **(fields or {}),
        "seeds": seeds,
        "quick": quick,
        "date": time.strftime("%Y-%m-%d"),
        "results": results,
        "per_algorithm": per_algorithm,
        "timings": {
            "pretrain_s_median": statistics.median(pretrain_s),
            "pretrain_s_max": max(pretrain_s),
            "finetune_s_median": statistics.median(finetune_s),
            "predict_20_scale_outs_ms_median": 1000 * statistics.median(predict_s),
            "predict_20_scale_outs_ms_p95": 1000 * float(np.percentile(predict_s, 95)),
            "pretrains": len(pretrain_s),
        },
    }


def render_accuracy(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()

    def fmt(v: float | None) -> str:
        return "—" if v is None else f"{100 * v:.2f}%"

    table = Table(
        title=f"Mean relative error, {report['dataset']}{protocol_title(report)} ({report['seeds']} seed(s){', quick' if report['quick'] else ''})"
    )
    table.add_column("algorithm")
    table.add_column("model")
    for k in K_VALUES:
        table.add_column(f"k={k}", justify="right")
    for alg, models in report["per_algorithm"].items():
        for model in report["results"]:
            table.add_row(alg, model, *[fmt(models[model][str(k)]) for k in K_VALUES])
        table.add_section()
    for model in report["results"]:
        table.add_row(
            "[bold]overall", f"[bold]{model}", *[fmt(report["results"][model][str(k)]) for k in K_VALUES]
        )
    console.print(table)
    coverage = report.get("coverage")
    if coverage:
        band = Table(
            title=f"Share of test runs under Bellamy's {100 * coverage['confidence']:g} % upper band"
        )
        band.add_column("algorithm")
        for k in K_VALUES:
            band.add_column(f"k={k}", justify="right")
        for alg, shares in coverage["per_algorithm"].items():
            band.add_row(alg, *[fmt(shares[str(k)]) for k in K_VALUES])
        band.add_section()
        band.add_row("[bold]overall", *[fmt(coverage["overall"][str(k)]) for k in K_VALUES])
        console.print(band)
    render_skipped(report)
    t = report["timings"]
    console.print(
        f"pre-train median {t['pretrain_s_median']:.1f} s (max {t['pretrain_s_max']:.1f} s, {t['pretrains']} runs) · "
        f"fine-tune median {1000 * t['finetune_s_median']:.1f} ms · "
        f"predict 20 scale-outs median {t['predict_20_scale_outs_ms_median']:.2f} ms (p95 {t['predict_20_scale_outs_ms_p95']:.2f} ms)"
    )


def write_json(report: dict[str, Any], path: str | Path) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(report, indent=2) + "\n")
