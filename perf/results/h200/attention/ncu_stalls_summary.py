"""Warp-stall summary of an ncu source page: `python ncu_stalls_summary.py <source_sass.csv[.gz]>` (the csv of
`ncu -i <report> --page source --csv`, as ncu_bwd_source_2026-11-28.sh writes it). Prints the share of every stall
reason over all PC samples, then the 30 instructions with the most samples and their two largest reasons - the
`*_stalls.txt` files beside it."""
import csv
import gzip
import sys

path = sys.argv[1]
rows = list(csv.reader((gzip.open if path.endswith(".gz") else open)(path, "rt")))
header, data = rows[1], rows[2:]
col = {h: i for i, h in enumerate(header)}
reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]


def num(x):
    try:
        return float(x)
    except ValueError:
        return 0.0


totals = {r: sum(num(d[col[r]]) for d in data) for r in reasons}
everything = sum(totals.values())
print("warp stall samples by reason: " + ", ".join(
    f"{r[6:]} {100 * v / everything:.1f}%" for r, v in sorted(totals.items(), key=lambda kv: -kv[1])[:10]))
print("top 30 instructions by samples (share, instruction, top stall reasons):")
ranked = sorted(((sum(num(d[col[r]]) for r in reasons), d) for d in data), key=lambda x: -x[0])
for samples, d in ranked[:30]:
    top = sorted(((num(d[col[r]]), r[6:]) for r in reasons), reverse=True)[:2]
    print(f"  {100 * samples / everything:4.1f}%  {d[col['Source']].strip()[:58]:58s} "
          + ", ".join(f"{n} {int(v)}" for v, n in top))
