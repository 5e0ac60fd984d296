"""Session 32 (jobcal32): every job cell of session 31's folds files (k = 3..5, both sides of the 90 %
band) against what sampling alone gives a band that covers 90 % of its calibration contexts' runs:
per cell a z-score of its coverage over the binomial spread of as many contexts (a context's runs
share its error, so the context is the unit: an upper bound on the spread's narrowness), and the
tally of cells below 90 %, below 2 sd, the mean z.

usage: python job-cells-tally-s32-jobcal32.py  (reads accuracy-{s21,c3o,s22}-folds-quick-d1-s31-twincal31.json)
"""

import json
import math
from pathlib import Path

import numpy as np

from airflow_provider_bellamy.benchmarks.common import benchmark_runs

HERE = Path(__file__).parent
zs = []
for trace in ("s21", "c3o", "s22"):
    d = json.loads((HERE / f"accuracy-{trace}-folds-quick-d1-s31-twincal31.json").read_text())
    data = (
        benchmark_runs("c3o", protocol="folds")
        if trace == "c3o"
        else benchmark_runs(traces=HERE / f"synthetic-trace-{trace}.csv", protocol="folds")
    )
    runs = data.runs[data.evaluated]
    contexts = runs.groupby("job_type")["context_id"].nunique().to_dict()
    for job, cells in sorted(d["band"]["bellamy"]["per_algorithm"].items()):
        n = contexts[job]
        sd = math.sqrt(0.9 * 0.1 / n)
        line = []
        for side in ("under_upper", "above_lower"):
            for k in ("3", "4", "5"):
                c = cells[side][k]
                if c is None:
                    continue
                z = (c - 0.9) / sd
                zs.append((trace, job, side, k, c, n, z))
                line.append(f"{side[:5]} k={k} {c:.1%} (z {z:+.1f})")
        print(f"{trace} {job} ({n} ctx): " + ", ".join(line))
z = np.array([x[-1] for x in zs])
cov = np.array([x[4] for x in zs])
print(
    f"\n{len(zs)} cells: mean coverage {cov.mean():.1%}, below 90 % {int((cov < 0.9).sum())}, "
    f"z < -2: {int((z < -2).sum())} (binomial expects {len(zs) * 0.023:.1f}), z < -1: {int((z < -1).sum())} "
    f"(expects {len(zs) * 0.159:.1f}), mean z {z.mean():+.2f}, sd of z {z.std():.2f}"
)
for t in sorted(zs, key=lambda x: x[-1])[:5]:
    print("  lowest:", t[0], t[1], t[2], "k=" + t[3], f"{t[4]:.1%}", f"{t[5]} ctx", f"z {t[6]:+.2f}")
