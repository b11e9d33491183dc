#!/usr/bin/env bash
# One device call for the mma.sync GEMM built for the device's arch (sm_90 on H100/H200): build, smoke (stops the
# run on failure), numerics, stress, benchmark beside cuBLAS and WGMMA; every phase under its own timeout so a hang
# shows as a timed-out phase. Carry .twcache (cubins built on the CPU box) to skip compiles.
set -u
export TILEWRIGHT_AUTOTUNE=0 PYTHONPATH=src TILEWRIGHT_CACHE_DIR=${TILEWRIGHT_CACHE_DIR:-$PWD/.twcache} OUT=${OUT:-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
declare -A LIMIT=([build]=60 [smoke]=30 [numerics]=50 [stress]=40 [bench]=95)
for ph in ${*:-build smoke numerics stress bench}; do
  echo "=== phase $ph (limit ${LIMIT[$ph]}s)"
  timeout ${LIMIT[$ph]} python scripts/gpu_sm120_gemm.py $ph --seconds 28 > "$OUT/sm120_$ph.log" 2>&1
  rc=$?
  echo "rc=$rc"
  tail -${TAILN:-16} "$OUT/sm120_$ph.log"
  if [ $ph = smoke ] && [ $rc != 0 ]; then echo "smoke failed: stopping"; exit 1; fi
done
