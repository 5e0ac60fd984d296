"""Sizing replay (DESIGN.md): does the chosen scale-out meet the target, and at what cost?

Held-out contexts as in the accuracy benchmark; each context has k fine-tuning runs.
Targets are drawn from the range of the context's real mean runtimes (restricted to
targets some scale-out meets in every repetition, so an oracle exists). Each policy
picks among the context's scale-outs; a random real repetition at the chosen
scale-out decides hit or miss and its node-seconds. The oracle is the smallest
scale-out whose real runs all meet the target.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from airflow_provider_bellamy.benchmarks.common import (
    GbmBaseline,
    draw_points,
    held_out_tasks,
    pretrain,
)
from airflow_provider_bellamy.decisions import Prediction
from airflow_provider_bellamy.model import ErnestModel
from airflow_provider_bellamy.sizing import decide

POLICIES = ("bellamy", "ernest", "gbm", "always_max", "oracle")
K_SIZING = (1, 2, 3, 4, 5)
TARGETS_PER_CONTEXT = {"c3o": 6, "bell": 40}


def _choose(
    scale_outs: list[int], mean: np.ndarray, lower: np.ndarray, upper: np.ndarray, target: float, q: float
) -> int:
    pred = Prediction("replay", scale_outs, list(mean), list(lower), list(upper), q)
    return decide(pred, target_s=target).chosen_scale_out


def run_sizing(
    dataset: str = "c3o", confidence: float = 0.9, seeds: int = 3, quick: bool = False, progress: Any = None
) -> dict[str, Any]:
    hits: dict[str, dict[int, list[bool]]] = {p: defaultdict(list) for p in POLICIES}
    node_s: dict[str, dict[int, list[float]]] = {p: defaultdict(list) for p in POLICIES}
    started = time.perf_counter()
    for seed in range(seeds):
        for task in held_out_tasks(dataset, seed):
            if progress:
                progress(f"seed {seed} · {task.algorithm} · fold {task.fold}")
            general = pretrain(task, seed, quick)
            gbm = GbmBaseline(task.train, seed)
            rng = np.random.default_rng(20_000 + seed * 100 + task.fold)
            for k in K_SIZING:
                draws = {
                    cid: draw_points(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)
                }
                extra = pd.concat([p for p, _ in draws.values()]).drop(columns=["context_id"])
                grid_rows = []
                for cid, g in task.held_out.groupby("context_id", sort=True):
                    for n in sorted(g["scale_out"].unique()):
                        grid_rows.append({**g.iloc[0].to_dict(), "scale_out": int(n), "context_id": cid})
                grid = pd.DataFrame(grid_rows)
                gbm_pred = dict(
                    zip(
                        zip(grid["context_id"], grid["scale_out"], strict=True),
                        gbm.fit_predict(extra, grid),
                        strict=True,
                    )
                )
                for cid, g in task.held_out.groupby("context_id", sort=True):
                    points, _ = draws[cid]
                    ctx = g.iloc[0].to_dict()
                    ns = sorted(int(n) for n in g["scale_out"].unique())
                    runs_at = {n: g.loc[g["scale_out"] == n, "runtime_s"].to_numpy() for n in ns}
                    means = np.array([runs_at[n].mean() for n in ns])
                    worst = np.array([runs_at[n].max() for n in ns])
                    lo_t, hi_t = float(worst.min()), float(means.max())
                    if hi_t <= lo_t:
                        hi_t = lo_t * 1.5
                    tuned = general.finetune(points.drop(columns=["context_id"]))
                    b_mean, b_lo, b_hi = tuned.predict_band(ctx, ns, confidence)
                    size = float(ctx.get("data_size_mb") or 1.0)
                    ern = ErnestModel.fit_points(
                        points["scale_out"].to_numpy(), points["runtime_s"].to_numpy(), size
                    )
                    e_mean, e_lo, e_hi = ern.predict_band(None, ns, confidence)
                    g_mean = np.array([gbm_pred[(cid, n)] for n in ns])
                    for target in rng.uniform(lo_t, hi_t, TARGETS_PER_CONTEXT[dataset]):
                        choice = {
                            "bellamy": _choose(ns, b_mean, b_lo, b_hi, target, confidence),
                            "ernest": _choose(ns, e_mean, e_lo, e_hi, target, confidence),
                            "gbm": _choose(ns, g_mean, g_mean, g_mean, target, confidence),
                            "always_max": max(ns),
                            "oracle": next(n for n in ns if runs_at[n].max() <= target),
                        }
                        for policy, n in choice.items():
                            runtime = float(rng.choice(runs_at[n]))
                            hits[policy][k].append(runtime <= target)
                            node_s[policy][k].append(n * runtime)
    return _summarise(hits, node_s, dataset, confidence, seeds, quick, time.perf_counter() - started)


def _summarise(
    hits: dict[str, dict[int, list[bool]]],
    node_s: dict[str, dict[int, list[float]]],
    dataset: str,
    confidence: float,
    seeds: int,
    quick: bool,
    seconds: float,
) -> dict[str, Any]:
    def stats(policy: str, ks: tuple[int, ...]) -> dict[str, float]:
        h = [x for k in ks for x in hits[policy][k]]
        ns = sum(x for k in ks for x in node_s[policy][k])
        oracle = sum(x for k in ks for x in node_s["oracle"][k])
        return {"attainment": float(np.mean(h)), "node_seconds_vs_oracle": ns / oracle, "decisions": len(h)}

    return {
        "benchmark": "sizing",
        "dataset": dataset,
        "confidence": confidence,
        "seeds": seeds,
        "quick": quick,
        "date": time.strftime("%Y-%m-%d"),
        "k": list(K_SIZING),
        "policies": {p: stats(p, K_SIZING) for p in POLICIES},
        "per_k": {str(k): {p: stats(p, (k,)) for p in POLICIES} for k in K_SIZING},
        "seconds": round(seconds, 1),
    }


def render_sizing(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"Sizing replay, {report['dataset']}, requested confidence {report['confidence']:.0%} "
        f"({report['seeds']} seed(s){', quick' if report['quick'] else ''}; k = fine-tuning runs)"
    )
    table.add_column("policy")
    table.add_column("k", justify="right")
    table.add_column("SLA attainment", justify="right")
    table.add_column("node-seconds / oracle", justify="right")
    table.add_column("decisions", justify="right")
    for policy in POLICIES:
        for k in report["k"]:
            s = report["per_k"][str(k)][policy]
            table.add_row(
                policy,
                str(k),
                f"{s['attainment']:.1%}",
                f"{s['node_seconds_vs_oracle']:.3f}",
                str(s["decisions"]),
            )
        s = report["policies"][policy]
        table.add_row(
            f"[bold]{policy}",
            "[bold]all",
            f"[bold]{s['attainment']:.1%}",
            f"[bold]{s['node_seconds_vs_oracle']:.3f}",
            str(s["decisions"]),
        )
        table.add_section()
    console.print(table)
