"""Where a sizing replay's node-seconds go (docs/benchmarks.md, issue 17): a throw-away analysis
of ``bellamy benchmark sizing ... --decisions FILE``. Usage: python sizing-cost-decomposition.py FILE

Costs are expected node-seconds, n x the mean of the real runs at n (the replay draws one real run
per decision; the expectation removes that draw's noise), attainment the share of the real runs
at n that meet the target. Counterfactual policies decide on the same decisions' targets."""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np

from airflow_provider_bellamy.benchmarks.common import cached_benchmark_runs

with open(sys.argv[1]) as f:
    lines = [json.loads(line) for line in f]
runs = cached_benchmark_runs("c3o", None, "leave-machine-type-out").runs
real = {
    cid: {int(n): r["runtime_s"].to_numpy() for n, r in g.groupby("scale_out")}
    for cid, g in runs.groupby("context_id")
}


def smallest(ns: list[int], ok: np.ndarray) -> int | None:
    return next((n for n, o in zip(ns, ok, strict=True) if o), None)


def choose(ns: list[int], upper: np.ndarray, target: float) -> int:
    """The product's rule (sizing.decide, min_scale_out): smallest upper <= target, else the fastest."""
    n = smallest(ns, upper <= target)
    return ns[int(np.argmin(upper))] if n is None else n


def cost(line: dict, n: int) -> float:
    return n * float(real[line["context_id"]][n].mean())


def hit(line: dict, n: int) -> float:
    return float((real[line["context_id"]][n] <= line["target_s"]).mean())


def upper_needed() -> dict[tuple[str, int], float]:
    """Per job type and k, the ratio to Bellamy's mean that 90 % of the worst real runs stay under,
    at the scale-outs the context was not tuned on: what a 90 % upper bound calibrated per job type
    would need. In-sample (from the replay's own decisions): the most such a calibration could buy."""
    ratios, seen = defaultdict(list), set()
    for line in lines:
        key = (line["context_id"], line["k"], tuple(line["draw"]))
        if key in seen:
            continue
        seen.add(key)
        mean = line["predicted"]["bellamy"]["mean_s"]
        for i, n in enumerate(line["scale_outs"]):
            if n not in line["tuned_on"]:
                ratios[(line["job_type"], line["k"])].append(line["real_max_s"][i] / mean[i])
    return {key: float(np.quantile(r, 0.9)) for key, r in ratios.items()}


needed = upper_needed()


def relaxed(ns: list[int], mean: np.ndarray, upper: np.ndarray, t: float) -> int:
    """sizing.decide with infeasible="smallest_predicted"."""
    if (upper <= t).any():
        return choose(ns, upper, t)
    return choose(ns, mean, t)


def policies(line: dict) -> dict[str, int]:
    ns, t = line["scale_outs"], line["target_s"]
    mean_r, max_r = np.array(line["real_mean_s"]), np.array(line["real_max_s"])
    b = line["predicted"]["bellamy"]
    bm, bu = np.array(b["mean_s"]), np.array(b["upper_s"])
    meeting = [n for n, m in zip(ns, max_r, strict=True) if m <= t]
    out = {p: d["scale_out"] for p, d in line["decisions"].items()}
    out["oracle_cheapest"] = min(meeting, key=lambda n: (cost(line, n), n))
    out["bellamy_no_band"] = choose(ns, bm, t)
    # the band's relative width around the truth: what the band alone costs
    out["real_mean_x_bellamy_width"] = choose(ns, mean_r * bu / bm, t)
    out["real_mean_no_band"] = choose(ns, mean_r, t)
    per_job = bm * needed[(line["job_type"], line["k"])]
    out["bellamy_band_per_job_type"] = choose(ns, per_job, t)
    out["bellamy_band_per_job_type_relaxed"] = relaxed(ns, bm, per_job, t)
    # the product's other objective: least node-hours at the upper bound among those meeting (the
    # fastest where none does: the replay's bellamy_min_cost takes those predicted to meet it)
    ok = [n for n, u in zip(ns, bu, strict=True) if u <= t]
    out["bellamy_min_cost_fastest"] = (
        min(ok, key=lambda n: (n * bu[ns.index(n)], n)) if ok else ns[int(np.argmin(bu))]
    )
    return out


choices = [policies(line) for line in lines]
oracle = np.array([cost(line, c["oracle"]) for line, c in zip(lines, choices, strict=True)])
total = oracle.sum()


def summary(policy: str, mask: np.ndarray | None = None) -> tuple[float, float, float]:
    mask = np.ones(len(lines), bool) if mask is None else mask
    spent = np.array([cost(line, c[policy]) for line, c in zip(lines, choices, strict=True)])
    hits = np.array([hit(line, c[policy]) for line, c in zip(lines, choices, strict=True)])
    return hits[mask].mean(), spent[mask].sum() / oracle[mask].sum(), (spent - oracle)[mask].sum() / total


print("per job type and k, the upper / mean ratio a 90 % bound needs (in-sample), against Bellamy's median:")
for job in sorted({j for j, _ in needed}):
    medians = {
        k: np.median(
            [
                u / m
                for line in lines
                if (line["job_type"], line["k"]) == (job, k)
                for u, m in zip(
                    line["predicted"]["bellamy"]["upper_s"],
                    line["predicted"]["bellamy"]["mean_s"],
                    strict=True,
                )
            ]
        )
        for k in sorted({k for j, k in needed if j == job})
    }
    print(f"  {job:9s} " + "  ".join(f"k={k}: {needed[(job, k)]:.2f} vs {m:.2f}" for k, m in medians.items()))
print(f"{len(lines)} decisions; expected node-seconds (n x mean real run at n), share of real runs met")
print("\n== policies and counterfactuals (all decisions) ==")
for p in choices[0]:
    att, ratio, _ = summary(p)
    print(f"  {p:28s} attainment {att:6.1%}  node-s / oracle {ratio:.3f}")
drawn = {p: sum(line["decisions"][p]["node_seconds"] for line in lines) for p in ("bellamy", "oracle")}
print(f"  (bellamy as the replay drew its runs: {drawn['bellamy'] / drawn['oracle']:.3f})")

print("\n== bellamy's excess by why it chose its size (adds to the ratio; share of decisions) ==")
why = []
for line, c in zip(lines, choices, strict=True):
    ns, t, n_o, n_b = line["scale_outs"], line["target_s"], c["oracle"], c["bellamy"]
    b = line["predicted"]["bellamy"]
    i = ns.index(n_o)
    if n_b == n_o:
        why.append("same as the oracle")
    elif n_b < n_o:
        why.append("smaller than the oracle")
    elif b["mean_s"][i] > t:
        why.append("larger: mean at the oracle's size > target")
    else:
        why.append("larger: mean <= target < upper (band)")
why = np.array(why)
spent_b = np.array([cost(line, c["bellamy"]) for line, c in zip(lines, choices, strict=True)])
for w in sorted(set(why)):
    m = why == w
    print(f"  {w:45s} {m.mean():6.1%} of decisions, adds {(spent_b - oracle)[m].sum() / total:+.3f}")

print("\n== where the oracle's size sits: the oracle's margin, (target - its worst run) / target ==")
margin = np.array(
    [
        (line["target_s"] - line["real_max_s"][line["scale_outs"].index(c["oracle"])]) / line["target_s"]
        for line, c in zip(lines, choices, strict=True)
    ]
)
for lo, hi in ((0, 0.02), (0.02, 0.05), (0.05, 0.1), (0.1, 0.2), (0.2, 1.01)):
    m = (margin >= lo) & (margin < hi)
    att, ratio, adds = summary("bellamy", m)
    _, r_nb, _ = summary("real_mean_x_bellamy_width", m)
    _, r_ch, _ = summary("oracle_cheapest", m)
    print(
        f"  margin {lo:4.0%}-{hi:4.0%}: {m.mean():6.1%} of decisions, {oracle[m].sum() / total:6.1%} of the "
        f"oracle's node-s; bellamy {att:6.1%} at {ratio:.3f} (adds {adds:+.3f}); truth x band {r_nb:.3f}; "
        f"cheapest oracle {r_ch:.3f}"
    )

print("\n== node-seconds per step up from the oracle's size (how steep the cost of one size up is) ==")
steps = defaultdict(list)
for line, c in zip(lines, choices, strict=True):
    ns, n_o, n_b = line["scale_outs"], c["oracle"], c["bellamy"]
    steps[ns.index(n_b) - ns.index(n_o)].append(cost(line, n_b) / cost(line, n_o))
for s in sorted(steps):
    print(
        f"  {s:+d} step(s): {len(steps[s]):5d} decisions, bellamy / oracle node-s median {np.median(steps[s]):.2f}"
    )

print("\n== per job type and held-out task: bellamy, the truth with bellamy's band, the cheapest oracle ==")
for key in sorted({(line["job_type"], line["task"]) for line in lines}):
    m = np.array([(line["job_type"], line["task"]) == key for line in lines])
    att, ratio, adds = summary("bellamy", m)
    print(
        f"  {key[0]:9s} {key[1]:22s} {m.sum():5d}: bellamy {att:6.1%} {ratio:.3f} adds {adds:+.3f}; "
        f"no band {summary('bellamy_no_band', m)[1]:.3f}; truth x band {summary('real_mean_x_bellamy_width', m)[1]:.3f}; "
        f"truth {summary('real_mean_no_band', m)[1]:.3f}; cheapest oracle {summary('oracle_cheapest', m)[1]:.3f}"
    )

print("\n== bellamy per k ==")
for k in sorted({line["k"] for line in lines}):
    m = np.array([line["k"] == k for line in lines])
    att, ratio, adds = summary("bellamy", m)
    print(
        f"  k={k}: {att:6.1%} at {ratio:.3f}; truth x band {summary('real_mean_x_bellamy_width', m)[1]:.3f}"
    )

print("\n== bellamy per target position, (target - lowest) / (highest - lowest) of the context's range ==")
pos = []
for line in lines:
    lo, hi = min(line["real_max_s"]), max(line["real_mean_s"])
    pos.append((line["target_s"] - lo) / (hi - lo) if hi > lo else 0.5)
pos = np.array(pos)
for lo, hi in ((0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.01)):
    m = (pos >= lo) & (pos < hi)
    att, ratio, adds = summary("bellamy", m)
    print(
        f"  {lo:.1f}-{hi:.1f}: {oracle[m].sum() / total:6.1%} of the oracle's node-s; bellamy {att:6.1%} at "
        f"{ratio:.3f} (adds {adds:+.3f}); truth x band {summary('real_mean_x_bellamy_width', m)[1]:.3f}"
    )

print("\n== concentration: contexts by their oracle node-seconds ==")
per_ctx = defaultdict(lambda: [0.0, 0.0])
for line, o, s in zip(lines, oracle, spent_b, strict=True):
    per_ctx[line["context_id"]][0] += o
    per_ctx[line["context_id"]][1] += s - o
ranked = sorted(per_ctx.values(), key=lambda v: -v[0])
for frac in (0.05, 0.1, 0.25):
    top = ranked[: max(1, round(frac * len(ranked)))]
    print(
        f"  top {frac:.0%} of {len(ranked)} contexts: {sum(v[0] for v in top) / total:6.1%} of the oracle's "
        f"node-s, {sum(v[1] for v in top) / total:+.3f} of bellamy's excess"
    )
mean_ratio = np.mean(spent_b / oracle)
print(f"  mean of per-decision ratios (every decision weighs the same): {mean_ratio:.3f}")

print("\n== decisions no size meets at the confidence asked (every upper bound > target): bellamy ==")
infeasible = np.array([min(line["predicted"]["bellamy"]["upper_s"]) > line["target_s"] for line in lines])
jobs = np.array([line["job_type"] for line in lines])
for label, m in [("all", np.ones(len(lines), bool))] + [(j, jobs == j) for j in sorted(set(jobs))]:
    both = m & infeasible
    print(
        f"  {label:9s} {both.sum() / m.sum():6.1%} infeasible, adding {(spent_b - oracle)[both].sum() / total:+.3f} "
        f"(bellamy {summary('bellamy', both)[0]:.1%} at {summary('bellamy', both)[1]:.3f} of their oracle's; "
        f"relaxed {summary('bellamy_relaxed', both)[0]:.1%} at {summary('bellamy_relaxed', both)[1]:.3f})"
    )
