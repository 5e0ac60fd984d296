# Harness of docs/results/coverage-draws-s24-lower.txt (session 24, helper "lower"; run from the project root):
#   [PIN=1] python coverage-draws-s24-lower.py TRACES|c3o MODEL_CACHE OUT.pkl - DRAW
# PIN=1 reads main's cached models through /tmp/probe/patch_s23.py (main's code only). Summaries: the functions at the end.
# Diagnostic: s22 folds (or other trace), benchmark's draws; per test run the band with and without
# the context's check rescale, the raw table quantiles, check stats.
import sys, pickle
import os
if os.environ.get("PIN"): exec(open("/tmp/probe/patch_s23.py").read())
import numpy as np, pandas as pd
import airflow_provider_bellamy.model.band as rm  # the band's steps read MIN_CHECKS (band.py since session 24's merge)
from airflow_provider_bellamy.model import calibration as cal
from airflow_provider_bellamy.benchmarks.common import benchmark_runs, held_out_tasks, pretrain

traces, cache, out = sys.argv[1], sys.argv[2], sys.argv[3]; DRAW = int(sys.argv[5]) if len(sys.argv) > 5 else 0
protocol = (sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else None)
data = benchmark_runs(traces=traces, protocol=protocol) if traces not in ("c3o", "bell") else benchmark_runs(traces, protocol=protocol)
rows = []
K = (0, 1, 2, 3, 4, 5)
for task in held_out_tasks(data, 0):
    general = pretrain(task, 0, True, cache)
    rng = np.random.default_rng(10_000 + 0 * 100 + task.fold + 7919 * DRAW)
    draws = {k: {cid: task.draw(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)} for k in K}
    for k in K:
        for cid, (points, test) in draws[k].items():
            if test.empty:
                continue
            ctx = test.iloc[0].to_dict()
            ns = test["scale_out"].to_numpy()
            actual = np.log(test["runtime_s"].to_numpy())
            tuned = general.finetune(points.drop(columns=["context_id"]))
            b = tuned.band(ctx, ns.tolist(), 0.9)
            old = rm.MIN_CHECKS
            rm.MIN_CHECKS = 10**9
            try:
                b0 = tuned.band(ctx, ns.tolist(), 0.9)
            finally:
                rm.MIN_CHECKS = old
            model = tuned._for_job(str(ctx["job_type"]))
            obs = model.observed_scale_outs if k else ()
            env = ctx.get("environment")
            env = None if env is None or (isinstance(env, float) and np.isnan(env)) else str(env)
            kk = min(k, cal.MAX_K)
            prior = cal.table_scale(model.calibration, kk - 1, env, str(ctx["job_type"])) if k >= 1 else np.nan

            for j in range(len(ns)):
                rows.append(dict(draw=DRAW, job=task.algorithm, fold=task.fold, cid=cid, k=k, n=int(ns[j]),
                    obs=tuple(int(o) for o in obs), y=actual[j], mean=float(np.log(b.mean[j])),
                    lo=float(np.log(b.lower[j])), hi=float(np.log(b.upper[j])),
                    lo0=float(np.log(b0.lower[j])), hi0=float(np.log(b0.upper[j])),
                    cc=model.check_count, crms=model.check_rms, prior=prior,
                    straggler=bool(test["straggler"].iloc[j]) if "straggler" in test else None))
    print(task.algorithm, task.fold, len(rows), flush=True)
pickle.dump(rows, open(out, "wb"))

# ---- summaries (anad: per draw and k; anaj: per job type; cellsp: cells under 90 %), as run on the pickles
# == anad.py
# import pickle, sys, numpy as np, pandas as pd
# fs = sys.argv[1:]
# ds = []
# for i, f in enumerate(fs):
#     d = pd.DataFrame(pickle.load(open(f, "rb"))); d["draw"] = i; ds.append(d)
# d = pd.concat(ds)
# d["below"] = d.y < d.lo; d["above"] = d.y > d.hi; d["below0"] = d.y < d.lo0; d["above0"] = d.y > d.hi0
# t = d.groupby(["draw", "k", "job"]).agg(lo=("below", lambda x: 100*(1-x.mean())), hi=("above", lambda x: 100*(1-x.mean())),
#     lo0=("below0", lambda x: 100*(1-x.mean())), hi0=("above0", lambda x: 100*(1-x.mean()))).groupby(["draw", "k"]).mean()
# print(t.unstack("k").round(1).to_string())
# print(t.groupby("k").mean().round(2).T.to_string())
# print("sd over draws"); print(t.groupby("k").std().round(2).T.to_string())
# == anaj.py
# import pickle, sys, numpy as np, pandas as pd
# a = pd.concat([pd.DataFrame(pickle.load(open(f, "rb"))) for f in sys.argv[1].split(",")])
# b = pd.concat([pd.DataFrame(pickle.load(open(f, "rb"))) for f in sys.argv[2].split(",")])
# out = {}
# for name, d in (("main", a), ("new", b)):
#     d = d.assign(ab=(d.y >= d.lo), un=(d.y <= d.hi))
#     out[name] = d.groupby(["job", "k"])[["ab", "un"]].mean() * 100
# t = pd.concat(out, axis=1).round(1)
# print(t.to_string())
# == cellsp.py
# import pickle, sys, numpy as np, pandas as pd
# for arg in sys.argv[1:]:
#     d = pd.concat([pd.DataFrame(pickle.load(open(f, "rb"))) for f in arg.split(",")])
#     d = d.assign(ab=(d.y >= d.lo), un=(d.y <= d.hi))
#     t = d.groupby(["job", "k"])[["ab", "un"]].mean().stack()
#     print(arg[:40], "cells", len(t), "<90:", (t < .9).sum(), "<87:", (t < .87).sum(), "shortfall %.2f pt" % ((0.9 - t).clip(lower=0).mean() * 100), "worst %.1f" % (100 * t.min()),
#           "k>=2 width %.4f" % (d[d.k >= 2].assign(w=lambda x: x.hi - x.lo).groupby(["job", "k"]).w.mean().mean()))
# == anaw.py
# import pickle, sys, numpy as np, pandas as pd
# ds = [pd.DataFrame(pickle.load(open(f, "rb"))) for f in sys.argv[1:]]
# d = pd.concat(ds)
# d["w"] = d.hi - d.lo
# print((d.groupby(["k", "job"]).w.mean().groupby("k").mean()).round(4).to_string())
# == ana2.py
# import pickle, sys, numpy as np, pandas as pd
# d = pd.DataFrame(pickle.load(open(sys.argv[1], "rb")))
# d["r"] = d.y - d["mean"]
# d["below0"] = d.y < d.lo0; d["below"] = d.y < d.lo; d["above"] = d.y > d.hi
# def pos(row):
#     if not row.obs: return "none"
#     if row.n < min(row.obs): return "below_min"
#     if row.n > max(row.obs): return "above_max"
#     return "between"
# d["pos"] = d.apply(pos, axis=1)
# d["dist"] = d.apply(lambda r: np.min(np.abs(np.log(r.n) - np.log(np.array(r.obs)))) if r.obs else np.nan, axis=1)
# d["near"] = d.dist <= np.log(1.5) + 1e-9
# d["small"] = d.n <= 1.5 * d.groupby("job").n.transform("min")
# sub = d[d.k.isin([2, 3, 4])]
# for key in ["pos", "near", "small", ["job","pos"]]:
#     print(sub.groupby(["k", *([key] if isinstance(key,str) else key)]).agg(miss_lo=("below", "mean"), miss_lo0=("below0", "mean"), miss_hi=("above","mean"), n=("r", "size"), medr=("r","median")).round(3).to_string())
# # concentration: per context share below
# c = sub.groupby(["k", "job", "cid"]).below.mean()
# print("per-context below share quantiles per k:")
# print(c.groupby("k").describe().round(3))
# print("share of misses by contexts with >=50% below:")
# for k in (2, 3, 4):
#     s = sub[sub.k == k]; cc = s.groupby("cid").below.agg(["mean", "sum"])
#     print(k, "contexts", len(cc), "with >=0.5:", (cc["mean"] >= .5).sum(), "their misses", cc[cc["mean"] >= .5]["sum"].sum(), "of", cc["sum"].sum())
