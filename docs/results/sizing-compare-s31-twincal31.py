"""Sizing replay side by side: main (s30 twin30 'twin') against this branch, Bellamy's policies per k."""
import json
import sys

base, new = (json.load(open(p)) for p in sys.argv[1:3])
for pol in ("bellamy", "bellamy_relaxed", "bellamy_min_cost", "gbm"):
    print(pol)
    for k in [*sorted(base["per_k"]), "all"]:
        a = base["policies"][pol] if k == "all" else base["per_k"][k][pol]
        b = new["policies"][pol] if k == "all" else new["per_k"][k][pol]
        print(f"  k={k:<3} attainment {a['attainment']*100:.1f}% → {b['attainment']*100:.1f}%   "
              f"node-seconds/oracle {a['node_seconds_vs_oracle']:.3f} → {b['node_seconds_vs_oracle']:.3f}")
    if "interval_95" in new["policies"][pol]:
        print("  95 % interval (this branch):", new["policies"][pol]["interval_95"])
