"""Session 32 (twinchk32): the accuracy benchmark's band and MRE side by side, baseline → this branch.

usage: python compare-s32-twinchk32.py BASELINE.json NEW.json
"""

from __future__ import annotations

import json
import sys

base, new = (json.load(open(p)) for p in sys.argv[1:3])
KS = ("3", "4", "5")
print(f"# {sys.argv[1]} → {sys.argv[2]}; k = 3 / 4 / 5")
bb, nb = base["band"]["bellamy"], new["band"]["bellamy"]
rows = [("overall", bb["overall"], nb["overall"])] + [
    (n, bb["per_algorithm"][n], nb["per_algorithm"][n]) for n in nb["per_algorithm"]
]
for measure in ("under_upper", "above_lower", "mean_log_width"):
    print(f"\n## {measure}")
    for name, b, n in rows:
        fmt = (lambda v: f"{v:.3f}") if measure == "mean_log_width" else (lambda v: f"{v:.1%}")
        before = " / ".join(fmt(b[measure][k]) for k in KS)
        after = " / ".join(fmt(n[measure][k]) for k in KS)
        flag = ""
        if measure != "mean_log_width":
            flag = "  short" if any(n[measure][k] < 0.895 for k in KS) else ""
        print(f"{name:>10}: {before}  →  {after}{flag}")
print("\n## MRE (bellamy)")
for name, per in new["per_algorithm"].items():
    before = " / ".join(f"{base['per_algorithm'][name]['bellamy'][k]:.2%}" for k in KS)
    after = " / ".join(f"{per['bellamy'][k]:.2%}" for k in KS)
    print(f"{name:>10}: {before}  →  {after}")
