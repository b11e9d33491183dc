#!/usr/bin/env bash
# One device call: build, smoke, numerics, stress, router, benchmark of the sm_90a CUDA GEMM; each phase under a
# timeout so a hang shows up as a timed-out phase instead of eating the lease (a failed smoke stops the run).
# Logs in $OUT; the benchmark table prints last. Carry .twcache (cubins built on the CPU box) to skip compiles.
# Usage: bash scripts/gpu_cuda_gemm.sh [phases...]   (default: build smoke numerics stress router bench)
set -u
export PYTHONPATH=src TILEWRIGHT_CACHE_DIR=${TILEWRIGHT_CACHE_DIR:-$PWD/.twcache} OUT=${OUT:-out}
mkdir -p "$OUT"
PHASES=${*:-"build smoke numerics stress router bench"}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
declare -A LIMIT=([build]=60 [smoke]=40 [numerics]=90 [stress]=60 [router]=45 [bench]=170 [ncu]=120)
declare -A ARGS=([stress]="--seconds ${STRESS_S:-40}" [bench]="${BENCH_ARGS:-}")
for ph in $PHASES; do
  echo "=== phase $ph (limit ${LIMIT[$ph]:-120}s)"
  if [ "$ph" = ncu ]; then
    timeout ${LIMIT[$ph]} ncu --kernel-name tw_gemm_sm90 --launch-skip 3 --launch-count 1 \
      --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum \
      python scripts/gpu_cuda_gemm.py bench --quick --no-triton --variants ${NCU_VARIANT:-pp128x128s4} > "$OUT/ncu.log" 2>&1
    echo "rc=$?"; grep -E "gmma|throughput|duration|Error|ERR" "$OUT/ncu.log" | tail -12
    continue
  fi
  timeout ${LIMIT[$ph]} python scripts/gpu_cuda_gemm.py $ph ${ARGS[$ph]:-} > "$OUT/$ph.log" 2>&1
  rc=$?
  echo "rc=$rc"
  if [ $ph = bench ]; then tail -22 "$OUT/$ph.log"; else tail -${TAILN:-10} "$OUT/$ph.log"; fi
  if [ $ph = smoke ] && [ $rc != 0 ]; then echo "smoke failed: stopping"; exit 1; fi
done
