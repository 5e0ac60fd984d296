# Throw-away (session 29, join29): how much of s21's error a memory-spill STEP in fine-tuning could take,
# estimated offline on the rows docs/results/diagnose-s21-s29-join29.py writes (no model change).
# Per context, its runs' log residuals from the tuned (uncorrected) curve are explained either by a
# level a ("no step") or by a + s·[n ≤ c] (a spill below a gap c between two observed scale-outs, s > 0),
# hypotheses weighed by Gaussian likelihood (run noise NOISE) with a BIC-like penalty; the prediction at
# a test scale-out adds a + s·P(spilled there). Inside the gap that holds c the runs cannot say: "half"
# takes P = 1/2, "physics" asks the generator's rule (input per worker > 60 % of memory; NOT shippable,
# an upper bound on what knowing where cliffs sit, as GBM learns from the other contexts, would add).
# python docs/results/step-scan-s21-s29-join29.py ROWS.csv
import sys

import numpy as np
import pandas as pd

NOISE = 0.04  # the runs' scatter (4 % in s21; calibration measures 0.026 from the pairs)
PENALTY = 0.5 * 2 * np.log(5)  # two more numbers (c, s) on 5 runs


def predict(r: pd.Series, mode: str) -> float:
    if not isinstance(r.run_residuals, str) or r.k < 2:
        return r.tuned
    pairs = [p.split(":") for p in r.run_residuals.split()]
    ns = np.array([float(a) for a, _ in pairs])
    res = np.array([float(b) for _, b in pairs])
    levels = np.unique(ns)
    hyps = [(None, res.mean(), 0.0, np.sum((res - res.mean()) ** 2) / (2 * NOISE**2))]
    for lo, hi in zip(levels[:-1], levels[1:], strict=True):
        below = ns <= lo
        a = res[~below].mean()
        s = res[below].mean() - a
        if s <= 0:
            continue
        sse = np.sum((res - a - s * below) ** 2)
        hyps.append(((lo, hi), a, s, sse / (2 * NOISE**2) + PENALTY))
    cost = np.array([h[3] for h in hyps])
    w = np.exp(-(cost - cost.min()))
    w /= w.sum()
    n = r.scale_out
    shift = 0.0
    for (gap, a, s, _), wi in zip(hyps, w, strict=True):
        if gap is None:
            shift += wi * a
            continue
        lo, hi = gap
        if n <= lo:
            p = 1.0
        elif n >= hi:
            p = 0.0
        elif mode == "half":
            p = 0.5
        else:
            p = float(r.data_size_mb / n > 0.6 * (2048 if r.machine_type == "e2-small" else 32768))
        shift += wi * (a + s * p)
    return float(r.uncorrected * np.exp(shift))


def main() -> None:
    f = pd.read_csv(sys.argv[1])
    grid = [1, 2, 4, 8, 16, 32]

    def where(r: pd.Series) -> str:
        s = r.spill_up_to
        if s in (0, 32):
            return "no cliff"
        if r.scale_out == s:
            return "last spilling"
        if r.scale_out == grid[grid.index(s) + 1]:
            return "first not spilling"
        return "cliff context, away"

    f["where"] = f.apply(where, axis=1)
    out = {"shipping (tuned)": f.tuned, "gbm": f.gbm}
    for mode in ("half", "physics"):
        out[f"step, {mode}"] = f.apply(lambda r, m=mode: predict(r, m), axis=1)
    table = {name: ((p - f.actual).abs() / f.actual).groupby([f.k]).mean() * 100 for name, p in out.items()}
    print(pd.DataFrame(table).round(2).to_string())
    for k in sorted(f.k.unique()):
        g = f[f.k == k]
        by = {name: ((p[g.index] - g.actual).abs() / g.actual).groupby(g["where"]).mean() * 100 for name, p in out.items()}
        print(f"k = {k}, by where the test run lies (runs: {g['where'].value_counts().to_dict()})")
        print(pd.DataFrame(by).round(2).to_string())


if __name__ == "__main__":
    main()
