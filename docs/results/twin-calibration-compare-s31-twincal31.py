"""Side by side: main (s30 twin30) against this branch (s31 twincal31), Bellamy per k."""
import json
import sys

base, new = (json.load(open(p)) for p in sys.argv[1:3])
ks = [str(k) for k in range(6)]


def row(label, a, b, fmt="{:.2f}", scale=100.0):
    cells = []
    for k in ks:
        x, y = a.get(k), b.get(k)
        if x is None or y is None:
            cells.append("—")
            continue
        cells.append((fmt + "→" + fmt).format(x * scale, y * scale))
    print(f"  {label:<26}" + "  ".join(f"{c:>15}" for c in cells))


def block(name, ba, na, bb, nb):
    print(name)
    row("MRE %", ba, na)
    for m, lab, fmt, sc in (
        ("under_upper", "under upper %", "{:.1f}", 100.0),
        ("above_lower", "above lower %", "{:.1f}", 100.0),
        ("inside", "inside %", "{:.1f}", 100.0),
        ("mean_log_width", "mean log width", "{:.3f}", 1.0),
    ):
        row(lab, bb[m], nb[m], fmt, sc)


print("k:" + " " * 26 + "  ".join(f"{k:>15}" for k in ks))
block("overall", base["results"]["bellamy"], new["results"]["bellamy"],
      base["band"]["bellamy"]["overall"], new["band"]["bellamy"]["overall"])
for job in base["per_algorithm"]:
    block(job, base["per_algorithm"][job]["bellamy"], new["per_algorithm"][job]["bellamy"],
          base["band"]["bellamy"]["per_algorithm"][job], new["band"]["bellamy"]["per_algorithm"][job])
# worst job cell: the lowest share under the upper / above the lower bound per k, and the largest MRE move
print("worst job cell per k (lowest of under-upper / above-lower over jobs), main → this branch:")
for k in ks:
    def worst(d):
        cells = [(d["band"]["bellamy"]["per_algorithm"][j][m][k], j, m)
                 for j in d["per_algorithm"] for m in ("under_upper", "above_lower")]
        return min(cells)
    wb, wn = worst(base), worst(new)
    print(f"  k={k}: {wb[1]} {wb[2]} {wb[0]*100:.1f}% → {wn[1]} {wn[2]} {wn[0]*100:.1f}%")
moves = [(abs(new["per_algorithm"][j]["bellamy"][k] - base["per_algorithm"][j]["bellamy"][k]), j, k)
         for j in base["per_algorithm"] for k in ks]
m = max(moves)
print(f"largest per-job MRE move: {m[1]} k={m[2]} {m[0]*100:.3f} points")
