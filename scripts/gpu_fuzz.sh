#!/usr/bin/env bash
# GPU fuzz tier on the device (thin wrapper over tests/fuzz): 10 processes run each case with Triton and the router's
# pick, 5 more force the CUDA backend on other seeds; each family gets SECONDS_PER_FAMILY (the run is compile-bound,
# ~1 case/s/process). Writes the merged summary (and the per-shard reports) to ${OUT:-perf/results/fuzz_run}.
# Then re-run an earlier summary's failures with:  PYTHONPATH=src:tests/fuzz python3 tests/fuzz/rerun_failures.py S.json
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-perf/results/fuzz_run}
S=${SECONDS_PER_FAMILY:-112}
mkdir -p "$OUT" /tmp/fz
run() { TILEWRIGHT_AUTOTUNE=0 PYTHONPATH=src timeout $((4 * S + 40)) python3 -m pytest tests/fuzz -m gpu -q \
          -p no:cacheprovider --fuzz-cases 40000 --fuzz-seconds "$S" "$@"; }
for i in $(seq 0 9); do
  run --fuzz-backends triton,auto --fuzz-shard "$i/10" --fuzz-report "/tmp/fz/a$i.json" > "/tmp/fz/a$i.log" 2>&1 &
done
for i in 0 1 2 3 4; do
  run --fuzz-backends cuda --fuzz-seed 100000 --fuzz-shard "$i/5" --fuzz-report "/tmp/fz/c$i.json" \
    > "/tmp/fz/c$i.log" 2>&1 &
done
wait
python3 tests/fuzz/merge_reports.py "$OUT/fuzz_summary.json" /tmp/fz/*.json | tee "$OUT/fuzz_table.txt"
