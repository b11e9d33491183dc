"""Merge the GPU fuzz tier's per-shard JSON reports into one summary (counts per family x backend x dtype x outcome,
every failure's repro) and print a table. Usage: ``python tests/fuzz/merge_reports.py OUT.json SHARD.json ...``"""
from __future__ import annotations

import collections
import json
import sys


def merge(paths: list[str]) -> dict:
    """One report from several shards' reports (missing or unreadable shards are listed, not skipped silently)."""
    counts = collections.Counter()
    failures, missing, seconds, meta = [], [], collections.defaultdict(float), {}
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            missing.append(f"{path}: {e}")
            continue
        meta.update({k: data[k] for k in ("device", "torch") if k in data})
        for family, rep in data["families"].items():
            seconds[family] = max(seconds[family], rep["seconds"])
            meta.setdefault("cases", collections.Counter())[family] += rep["cases"]
            failures += rep["failures"]
            for row in rep["counts"]:
                counts[(row["family"], row["backend"], row["dtype"], row["outcome"])] += row["n"]
    rows = [dict(zip(("family", "backend", "dtype", "outcome", "n"), (*k, v))) for k, v in sorted(counts.items())]
    meta["cases"] = dict(meta.get("cases", {}))
    return {**meta, "shards": len(paths), "missing_shards": missing, "seconds_per_family": dict(seconds),
            "total_runs": sum(counts.values()),
            # runs where tilewright computed an answer or raised its checked error; "declined" (a forced backend that
            # cannot take the input says so before launching anything) is counted apart
            "computed_runs": sum(n for k, n in counts.items() if k[3] != "declined"),
            "counts": rows, "failures": failures}


def main(argv: list[str]) -> int:
    out, paths = argv[0], argv[1:]
    report = merge(paths)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    by = collections.Counter()
    for row in report["counts"]:
        by[(row["family"], row["backend"], row["outcome"])] += row["n"]
    print(f"{report.get('device')}: {report['cases']} cases, {report['total_runs']} case runs (case x backend; {report['computed_runs']} not declined), "
          f"{len(report['failures'])} failures, "
          f"missing shards: {report['missing_shards'] or 'none'}")
    for (fam, backend, outcome), n in sorted(by.items()):
        print(f"  {fam:16s} {backend:7s} {outcome:10s} {n}")
    return 1 if report["failures"] or report["missing_shards"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
