#!/usr/bin/env bash
# GPU fuzz tier on the device (thin wrapper over tests/fuzz). The run is compile-bound (every new shape / layout /
# epilogue combination compiles a Triton specialization: ~0.25 computed case runs per second per process), so it
# starts one process per CPU core left free, spread over every visible GPU: two thirds run each case with Triton and
# with the router's pick, one third force the CUDA backend on other seeds. Each family gets SECONDS_PER_FAMILY.
# Writes the merged summary (and the per-shard reports) to ${OUT:-perf/results/fuzz_run}.
#   SEED=N       first case seed of the Triton/auto shards (the CUDA shards start at N + 100000); default 0
#   PROCS=N      processes in all (default: CPU cores - 2)
#   FAMILY=NAME  only this family (a pytest -k expression: gemm, rms_norm_linear, attention, scaled_mm)
# Then re-run an earlier summary's failures with:  PYTHONPATH=src:tests/fuzz python3 tests/fuzz/rerun_failures.py S.json
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-perf/results/fuzz_run}
S=${SECONDS_PER_FAMILY:-112}
SEED=${SEED:-0}
GPUS=$(nvidia-smi -L | wc -l)
PROCS=${PROCS:-$(( $(nproc) - 2 ))}
NC=$(( PROCS / 3 )); NA=$(( PROCS - NC ))
echo "fuzz: $GPUS GPU(s), $NA Triton/auto + $NC CUDA processes, ${S}s per family, seeds from $SEED"
# one torch CPU thread per process: the oracle's float64 compares run on the CPU, and N processes x N intra-op threads
# oversubscribed the cores (4x the processes on a 4x larger host ran no more cases)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT" /tmp/fz
run() { TILEWRIGHT_AUTOTUNE=0 PYTHONPATH=src timeout $((4 * S + 40)) python3 -m pytest tests/fuzz -m gpu -q \
          -p no:cacheprovider --fuzz-cases 200000 --fuzz-seconds "$S" ${FAMILY:+-k "$FAMILY"} "$@"; }
for i in $(seq 0 $((NA - 1))); do
  CUDA_VISIBLE_DEVICES=$(( i % GPUS )) run --fuzz-backends triton,auto --fuzz-seed "$SEED" --fuzz-shard "$i/$NA" \
    --fuzz-report "/tmp/fz/a$i.json" > "/tmp/fz/a$i.log" 2>&1 &
done
for i in $(seq 0 $((NC - 1))); do
  CUDA_VISIBLE_DEVICES=$(( (NA + i) % GPUS )) run --fuzz-backends cuda --fuzz-seed $(( SEED + 100000 )) \
    --fuzz-shard "$i/$NC" --fuzz-report "/tmp/fz/c$i.json" > "/tmp/fz/c$i.log" 2>&1 &
done
wait
python3 tests/fuzz/merge_reports.py "$OUT/fuzz_summary.json" /tmp/fz/*.json | tee "$OUT/fuzz_table.txt"
