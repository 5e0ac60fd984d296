"""Session 32 (jobcal32): in a model of several job types (where ``calibration.job_scales`` acts),
does the mean rule leave a job type's tail short? Pre-trains one model on every run of a trace
(quick, seed 0, no unseen-job or out-of-distribution pass) and, from the scores its final tables
were built from (the pooled, check-normalised ones, in the tables' units: far ones / far_scale),
per job type, per k, per side: the shipped scale (mean ratio, shrunk), the ratio of the job type's
90 % one-sided quantile to the pool's, and the share of the job type's own out-of-fold scores its
band covers (pool's 90 % quantile × the shipped scale): in-sample, so only a lower bound on a
shortfall.

Then the two rules out of sample: the out-of-fold contexts split at random in halves (400 splits,
stratified by job type); on half A the pooled 90 % / 10 % quantiles of the scores and each job
type's scale per side by the shipped mean rule (shrunk by its contexts, never below 1) and by a
quantile rule (the job type's one-sided quantile over the pool's, shrunk and floored alike); on
half B the share of each job type's scores inside its side's bound, and the mean scale (the width
it costs).

usage: python job-scales-multi-s32-jobcal32.py TRACE
"""

import sys
from pathlib import Path

import numpy as np

from airflow_provider_bellamy.benchmarks.common import benchmark_runs
from airflow_provider_bellamy.benchmarks.common import quick_config
from airflow_provider_bellamy.model import RuntimeModel
from airflow_provider_bellamy.model import calibration as cal

TRACE = sys.argv[1]
HERE = Path(__file__).parent
captured = []
original, original_tables = cal.check_normalised_tables, cal._tables_per_k
last = []


def tables_capturing(*args, **kwargs):
    if kwargs.get("per_residual") is not None:
        last[:] = [kwargs["per_residual"]]
    return original_tables(*args, **kwargs)


def capturing(per_k, checks, env_of, job_of, small_max, n_contexts, noise_sd, spread=None):
    t = original(per_k, checks, env_of, job_of, small_max, n_contexts, noise_sd, spread=spread)
    if spread is None:
        captured.append((per_k, job_of, small_max, t, last[0]))
    return t


cal._tables_per_k, cal.check_normalised_tables = tables_capturing, capturing
data = (
    benchmark_runs("c3o", protocol="folds")
    if TRACE == "c3o"
    else benchmark_runs(traces=HERE / f"synthetic-trace-{TRACE}.csv", protocol="folds")
)
train = data.runs[data.evaluated].drop(columns=["context_id"])
model = RuntimeModel.pretrain(train, seed=0, config=quick_config(), unseen_job_types=False, extrapolation=False)
per_k, job_of, small_max, tables, divisors = captured[0]
print(f"# {TRACE}: one model of {sorted(set(job_of))}, {len(job_of)} contexts out of fold")
for k in (3, 4, 5):
    raw, at, owner, distance = per_k[k]
    score = cal._scores(raw / divisors[k], at, distance, small_max)
    jobs = np.array([job_of[i] for i in owner], dtype=object)
    pool_hi, pool_lo = np.quantile(score, 0.9), np.quantile(score, 0.1)
    for job in sorted(set(job_of)):
        mine = jobs == job
        s = score[mine]
        lo_s, hi_s = tables.job_scale(job, k)
        q_hi = max(np.quantile(s, 0.9) / pool_hi, 0.0) if pool_hi > 0 else float("nan")
        q_lo = max(np.quantile(s, 0.1) / pool_lo, 0.0) if pool_lo < 0 else float("nan")
        mean_hi = np.maximum(s, 0).mean() / np.maximum(score, 0).mean()
        mean_lo = np.maximum(-s, 0).mean() / np.maximum(-score, 0).mean()
        print(
            f"k={k} {job:10s} {len(set(owner[mine].tolist())):3d} ctx: above: mean ratio {mean_hi:.2f} shipped {hi_s:.2f} "
            f"q90 ratio {q_hi:.2f} covered {np.mean(s <= pool_hi * hi_s):.1%} | below: mean ratio {mean_lo:.2f} "
            f"shipped {lo_s:.2f} q10 ratio {q_lo:.2f} covered {np.mean(s >= pool_lo * lo_s):.1%}"
        )


def scale(ratio: float, n: int, prior: float = cal.JOB_SCALE_PRIOR_CONTEXTS) -> float:
    if n < cal.MIN_JOB_CONTEXTS or not np.isfinite(ratio) or ratio <= 0:
        return 1.0
    return float(np.exp(n / (n + prior) * np.log(max(ratio, 1.0))))


RULES = ("mean", "quantile", "mean unshrunk", "quantile unshrunk")


rng = np.random.default_rng(0)
names = sorted(set(job_of))
print("\n# out of sample: scales on half A of the contexts, coverage of half B (mean over 400 splits)")
for k in (3, 4, 5):
    raw, at, owner, distance = per_k[k]
    score = cal._scores(raw / divisors[k], at, distance, small_max)
    ctx_job = {int(o): job_of[int(o)] for o in np.unique(owner)}
    res = {(j, side, rule): [] for j in names for side in ("above", "below") for rule in (*RULES, "none")}
    scl = {(j, side, rule): [] for j in names for side in ("above", "below") for rule in RULES}
    for _ in range(400):
        half = set()
        for j in names:
            cs = np.array([c for c, jj in ctx_job.items() if jj == j])
            half |= set(rng.permutation(cs)[: len(cs) // 2].tolist())
        in_a = np.isin(owner, list(half))
        a, b = score[in_a], score[~in_a]
        ja = np.array([job_of[i] for i in owner[in_a]], dtype=object)
        jb = np.array([job_of[i] for i in owner[~in_a]], dtype=object)
        hi, lo = np.quantile(a, 0.9), np.quantile(a, 0.1)
        for j in names:
            sa, sb = a[ja == j], b[jb == j]
            n = len(set(owner[in_a][ja == j].tolist()))
            for side, bound, part, q in (("above", hi, lambda x: np.maximum(x, 0), 0.9), ("below", lo, lambda x: np.maximum(-x, 0), 0.1)):
                pool_part = part(a).mean()
                mean_ratio = part(sa).mean() / pool_part if pool_part > 0 else 1.0
                q_ratio = np.quantile(sa, q) / bound if (bound > 0 if side == "above" else bound < 0) else 1.0
                for rule, ratio in (
                    ("mean", mean_ratio), ("quantile", q_ratio), ("mean unshrunk", mean_ratio),
                    ("quantile unshrunk", q_ratio), ("none", 1.0),
                ):
                    f = scale(ratio, n, 0.0 if "unshrunk" in rule else cal.JOB_SCALE_PRIOR_CONTEXTS)
                    cov = np.mean(sb <= bound * f) if side == "above" else np.mean(sb >= bound * f)
                    res[(j, side, rule)].append(cov)
                    if rule != "none":
                        scl[(j, side, rule)].append(f)
    for j in names:
        for side in ("above", "below"):
            print(
                f"k={k} {j:10s} {side}: pooled {np.mean(res[(j, side, 'none')]):.1%}; "
                + "; ".join(
                    f"{rule} {np.mean(res[(j, side, rule)]):.1%} (x{np.mean(scl[(j, side, rule)]):.3f})" for rule in RULES
                )
            )
    for rule in ("none", *RULES):
        cells = [np.mean(res[(j, side, rule)]) for j in names for side in ("above", "below")]
        widths = [np.mean(scl[(j, side, rule)]) for j in names for side in ("above", "below")] if rule != "none" else [1.0]
        print(
            f"k={k} {rule:18s}: cells mean {np.mean(cells):.1%}, lowest {min(cells):.1%}, below 89 % {sum(c < 0.89 for c in cells)}"
            f" of {len(cells)}; mean scale x{np.mean(widths):.3f}"
        )
