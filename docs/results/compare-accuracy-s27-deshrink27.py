"""Throw-away (session 27, deshrink27): side by side: two accuracy JSONs (baseline, candidate) per k."""

import json
import sys

a, b = (json.load(open(p)) for p in sys.argv[1:3])


def f(x):
    return "  –  " if x is None else f"{100 * x:5.1f}"


ks = sorted(a["results"]["bellamy"], key=int)
print(f"{'':22}" + "".join(f"{'k=' + k:>16}" for k in ks))


def row(name, get, pct=True):
    cells = []
    for k in ks:
        x, y = get(a, k), get(b, k)
        if pct:
            cells.append(f"{f(x)} → {f(y)}".rjust(16))
        else:
            cells.append(("–" if x is None else f"{x:.3f}") + " → " + ("–" if y is None else f"{y:.3f}"))
    print(f"{name:22}" + "".join(c.rjust(16) for c in cells))


row("MRE", lambda d, k: d["results"]["bellamy"][k])
ov = lambda side: lambda d, k: d["band"]["bellamy"]["overall"][side].get(k)
row("under upper", ov("under_upper"))
row("above lower", ov("above_lower"))
row("mean log width", ov("mean_log_width"), pct=False)
jobs = sorted(a["band"]["bellamy"]["per_algorithm"])
for j in jobs:
    pa = lambda side, j=j: lambda d, k: d["band"]["bellamy"]["per_algorithm"][j][side].get(k)
    row(f"{j} ≤ upper", pa("under_upper"))
    row(f"{j} ≥ lower", pa("above_lower"))
    row(f"{j} MRE", lambda d, k, j=j: d["per_algorithm"][j]["bellamy"][k])


def worst(d, k):
    cells = [
        (d["band"]["bellamy"]["per_algorithm"][j][s].get(k), j, s)
        for j in jobs
        for s in ("under_upper", "above_lower")
    ]
    cells = [c for c in cells if c[0] is not None]
    v, j, s = min(cells)
    return f"{100 * v:.1f} {j} {'≤up' if s == 'under_upper' else '≥lo'}"


print("worst cell:")
for k in ks:
    print(f"  k={k}: {worst(a, k):>24} → {worst(b, k)}")
