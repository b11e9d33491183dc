#!/usr/bin/env bash
# One device call: build, smoke, numerics, stress, router, benchmark of the sm_90a CUDA GEMM; each phase under a
# timeout so a hang shows up as a timed-out phase instead of eating the lease (a failed smoke stops the run).
# Logs in $OUT; the benchmark table prints last. Carry .twcache (cubins built on the CPU box) to skip compiles.
# Usage: bash scripts/gpu_cuda_gemm.sh [phases...]   (default: build smoke numerics stress router bench)
set -u
export TILEWRIGHT_AUTOTUNE=0 PYTHONPATH=src TILEWRIGHT_CACHE_DIR=${TILEWRIGHT_CACHE_DIR:-$PWD/.twcache} OUT=${OUT:-out}
mkdir -p "$OUT"
PHASES=${*:-"build smoke numerics stress router bench"}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
declare -A LIMIT=([build]=60 [smoke]=40 [numerics]=90 [stress]=60 [router]=45 [bench]=170 [ncu]=120)
declare -A ARGS=([stress]="--seconds ${STRESS_S:-40}" [bench]="${BENCH_ARGS:-}")
for ph in $PHASES; do
  echo "=== phase $ph (limit ${LIMIT[$ph]:-120}s)"
  if [ "$ph" = ncu ]; then
    ncu --query-metrics --chip gh100 2>&1 | grep -i "tensor_op_gmma\|tensor_op_hmma" > "$OUT/ncu_metrics.txt"
    MET=$(grep -o "^sm__pipe_tensor_op_gmma_cycles_active[a-z_]*" "$OUT/ncu_metrics.txt" | head -1)
    MET=${MET:-sm__pipe_tensor_op_hmma_cycles_active}
    for v in ${NCU_VARIANTS:-pp128x128s5}; do
      timeout 60 ncu --kernel-name tw_gemm_sm90 --launch-skip 2 --launch-count 1 \
        --metrics $MET.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum \
        python scripts/gpu_cuda_gemm.py one --variants $v --shape ${NCU_SHAPE:-8192,8192,8192} > "$OUT/ncu_$v.log" 2>&1
      echo "ncu $v rc=$?"; grep -E "tensor_op|throughput|duration|rror" "$OUT/ncu_$v.log" | tail -5
    done
    continue
  fi
  if [ "$ph" = pytest ]; then
    timeout 200 python -m pytest -q -x -p no:cacheprovider tests/cuda/test_gemm_sm90_gpu.py > "$OUT/pytest.log" 2>&1
    echo "rc=$?"; tail -8 "$OUT/pytest.log"
    continue
  fi
  timeout ${LIMIT[$ph]} python scripts/gpu_cuda_gemm.py $ph ${ARGS[$ph]:-} > "$OUT/$ph.log" 2>&1
  rc=$?
  echo "rc=$rc"
  if [ $ph = bench ]; then tail -22 "$OUT/$ph.log"; else tail -${TAILN:-10} "$OUT/$ph.log"; fi
  if [ $ph = smoke ] && [ $rc != 0 ]; then echo "smoke failed: stopping"; exit 1; fi
done
