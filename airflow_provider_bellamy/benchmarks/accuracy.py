"""Accuracy benchmark (DESIGN.md): Bellamy vs Ernest vs gradient boosting on the same splits.

For each held-out context and k ∈ {0..5}: k runs at k distinct scale-outs are the
fine-tuning data; the test set is every run at the context's other scale-outs. Metric:
mean relative error |pred − actual| / actual, per algorithm and overall, per k; and the share of
test runs under Bellamy's upper band at the requested confidence (what sizing relies on: a 90 %
band should cover 90 % of the runs it was not tuned on). What makes that share honest is reported
beside it (``band``): the share above the lower bound (also ≈ the confidence), inside both (≈ 2q − 1)
and the band's width (mean log(upper / lower)): a band covers anything by being wide. The same for
Ernest's band (the one baseline with a band), with 95 % bootstrap intervals over held-out contexts.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from airflow_provider_bellamy.benchmarks.common import (
    BOOTSTRAP_RESAMPLES,
    K_VALUES,
    BenchmarkRuns,
    GbmBaseline,
    HeldOutTask,
    NearestCurves,
    ernest_band,
    evaluate_held_out_tasks,
    pretrain,
    protocol_title,
    render_skipped,
    validate_count,
)
from airflow_provider_bellamy.records import validate_confidence

if TYPE_CHECKING:
    from airflow_provider_bellamy.model import RuntimeModel

MODELS = ("bellamy", "ernest", "gbm")
# the models whose band the report measures (GBM and the nearest curves give a point only)
BAND_MODELS = ("bellamy", "ernest")
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
    draws: int = 1,
) -> dict[str, Any]:
    """The accuracy protocol on a bundled set, or on the runs of a ``traces`` file split by
    ``protocol`` (see ``benchmark_runs``); ``confidence``: the band whose coverage is measured;
    ``workers``: processes the held-out tasks are spread over (the same figures); ``model_cache``:
    a folder pre-trained models are kept in and read back from (``common.pretrain``); ``draws``:
    how many times each held-out context's k fine-tuning runs are drawn (the first draw is the
    one-draw benchmark's; every figure pools the draws, the band's interval still resamples
    contexts)."""
    confidence = validate_confidence(confidence)
    draws = validate_count("draws", draws)
    data, results = evaluate_held_out_tasks(
        _evaluate_task,
        dataset=dataset,
        traces=traces,
        protocol=protocol,
        seeds=seeds,
        confidence=confidence,
        workers=workers,
        progress=progress,
        quick=quick,
        model_cache=model_cache,
        draws=draws,
    )
    # errors[model][algorithm][k] → list of per-run relative errors
    errors: dict[str, dict[str, dict[int, list[float]]]] = {
        m: defaultdict(lambda: defaultdict(list)) for m in _models(data)
    }
    covered: dict[str, dict[int, list[bool]]] = defaultdict(lambda: defaultdict(list))
    # bands[model][algorithm][k] → one BAND_SUMS row per held-out context's draw
    bands: dict[str, dict[str, dict[int, list[np.ndarray]]]] = {
        m: defaultdict(lambda: defaultdict(list)) for m in BAND_MODELS
    }
    pretrain_s: list[float] = []
    finetune_s: list[float] = []
    predict_s: list[float] = []
    for result in results:
        for model, by_k in result.errors.items():
            for k, values in by_k.items():
                errors[model][result.algorithm][k].extend(values)
        for k, values in result.covered.items():
            covered[result.algorithm][k].extend(values)
        for model, by_k in result.bands.items():
            for k, rows in by_k.items():
                bands[model][result.algorithm][k].extend(rows)
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
        {
            **data.report_fields(),
            "draws": draws,
            "coverage": _coverage(covered, confidence),
            "band": {"confidence": confidence, **{m: band_report(bands[m]) for m in BAND_MODELS}},
        },
    )


@dataclass
class _TaskResult:
    """One held-out task's figures, merged in task order into the report."""

    algorithm: str
    errors: dict[str, dict[int, list[float]]]
    covered: dict[int, list[bool]]
    pretrain_s: float
    bands: dict[str, dict[int, list[np.ndarray]]] = field(
        default_factory=lambda: {m: defaultdict(list) for m in BAND_MODELS}
    )
    finetune_s: list[float] = field(default_factory=list)
    predict_s: list[float] = field(default_factory=list)


def _evaluate_task(
    data: BenchmarkRuns,
    seed: int,
    task: HeldOutTask,
    *,
    quick: bool,
    confidence: float,
    model_cache: str | Path | None,
    draws: int = 1,
) -> _TaskResult:
    models = _models(data)
    t0 = time.perf_counter()
    general = pretrain(task, seed, quick, model_cache)
    result = _TaskResult(
        task.algorithm,
        {m: defaultdict(list) for m in models},
        defaultdict(list),
        time.perf_counter() - t0,
    )
    gbm = GbmBaseline(task.train, seed)
    nearest = None if data.dimension is None else NearestCurves(task.train, data.dimension, task.held_out)
    rng = np.random.default_rng(10_000 + seed * 100 + task.fold)
    # one BAND_SUMS row per model, k and context, summed over the draws: a context's draws share
    # its runs, so the context stays the bootstrap's unit
    band_rows: dict[str, dict[int, dict[Any, np.ndarray]]] = {m: defaultdict(dict) for m in BAND_MODELS}
    for _ in range(draws):
        _evaluate_draw(general, task, result, band_rows, gbm, nearest, rng, confidence)
    for model, by_k in band_rows.items():
        for k, rows in by_k.items():
            result.bands[model][k].extend(rows.values())
    return result


def _evaluate_draw(
    general: RuntimeModel,
    task: HeldOutTask,
    result: _TaskResult,
    band_rows: dict[str, dict[int, dict[Any, np.ndarray]]],
    gbm: GbmBaseline,
    nearest: NearestCurves | None,
    rng: np.random.Generator,
    confidence: float,
) -> None:
    """One draw of every held-out context's k runs, for each k: the errors and band rows it adds."""
    errors = result.errors
    # every held-out context gets its k points first, so GBM trains once per k
    draws = {
        k: {cid: task.draw(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)}
        for k in K_VALUES
    }
    for k in K_VALUES:
        draws[k] = {cid: d for cid, d in draws[k].items() if not task.draws_fall_short(d[0], k)}
        if not draws[k]:
            continue
        points_all = [p for p, _ in draws[k].values()]
        tests_all = [t for _, t in draws[k].values()]
        extra = pd.concat(points_all) if k else task.held_out.iloc[:0]
        test_frame = pd.concat(tests_all)
        gbm_pred = gbm.fit_predict(extra.drop(columns=["context_id"]), test_frame)
        errors["gbm"][k].extend(_mre(gbm_pred, test_frame["runtime_s"].to_numpy()))
        for cid, (points, test) in draws[k].items():
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
            pred, lower, upper = tuned.predict_band(ctx, ns.tolist(), confidence)
            errors["bellamy"][k].extend(_mre(pred, actual))
            result.covered[k].extend(bool(c) for c in actual <= upper)
            _add_row(band_rows["bellamy"][k], cid, band_sums(actual, lower, upper))
            ern = ernest_band(points, ns, confidence)
            if ern is not None:
                errors["ernest"][k].extend(_mre(ern[0], actual))
                _add_row(band_rows["ernest"][k], cid, band_sums(actual, ern[1], ern[2]))
            near = None if nearest is None else nearest.predict(ctx, points, ns)
            if near is not None:
                errors["nearest_curves"][k].extend(_mre(near, actual))


def _add_row(rows: dict[Any, np.ndarray], context: Any, row: np.ndarray) -> None:
    rows[context] = row if context not in rows else rows[context] + row


def _models(data: BenchmarkRuns) -> tuple[str, ...]:
    return MODELS if data.dimension is None else TRANSFER_MODELS


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


# what one held-out context's draw adds to a band's tally, in this order (the unit of the bootstrap:
# the runs of one context share its fine-tuning points)
BAND_SUMS = ("runs", "under_upper", "above_lower", "inside", "log_width")
# the band measures, each a share of runs but the last: mean log(upper / lower), e^x the ratio
BAND_MEASURES = ("under_upper", "above_lower", "inside", "mean_log_width")


def band_sums(actual: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """One context's test runs against its band: the BAND_SUMS row (a run on a bound is inside)."""
    actual, lower, upper = (np.asarray(x, dtype=np.float64) for x in (actual, lower, upper))
    under, above = actual <= upper, actual >= lower
    return np.array(
        [len(actual), under.sum(), above.sum(), (under & above).sum(), np.log(upper / lower).sum()],
        dtype=np.float64,
    )


def band_report(
    rows: dict[str, dict[int, list[np.ndarray]]], resamples: int = BOOTSTRAP_RESAMPLES
) -> dict[str, Any]:
    """Per algorithm and k each BAND_MEASURES over its runs, and per k their mean over algorithms (as
    the errors), with 95 % percentile intervals of that mean resampling each algorithm's contexts;
    None where nothing was measured."""
    rng = np.random.default_rng(0)
    per_algorithm: dict[str, dict[str, dict[str, float | None]]] = {
        a: {m: {} for m in BAND_MEASURES} for a in sorted(rows)
    }
    overall: dict[str, dict[str, float | None]] = {m: {} for m in BAND_MEASURES}
    interval: dict[str, dict[str, list[float] | None]] = {m: {} for m in BAND_MEASURES}
    for k in K_VALUES:
        estimates, resampled = [], []
        for a in sorted(rows):
            table = np.array(rows[a].get(k, []), dtype=np.float64).reshape(-1, len(BAND_SUMS))
            if not len(table):
                for m in BAND_MEASURES:
                    per_algorithm[a][m][str(k)] = None
                continue
            share = table.sum(axis=0)[1:] / table[:, 0].sum()
            for m, v in zip(BAND_MEASURES, share, strict=True):
                per_algorithm[a][m][str(k)] = float(v)
            estimates.append(share)
            weights = rng.multinomial(len(table), np.full(len(table), 1.0 / len(table)), size=resamples)
            sums = weights @ table
            resampled.append(sums[:, 1:] / sums[:, :1])
        for i, m in enumerate(BAND_MEASURES):
            overall[m][str(k)] = float(np.mean([e[i] for e in estimates])) if estimates else None
            interval[m][str(k)] = (
                [float(v) for v in np.percentile(np.mean([r[:, i] for r in resampled], axis=0), [2.5, 97.5])]
                if resampled
                else None
            )
    return {"overall": overall, "interval_95": interval, "per_algorithm": per_algorithm}


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
        title=f"Mean relative error, {report['dataset']}{protocol_title(report)} ({report['seeds']} seed(s){_draws_title(report)}{', quick' if report['quick'] else ''})"
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
    for model, measured in report.get("band", {}).items():
        if model != "confidence":
            _render_band(console, model, measured, report["band"]["confidence"])
    render_skipped(report)
    t = report["timings"]
    console.print(
        f"pre-train median {t['pretrain_s_median']:.1f} s (max {t['pretrain_s_max']:.1f} s, {t['pretrains']} runs) · "
        f"fine-tune median {1000 * t['finetune_s_median']:.1f} ms · "
        f"predict 20 scale-outs median {t['predict_20_scale_outs_ms_median']:.2f} ms (p95 {t['predict_20_scale_outs_ms_p95']:.2f} ms)"
    )


_BAND_LABELS = {
    "under_upper": "≤ upper",
    "above_lower": "≥ lower",
    "inside": "inside",
    "mean_log_width": "log width",
}


def _draws_title(report: dict[str, Any]) -> str:
    draws = report.get("draws", 1)
    return "" if draws == 1 else f", {draws} draws of each context's runs"


def _render_band(console: Any, model: str, measured: dict[str, Any], confidence: float) -> None:
    """One line per measure, per algorithm and overall; the overall 95 % intervals below."""
    from rich.table import Table

    def cell(measure: str, v: float | None) -> str:
        return "—" if v is None else f"{v:.3f}" if measure == "mean_log_width" else f"{100 * v:.1f}%"

    q = 100 * confidence
    table = Table(
        title=f"{model}'s {q:g} % band on the test runs: share under its upper bound, above its lower "
        f"bound (ideal {q:g} % each), inside both ({2 * q - 100:g} %); width: mean log(upper/lower)"
    )
    table.add_column("algorithm")
    table.add_column("measure")
    for k in K_VALUES:
        table.add_column(f"k={k}", justify="right")
    for alg, values in measured["per_algorithm"].items():
        for m in BAND_MEASURES:
            table.add_row(alg, _BAND_LABELS[m], *[cell(m, values[m][str(k)]) for k in K_VALUES])
        table.add_section()
    for m in BAND_MEASURES:
        table.add_row(
            "[bold]overall",
            f"[bold]{_BAND_LABELS[m]}",
            *[cell(m, measured["overall"][m][str(k)]) for k in K_VALUES],
        )
    console.print(table)
    console.print(
        f"95 % bootstrap intervals of {model}'s overall band measures (resampling held-out contexts):"
    )
    for m in BAND_MEASURES:
        spans = [
            f"k={k} " + ("—" if span is None else f"{cell(m, span[0])}–{cell(m, span[1])}")
            for k, span in ((k, measured["interval_95"][m][str(k)]) for k in K_VALUES)
        ]
        console.print(f"  {_BAND_LABELS[m]}: " + ", ".join(spans))


def write_json(report: dict[str, Any], path: str | Path) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(report, indent=2) + "\n")
