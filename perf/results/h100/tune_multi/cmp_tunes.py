"""Compare the winners of two tuning caches (one GPU vs several): per entry, the winning backend and config, and how
far the other run's winner's time is from this one's."""
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def entries(d):
    out = {}
    for dev in d["devices"].values():
        out.update(dev["entries"])
    return out
ea, eb = entries(a), entries(b)
same = 0
for k in sorted(set(ea) | set(eb)):
    ra, rb = ea.get(k), eb.get(k)
    if ra is None or rb is None:
        print(f"{k}: only in {'one-GPU' if rb is None else 'multi-GPU'}")
        continue
    wa, wb = ra["winner"], rb["winner"]
    ca, cb = ra["backends"][wa].get("config"), rb["backends"][wb].get("config")
    ta, tb = ra["backends"][wa]["median_ms"], rb["backends"][wb]["median_ms"]
    eq = wa == wb and ca == cb
    same += eq
    print(f"{k}: {'same' if eq else 'DIFFERENT'} winner {wa} {ta:.4f} ms vs {wb} {tb:.4f} ms"
          + ("" if eq else f"  ({ca} vs {cb})"))
print(f"{same} of {len(set(ea) & set(eb))} entries with identical winners")
