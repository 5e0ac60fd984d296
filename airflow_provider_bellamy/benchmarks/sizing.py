"""Sizing replay (DESIGN.md): does the chosen scale-out meet the target, and at what cost?

Held-out contexts as in the accuracy benchmark; each context has k fine-tuning runs.
Targets are drawn from the range of the context's real mean runtimes (restricted to
targets some scale-out meets in every repetition, so an oracle exists). Each policy
picks among the context's scale-outs; a random real repetition at the chosen
scale-out decides hit or miss and its node-seconds. The oracle is the smallest
scale-out whose real runs all meet the target. Bellamy's band is decided by the product's default
rule and by two others (``BELLAMY_RULES``); the report breaks every policy's figures down per job
type and held-out task (``per_algorithm``, ``per_task``).

The k runs a context is fine-tuned on are drawn at random, and all targets of one draw share
them: a held-out task with few contexts (Bell holds out one per job) draws them several times
and splits its targets among the draws (``MIN_DRAWS_PER_TASK``). Every figure comes with a 95 %
bootstrap interval over the draws.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from airflow_provider_bellamy.benchmarks.common import (
    BOOTSTRAP_RESAMPLES,
    SCALE_OUT_SIDE,
    BenchmarkRuns,
    GbmBaseline,
    HeldOutTask,
    NearestCurves,
    evaluate_held_out_tasks,
    pretrain,
    protocol_title,
    render_skipped,
    validate_count,
)
from airflow_provider_bellamy.decisions import Prediction
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.model import ErnestModel
from airflow_provider_bellamy.records import validate_confidence
from airflow_provider_bellamy.sizing import decide, infeasible_rule

if TYPE_CHECKING:
    from airflow_provider_bellamy.model import RuntimeModel

# Bellamy's band decided by the operators' other settings, through the rule they launch by
# (sizing.infeasible_rule, sizing.decide), beside their default (min_scale_out, on_infeasible=warn:
# the fastest where no size meets the target at the confidence asked): "bellamy_relaxed",
# on_infeasible="run-likely" (the smallest predicted to meet the target); "bellamy_min_cost",
# objective="min_cost" with the same (the least node-hours at the upper bound)
BELLAMY_RULES = {
    "bellamy_relaxed": ("min_scale_out", "run-likely"),
    "bellamy_min_cost": ("min_cost", "run-likely"),
}
POLICIES = ("bellamy", *BELLAMY_RULES, "ernest", "gbm", "always_max", "oracle")
# the transfer protocols add the nearest-curves heuristic (common.NearestCurves), decided as GBM is:
# on its point prediction, no band; with no curve of its job type elsewhere, the largest scale-out
TRANSFER_POLICIES = (*POLICIES[:5], "nearest_curves", *POLICIES[5:])
K_SIZING = (1, 2, 3, 4, 5)
# per context, k and seed, over all its draws: C3O's folds hold many contexts, Bell's jobs one each
TARGETS_PER_CONTEXT = {
    "folds": 6,
    "leave-job-out": 40,
    "leave-machine-type-out": 6,
    "leave-environment-out": 6,
    "leave-size-out": 6,
}
# the scale-out protocols follow the set's own split (BenchmarkRuns.structure) and its targets per context
# Fine-tuning draws per held-out task and k. Every target of a draw rests on the same k runs, so
# the draws, not the targets, carry the replay's variance: with Bell's one held-out context per
# job, one draw decided all 40 targets of a k, and the same models read 1.077-1.120 x the
# oracle's node-seconds across six draws. A task with fewer contexts than this draws each
# context's runs again (C3O's folds hold >= 4 contexts: one draw each, as before).
MIN_DRAWS_PER_TASK = 4
# Per side of a scale-out protocol's cut, the report's key for the decisions whose oracle's choice lies
# past it, and what they are. Below the cut: a smaller cluster than any trained meets the deadline;
# there underpredicting misses it, overpredicting forgoes the saving.
CUT_REPORT = {
    "above": (
        "beyond_cut",
        "only a scale-out above the cut meets (the oracle's choice larger than any trained)",
    ),
    "below": ("below_cut", "a scale-out below the cut meets (the oracle's choice smaller than any trained)"),
}


def _choose(
    scale_outs: list[int],
    mean: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    target: float,
    q: float,
    objective: str = "min_scale_out",
    on_infeasible: str = "warn",
) -> int:
    pred = Prediction("replay", scale_outs, list(mean), list(lower), list(upper), q)
    rule = infeasible_rule(on_infeasible)
    return decide(pred, target_s=target, objective=objective, infeasible=rule).chosen_scale_out


class _Tally:
    """Every policy's decisions per k: hit or miss, node-seconds, the draw each rests on and where
    it was taken (job type, held-out task); with ``record``, every decision's detail as well."""

    def __init__(self, policies: tuple[str, ...] = POLICIES, record: bool = False) -> None:
        self.policies = policies
        self.hits: dict[str, dict[int, list[bool]]] = {p: defaultdict(list) for p in policies}
        self.node_s: dict[str, dict[int, list[float]]] = {p: defaultdict(list) for p in policies}
        self.units: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
        self.where: dict[int, list[tuple[str, str]]] = defaultdict(list)
        # the scale-out protocols: per decision, whether the oracle's choice lies past the cut (a
        # scale-out the model never saw: larger-scale-outs, only a larger one meets the target in
        # every real run; smaller-scale-outs, a smaller one than any trained meets it)
        self.past_cut: dict[int, list[bool]] = defaultdict(list)
        self.records: list[dict[str, Any]] | None = [] if record else None

    def draws(self) -> list[tuple[Any, ...]]:
        """Every draw the decisions rest on, once each, in the order they were made."""
        return list(dict.fromkeys(u for k in K_SIZING for u in self.units[k]))

    def extend(self, other: _Tally) -> None:
        """Append ``other``'s decisions after this tally's (tasks merged in their order)."""
        for k, units in other.units.items():
            self.units[k].extend(units)
            self.where[k].extend(other.where[k])
            self.past_cut[k].extend(other.past_cut[k])
        for policy in self.policies:
            for k, hits in other.hits[policy].items():
                self.hits[policy][k].extend(hits)
                self.node_s[policy][k].extend(other.node_s[policy][k])
        if self.records is not None and other.records is not None:
            self.records.extend(other.records)

    def add(
        self,
        k: int,
        unit: tuple[Any, ...],
        where: tuple[str, str],
        outcomes: dict[str, tuple[bool, float]],
        record: dict[str, Any] | None = None,
        past_cut: bool | None = None,
    ) -> None:
        self.units[k].append(unit)
        self.where[k].append(where)
        if past_cut is not None:
            self.past_cut[k].append(past_cut)
        for policy, (hit, node_seconds) in outcomes.items():
            self.hits[policy][k].append(hit)
            self.node_s[policy][k].append(node_seconds)
        if self.records is not None and record is not None:
            self.records.append(record)


def run_sizing(
    dataset: str = "c3o",
    confidence: float = 0.9,
    seeds: int = 3,
    quick: bool = False,
    progress: Any = None,
    min_draws: int = MIN_DRAWS_PER_TASK,
    *,
    traces: str | Path | None = None,
    protocol: str | None = None,
    workers: int = 1,
    model_cache: str | Path | None = None,
    decisions: str | Path | None = None,
) -> dict[str, Any]:
    """The replay on a bundled set, or on the runs of a ``traces`` file split by ``protocol`` (see
    ``benchmark_runs``); ``min_draws``: fine-tuning draws per held-out task and k, at least (more
    draws, the same decisions: a narrower interval for the same time spent pre-training); ``workers``:
    processes the held-out tasks are spread over (the same figures); ``model_cache``: a folder
    pre-trained models are kept in and read back from (``common.pretrain``); ``decisions``: a file
    every decision is written to as a JSON line (target, real runs, each policy's prediction, choice
    and outcome), to see where a figure comes from."""
    # checked before the first model is pre-trained, not a minute into the run
    confidence = validate_confidence(confidence)
    validate_count("min_draws", min_draws)
    if decisions is not None and Path(decisions).is_dir():
        raise InvalidInputError(
            "decisions", str(decisions), "is a folder: give a file to write the decisions to"
        )
    started = time.perf_counter()
    data, parts = evaluate_held_out_tasks(
        _replay_task,
        dataset=dataset,
        traces=traces,
        protocol=protocol,
        seeds=seeds,
        confidence=confidence,
        workers=workers,
        progress=progress,
        quick=quick,
        min_draws=min_draws,
        model_cache=model_cache,
        record=decisions is not None,
    )
    tally = _Tally(_policies(data), record=decisions is not None)
    for part in parts:
        tally.extend(part)
    if decisions is not None and tally.records is not None:
        _write_lines(tally.records, decisions)
    seconds = time.perf_counter() - started
    return _summarise(
        tally, data.name, confidence, seeds, quick, seconds, min_draws, data.report_fields(), data.protocol
    )


def _replay_task(
    data: BenchmarkRuns,
    seed: int,
    task: HeldOutTask,
    *,
    quick: bool,
    confidence: float,
    min_draws: int,
    model_cache: str | Path | None,
    record: bool = False,
) -> _Tally:
    """One held-out task's decisions, every draw and k, in their own tally."""
    tally = _Tally(_policies(data), record=record)
    per_context = TARGETS_PER_CONTEXT[data.structure]
    replay = _TaskReplay(
        task,
        pretrain(task, seed, quick, model_cache),
        GbmBaseline(task.train, seed),
        None if data.dimension is None else NearestCurves(task.train, data.dimension, task.held_out),
        confidence,
        np.random.default_rng(20_000 + seed * 100 + task.fold),
        tally,
        np.random.default_rng(30_000 + seed * 100 + task.fold),
    )
    targets = _split(per_context, _repeats(min_draws, task.held_out["context_id"].nunique(), per_context))
    for k in K_SIZING:
        for repeat, count in enumerate(targets):
            replay.draw(k, count, (seed, task.fold, repeat))
    return tally


def _write_lines(records: list[dict[str, Any]], path: str | Path) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def _policies(data: BenchmarkRuns) -> tuple[str, ...]:
    return POLICIES if data.dimension is None else TRANSFER_POLICIES


def _repeats(min_draws: int, contexts: int, targets: int) -> int:
    """How often each held-out context's fine-tuning runs are drawn per k: enough for the task to
    reach ``min_draws`` draws, never more than its ``targets`` per context (a draw without one
    decides nothing)."""
    return max(1, min(targets, math.ceil(min_draws / contexts)))


def _split(total: int, parts: int) -> list[int]:
    """``total`` targets over ``parts`` draws, as evenly as integers allow."""
    return [total // parts + (i < total % parts) for i in range(parts)]


@dataclass(frozen=True)
class _HeldOutContext:
    """A held-out context as the replay needs it, whatever the draw: its runs, its scale-outs with
    the real runs at each, and the range its targets are drawn from."""

    cid: str
    runs: pd.DataFrame
    properties: dict[str, Any]
    scale_outs: list[int]
    runs_at: dict[int, np.ndarray]
    lowest_target: float
    highest_target: float

    @classmethod
    def of(cls, cid: str, runs: pd.DataFrame) -> _HeldOutContext:
        scale_outs = sorted(int(n) for n in runs["scale_out"].unique())
        runs_at = {n: runs.loc[runs["scale_out"] == n, "runtime_s"].to_numpy() for n in scale_outs}
        # from the lowest worst run of any scale-out (so an oracle exists) up to the slowest mean
        lo = float(min(r.max() for r in runs_at.values()))
        hi = float(max(r.mean() for r in runs_at.values()))
        return cls(cid, runs, runs.iloc[0].to_dict(), scale_outs, runs_at, lo, hi if hi > lo else lo * 1.5)


class _TaskReplay:
    """One held-out task's replay: its pre-trained model, its GBM baseline and the grid of its
    contexts' scale-outs, decided on draw after draw."""

    def __init__(
        self,
        task: HeldOutTask,
        general: RuntimeModel,
        gbm: GbmBaseline,
        nearest: NearestCurves | None,
        confidence: float,
        rng: np.random.Generator,
        tally: _Tally,
        rules_rng: np.random.Generator,
    ) -> None:
        self.task, self.general, self.gbm, self.nearest = task, general, gbm, nearest
        self.confidence, self.rng, self.tally = confidence, rng, tally
        self.rules_rng = rules_rng
        self.contexts = [
            _HeldOutContext.of(cid, g) for cid, g in task.held_out.groupby("context_id", sort=True)
        ]
        self.grid = pd.DataFrame(
            [
                {**c.properties, "scale_out": n, "context_id": c.cid}
                for c in self.contexts
                for n in c.scale_outs
            ]
        )

    def draw(self, k: int, targets: int, draw: tuple[int, int, int]) -> None:
        """One draw of k fine-tuning runs for every held-out context, then ``targets`` targets per
        context, each decided by every policy."""
        confidence, rng = self.confidence, self.rng
        draws = {c.cid: self.task.draw(c.runs, k, rng)[0] for c in self.contexts}
        # a scale-out protocol decides a k only for contexts with k kept scale-outs
        contexts = [c for c in self.contexts if not self.task.draws_fall_short(draws[c.cid], k)]
        if not contexts:
            return
        extra = pd.concat([draws[c.cid] for c in contexts]).drop(columns=["context_id"])
        gbm_pred = dict(
            zip(
                zip(self.grid["context_id"], self.grid["scale_out"], strict=True),
                self.gbm.fit_predict(extra, self.grid),
                strict=True,
            )
        )
        for c in contexts:
            points, ns, runs_at = draws[c.cid], c.scale_outs, c.runs_at
            tuned = self.general.finetune(points.drop(columns=["context_id"]))
            b_mean, b_lo, b_hi = tuned.predict_band(c.properties, ns, confidence)
            size = float(c.properties.get("data_size_mb") or 1.0)
            ern = ErnestModel.fit_points(points["scale_out"].to_numpy(), points["runtime_s"].to_numpy(), size)
            e_mean, e_lo, e_hi = ern.predict_band(None, ns, confidence)
            g_mean = np.array([gbm_pred[(c.cid, n)] for n in ns])
            near = None if self.nearest is None else self.nearest.predict(c.properties, points, np.array(ns))
            bands = {"bellamy": (b_mean, b_lo, b_hi), "ernest": (e_mean, e_lo, e_hi), "gbm": (g_mean,) * 3}
            if near is not None:
                bands["nearest_curves"] = (near,) * 3
            where = (self.task.algorithm, self.task.label())
            for target in rng.uniform(c.lowest_target, c.highest_target, targets):
                choice = {
                    "bellamy": _choose(ns, b_mean, b_lo, b_hi, target, confidence),
                    **{
                        policy: _choose(ns, b_mean, b_lo, b_hi, target, confidence, *rule)
                        for policy, rule in BELLAMY_RULES.items()
                    },
                    "ernest": _choose(ns, e_mean, e_lo, e_hi, target, confidence),
                    "gbm": _choose(ns, g_mean, g_mean, g_mean, target, confidence),
                    "always_max": max(ns),
                    "nearest_curves": max(ns)
                    if near is None
                    else _choose(ns, near, near, near, target, confidence),
                    "oracle": next(n for n in ns if runs_at[n].max() <= target),
                }
                outcomes = {}
                for policy in self.tally.policies:
                    if policy in BELLAMY_RULES:
                        continue
                    n = choice[policy]
                    runtime = float(rng.choice(runs_at[n]))
                    outcomes[policy] = (runtime <= target, n * runtime)
                # Bellamy's other rules: the same real run as another rule's that chose the same size
                # (the rules differ only where they choose differently), else one of their own draws,
                # which never shift the other policies'
                for policy in BELLAMY_RULES:
                    n = choice[policy]
                    same = next(
                        (p for p in ("bellamy", *BELLAMY_RULES) if p in outcomes and choice[p] == n), None
                    )
                    if same is None:
                        runtime = float(self.rules_rng.choice(runs_at[n]))
                        outcomes[policy] = (runtime <= target, n * runtime)
                    else:
                        outcomes[policy] = outcomes[same]
                outcomes = {p: outcomes[p] for p in self.tally.policies}
                record = None
                if self.tally.records is not None:
                    record = self._record(c, k, draw, float(target), points, bands, choice, outcomes)
                past = None if self.task.cut is None else bool(self.task.past_cut(choice["oracle"]))
                # the unit of the bootstrap: one context's draw of k runs
                self.tally.add(k, (self.task.algorithm, c.cid, k, *draw), where, outcomes, record, past)

    def _record(
        self,
        c: _HeldOutContext,
        k: int,
        draw: tuple[int, int, int],
        target: float,
        points: pd.DataFrame,
        bands: dict[str, tuple[np.ndarray, ...]],
        choice: dict[str, int],
        outcomes: dict[str, tuple[bool, float]],
    ) -> dict[str, Any]:
        """One decision in full, as ``--decisions`` writes it (the scale-out protocols: with the cut)."""
        floats = lambda values: [float(v) for v in values]  # noqa: E731
        cut = {} if self.task.cut is None else {"cut": self.task.cut}
        return {
            "job_type": self.task.algorithm,
            "task": self.task.label(),
            **cut,
            "context_id": c.cid,
            "k": k,
            "draw": list(draw),
            "target_s": target,
            "scale_outs": c.scale_outs,
            "real_mean_s": floats(c.runs_at[n].mean() for n in c.scale_outs),
            "real_max_s": floats(c.runs_at[n].max() for n in c.scale_outs),
            "tuned_on": [int(n) for n in points["scale_out"]],
            "predicted": {
                p: {"mean_s": floats(mean), "lower_s": floats(lower), "upper_s": floats(upper)}
                for p, (mean, lower, upper) in bands.items()
            },
            "decisions": {
                p: {"scale_out": int(choice[p]), "met": bool(hit), "node_seconds": float(node_s)}
                for p, (hit, node_s) in outcomes.items()
            },
        }


def _summarise(
    tally: _Tally,
    dataset: str,
    confidence: float,
    seeds: int,
    quick: bool,
    seconds: float,
    min_draws: int = MIN_DRAWS_PER_TASK,
    fields: dict[str, Any] | None = None,
    protocol: str | None = None,
) -> dict[str, Any]:
    def stats(policy: str, ks: tuple[int, ...]) -> dict[str, float]:
        h = [x for k in ks for x in tally.hits[policy][k]]
        ns = sum(x for k in ks for x in tally.node_s[policy][k])
        oracle = sum(x for k in ks for x in tally.node_s["oracle"][k])
        return {"attainment": float(np.mean(h)), "node_seconds_vs_oracle": ns / oracle, "decisions": len(h)}

    # the k some draw decided (a scale-out protocol decides none above the scale-outs its cut keeps)
    ks = tuple(k for k in K_SIZING if tally.units[k])
    policies = {p: stats(p, ks) for p in tally.policies}
    for policy, interval in _bootstrap(tally).items():
        policies[policy]["interval_95"] = interval
    per_algorithm, per_task = _where_the_cost_goes(tally)
    past = _past_the_cut(tally)
    past_key = CUT_REPORT.get(SCALE_OUT_SIDE.get(protocol or ""), ("",))[0]
    return {
        "benchmark": "sizing",
        "dataset": dataset,
        **(fields or {}),
        "confidence": confidence,
        "seeds": seeds,
        "quick": quick,
        "date": time.strftime("%Y-%m-%d"),
        "k": list(ks),
        "min_draws_per_task": min_draws,
        "draws": len(tally.draws()),
        "policies": policies,
        "per_k": {str(k): {p: stats(p, (k,)) for p in tally.policies} for k in ks},
        **({past_key: past} if past and past_key else {}),
        "per_algorithm": per_algorithm,
        "per_task": per_task,
        "seconds": round(seconds, 1),
    }


def _past_the_cut(tally: _Tally) -> dict[str, Any] | None:
    """The scale-out protocols: the share of decisions whose oracle's choice lies past the cut (a
    scale-out no run of which was trained on), and every policy's attainment and node-seconds / the
    oracle's on those decisions alone; None where no decision carries the flag (other protocols)."""
    flags = np.array([x for k in K_SIZING for x in tally.past_cut[k]], dtype=bool)
    if not len(flags) or len(flags) != sum(len(tally.units[k]) for k in K_SIZING):
        return None
    oracle = np.array([x for k in K_SIZING for x in tally.node_s["oracle"][k]], dtype=np.float64)
    intervals = _bootstrap(tally, flags) if flags.any() else {}
    policies = {}
    for p in tally.policies:
        hits = np.array([x for k in K_SIZING for x in tally.hits[p][k]], dtype=bool)[flags]
        node_s = np.array([x for k in K_SIZING for x in tally.node_s[p][k]], dtype=np.float64)[flags]
        policies[p] = {
            "attainment": float(hits.mean()) if flags.any() else None,
            "node_seconds_vs_oracle": float(node_s.sum() / oracle[flags].sum()) if flags.any() else None,
            "decisions": int(flags.sum()),
            "interval_95": intervals.get(p),
        }
    return {"share": float(flags.mean()), "policies": policies}


def _where_the_cost_goes(
    tally: _Tally,
) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, dict[str, dict[str, dict[str, float]]]]]:
    """Every policy's figures per job type, and per held-out task within it (a fold, a machine
    type). Besides each group's attainment and node-seconds / its own oracle: its share of the
    oracle's node-seconds (how much the group weighs in the overall ratio) and ``adds_to_ratio``,
    (the group's node-seconds - its oracle's) / all the oracle's node-seconds. The groups' additions
    sum to the overall ratio - 1: they say which job types carry a policy's excess."""
    where = [w for k in K_SIZING for w in tally.where[k]]
    oracle = np.array([x for k in K_SIZING for x in tally.node_s["oracle"][k]], dtype=np.float64)
    total = float(oracle.sum())
    flat = {
        p: (
            np.array([x for k in K_SIZING for x in tally.hits[p][k]], dtype=bool),
            np.array([x for k in K_SIZING for x in tally.node_s[p][k]], dtype=np.float64),
        )
        for p in tally.policies
    }

    def stats(mask: np.ndarray) -> dict[str, dict[str, float]]:
        base = float(oracle[mask].sum())
        out = {}
        for p, (hits, node_s) in flat.items():
            spent = float(node_s[mask].sum())
            out[p] = {
                "attainment": float(hits[mask].mean()),
                "node_seconds_vs_oracle": spent / base,
                "adds_to_ratio": (spent - base) / total,
                "oracle_share": base / total,
                "decisions": int(mask.sum()),
            }
        return out

    algorithms = np.array([a for a, _ in where], dtype=object)
    tasks = np.array([t for _, t in where], dtype=object)
    per_algorithm, per_task = {}, {}
    for a in sorted(set(algorithms)):
        mine = algorithms == a
        per_algorithm[a] = stats(mine)
        per_task[a] = {t: stats(mine & (tasks == t)) for t in sorted(set(tasks[mine]))}
    return per_algorithm, per_task


def _bootstrap(tally: _Tally, among: np.ndarray | None = None) -> dict[str, dict[str, list[float]]]:
    """95 % percentile intervals of each policy's attainment and node-seconds / oracle, resampling
    the draws of fine-tuning runs (with all their targets) with replacement: the decisions of one
    draw share its runs, so they are not independent of each other. ``among``: a mask over the
    decisions (in tally order) the figures are taken on, all by default (a resample without one of
    them is left out of the percentiles)."""
    index = {u: i for i, u in enumerate(tally.draws())}
    owner = np.array([index[u] for k in K_SIZING for u in tally.units[k]])
    keep = np.ones(len(owner), dtype=bool) if among is None else among
    count = np.bincount(owner[keep], minlength=len(index))
    rng = np.random.default_rng(0)
    draws = rng.multinomial(len(index), np.full(len(index), 1.0 / len(index)), size=BOOTSTRAP_RESAMPLES)

    def summed(values: list[float]) -> np.ndarray:
        weights = np.asarray(values, dtype=np.float64)[keep]
        return draws @ np.bincount(owner[keep], weights=weights, minlength=len(index))

    def flat(table: dict[int, list[Any]]) -> list[float]:
        return [float(x) for k in K_SIZING for x in table[k]]

    oracle = summed(flat(tally.node_s["oracle"]))
    decisions = draws @ count
    some = decisions > 0
    out = {}
    for policy in tally.policies:
        attainment = summed(flat(tally.hits[policy]))[some] / decisions[some]
        ratio = summed(flat(tally.node_s[policy]))[some] / oracle[some]
        out[policy] = {
            "attainment": [float(v) for v in np.percentile(attainment, [2.5, 97.5])],
            "node_seconds_vs_oracle": [float(v) for v in np.percentile(ratio, [2.5, 97.5])],
        }
    return out


def render_sizing(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"Sizing replay, {report['dataset']}{protocol_title(report)}, requested confidence {report['confidence']:.0%} "
        f"({report['seeds']} seed(s){', quick' if report['quick'] else ''}; k = fine-tuning runs)"
    )
    table.add_column("policy")
    table.add_column("k", justify="right")
    table.add_column("SLA attainment", justify="right")
    table.add_column("node-seconds / oracle", justify="right")
    table.add_column("decisions", justify="right")
    for policy in report["policies"]:
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
    render_skipped(report)
    console.print(f"95 % bootstrap intervals over {report['draws']} draws of fine-tuning runs:")
    for policy in [p for p in report["policies"] if p != "oracle"]:
        att, ratio = (
            report["policies"][policy]["interval_95"][m] for m in ("attainment", "node_seconds_vs_oracle")
        )
        console.print(
            f"  {policy}: attainment {att[0]:.1%}-{att[1]:.1%}, node-seconds / oracle {ratio[0]:.3f}-{ratio[1]:.3f}"
        )
    for key, what in CUT_REPORT.values():
        past = report.get(key)
        if not past:
            continue
        console.print(f"Targets {what}: {past['share']:.1%} of the decisions; on those:")
        for policy, s in past["policies"].items():
            if policy != "oracle" and s["attainment"] is not None:
                att, ratio = (s["interval_95"][m] for m in ("attainment", "node_seconds_vs_oracle"))
                console.print(
                    f"  {policy}: attainment {s['attainment']:.1%} ({att[0]:.1%}-{att[1]:.1%}), node-seconds / "
                    f"oracle {s['node_seconds_vs_oracle']:.3f} ({ratio[0]:.3f}-{ratio[1]:.3f}; {s['decisions']} decisions)"
                )
    if report.get("per_algorithm"):
        render_where_the_cost_goes(report, console)


def render_where_the_cost_goes(report: dict[str, Any], console: Any) -> None:
    """Per policy, one table: each job type (bold) and its held-out tasks, their attainment, their
    node-seconds / their own oracle's, and how much they add to the policy's overall ratio."""
    from rich.table import Table

    for policy in [p for p in report["policies"] if p != "oracle"]:
        overall = report["policies"][policy]["node_seconds_vs_oracle"]
        table = Table(
            title=f"Where {policy}'s node-seconds go: {overall:.3f} x the oracle's = 1 + the sum of 'adds'",
            caption="share: of the oracle's node-seconds; x oracle: node-seconds / the group's own oracle's; "
            "adds: (node-seconds - the oracle's) / all the oracle's node-seconds",
        )
        for column in ("job type, task", "decisions", "share", "attained", "x oracle", "adds"):
            first = column.startswith("job")
            table.add_column(column, justify="left" if first else "right", no_wrap=first)
        for algorithm, by_policy in report["per_algorithm"].items():
            rows = [(f"[bold]{algorithm}", by_policy[policy])]
            rows += [(f"  {task}", s[policy]) for task, s in report["per_task"][algorithm].items()]
            for label, s in rows:
                table.add_row(
                    label,
                    str(s["decisions"]),
                    f"{s['oracle_share']:.1%}",
                    f"{s['attainment']:.1%}",
                    f"{s['node_seconds_vs_oracle']:.3f}",
                    f"{s['adds_to_ratio']:+.3f}",
                )
        console.print(table)
