# Throw-away (session 29, join29): the diagnosis rows (docs/results/diagnose-s21-s29-join29.py) broken down
# by where a test run lies relative to its context's memory-spill cliff (the generator's rule: input per
# worker > 60 % of a node's memory), with each part's share of the total absolute error, and how far the
# tuned curve misses its OWN k runs there (max |log residual| at the runs, vs the run noise ~0.03).
# python docs/results/breakdown-s21-s29-join29.py ROWS.csv
import sys

import pandas as pd

GRID = [1, 2, 4, 8, 16, 32]


def where(r: pd.Series) -> str:
    s = r.spill_up_to
    if s in (0, 32):
        return "no cliff in 1..32"
    if r.scale_out == s:
        return "last spilling n"
    if r.scale_out == GRID[GRID.index(s) + 1]:
        return "first n not spilling"
    return "cliff context, away from it"


f = pd.read_csv(sys.argv[1])
f["where"] = f.apply(where, axis=1)
for c in ("untuned", "tuned", "gbm"):
    f["a_" + c] = f["err_" + c].abs() * 100
for k, g in f.groupby("k"):
    t = g.groupby("where").agg(
        runs=("a_tuned", "size"),
        untuned=("a_untuned", "mean"),
        tuned=("a_tuned", "mean"),
        gbm=("a_gbm", "mean"),
        tuned_signed=("err_tuned", lambda e: 100 * e.mean()),
        own_runs_max_abs_log_resid=("max_abs_run_residual", "mean"),
    )
    t["share_of_tuned_error_%"] = 100 * g.groupby("where").a_tuned.sum() / g.a_tuned.sum()
    print(f"k = {k}: all runs untuned {g.a_untuned.mean():.2f} tuned {g.a_tuned.mean():.2f} gbm {g.a_gbm.mean():.2f}")
    print(t.round(2).to_string())
