"""Throw-away (session 29, refresh29): two accuracy or two sizing JSONs side by side (before → now).

Accuracy: MRE, band sides and width per k, overall and per job, with the count of values that differ.
Sizing: attainment and node-seconds / oracle per policy, per job and per k for Bellamy.
"""

import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


a, b = (load(p) for p in sys.argv[1:3])


def pct(x):
    return "   –  " if x is None else f"{100 * x:6.2f}"


def num(x):
    return "  –  " if x is None else f"{x:.3f}"


def pair(x, y, fmt):
    mark = " " if x == y else "*"
    return f"{fmt(x)}→{fmt(y)}{mark}"


def accuracy():
    ks = sorted(a["results"]["bellamy"], key=int)
    print(f"{'(* differs)':22}" + "".join(f"{'k=' + k:>17}" for k in ks))
    diffs = {"MRE": 0, "band": 0}

    def row(name, get, fmt, kind):
        cells = []
        for k in ks:
            x, y = get(a, k), get(b, k)
            diffs[kind] += x != y
            cells.append(pair(x, y, fmt).rjust(17))
        print(f"{name:22}" + "".join(cells))

    def band(side):
        return lambda d, k: d["band"]["bellamy"]["overall"][side].get(k)

    row("MRE", lambda d, k: d["results"]["bellamy"][k], pct, "MRE")
    row("under upper", band("under_upper"), pct, "band")
    row("above lower", band("above_lower"), pct, "band")
    row("mean log width", band("mean_log_width"), num, "band")
    for j in sorted(a["band"]["bellamy"]["per_algorithm"]):

        def per(side, j=j):
            return lambda d, k: d["band"]["bellamy"]["per_algorithm"][j][side].get(k)

        row(f"{j} MRE", lambda d, k, j=j: d["per_algorithm"][j]["bellamy"][k], pct, "MRE")
        row(f"{j} ≤ upper", per("under_upper"), pct, "band")
        row(f"{j} ≥ lower", per("above_lower"), pct, "band")
        row(f"{j} width", per("mean_log_width"), num, "band")
    print(f"values that differ: MRE {diffs['MRE']}, band {diffs['band']}")


def sizing():
    print(f"{'policy':22}{'attainment':>22}{'node-seconds / oracle':>26}")
    for p in a["policies"]:
        x, y = a["policies"][p], b["policies"][p]
        at = pair(x.get("attainment"), y.get("attainment"), pct)
        ns = pair(x.get("node_seconds_vs_oracle"), y.get("node_seconds_vs_oracle"), num)
        print(f"{p:22}{at:>22}{ns:>26}")
    b_ = b["policies"]["bellamy"].get("interval_95")
    a_ = a["policies"]["bellamy"].get("interval_95")
    print(f"bellamy 95 % intervals: before {a_}\n                        now    {b_}")
    for group in ("per_algorithm", "per_k"):
        print(f"bellamy {group}:")
        for g in a[group]:
            x, y = a[group][g]["bellamy"], b[group][g]["bellamy"]
            at = pair(x["attainment"], y["attainment"], pct)
            ns = pair(x["node_seconds_vs_oracle"], y["node_seconds_vs_oracle"], num)
            print(f"  {g:20}{at:>22}{ns:>26}")


accuracy() if "results" in a else sizing()
