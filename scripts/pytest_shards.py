"""Run a pytest selection as N concurrent shards and merge their verdicts.

The GPU tiers are compile-bound on a fresh device machine: each new sm_90a build is one nvcc run (5-15 s) and a
single pytest process compiles them one after another on one of the host's 16 cores. Sharding the collected test ids
round-robin over N processes compiles N builds at once (the cubin cache's per-key file lock keeps two shards from
compiling the same build twice); the tests themselves are correctness checks, so sharing the GPU costs nothing that
matters.

Usage: python scripts/pytest_shards.py [--shards N] [--logs DIR] -- <pytest args: files, -m gpu, -k ...>
Prints one line a shard and the merged pass / fail / skip counts; the exit status is non-zero when any shard failed
(or collected nothing), so a caller can tell a red tier from a green one.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path


def collect(pytest_args: list[str]) -> list[str]:
    """The test ids pytest selects for ``pytest_args`` (deselected ones excluded)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *pytest_args],
        capture_output=True, text=True, check=False,
    )
    ids = [line.strip() for line in out.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if not ids:
        sys.exit(f"pytest_shards: nothing collected for {pytest_args!r}\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return ids


_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--logs", type=Path, default=Path(os.environ.get("OUT", ".")) / "shards")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    pytest_args = [a for a in args.pytest_args if a != "--"]
    # Everything but the paths reaches each shard too (options such as -m gpu, --long and their values): the ids
    # name the tests, the options still shape how they run.
    options = [a for a in pytest_args if not os.path.exists(a.split("::")[0])]
    ids = collect(pytest_args)
    shards = max(1, min(args.shards, len(ids)))
    args.logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    procs = []
    for i in range(shards):
        log = open(args.logs / f"shard{i}.log", "w")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, *ids[i::shards]]
        procs.append((i, log, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)))
    totals: dict[str, int] = {}
    worst = 0
    for i, log, proc in procs:
        rc = proc.wait()
        log.close()
        tail = (args.logs / f"shard{i}.log").read_text().strip().splitlines()
        last = tail[-1] if tail else "(no output)"
        for n, kind in _COUNT.findall(last):
            kind = "errors" if kind.startswith("error") else kind
            totals[kind] = totals.get(kind, 0) + int(n)
        # pytest's 5 (nothing collected) cannot happen for a shard of collected ids; any other non-zero is red.
        worst = max(worst, rc)
        print(f"shard {i}: rc={rc} {len(ids[i::shards])} ids | {last}")
        for line in tail:
            if line.startswith(("FAILED", "ERROR")):
                print("   ", line)
    merged = ", ".join(f"{n} {k}" for k, n in sorted(totals.items()))
    print(f"merged: {merged} in {time.monotonic() - start:.0f}s over {shards} shards; rc={worst}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
