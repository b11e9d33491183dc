#!/usr/bin/env bash
# One device call (<= 240 s): build, numerics, stress, compute-sanitizer memcheck, benchmark of the sm_90a CUDA
# RMSNorm-GEMM (cuda_fallback/rmsnorm_gemm_sm90.py). Each phase under its own timeout (limits sum to 230 s) so a hang
# shows up as a timed-out phase. $OUT gets gpu.txt, rmsnorm_sm90.log (every phase), numerics.csv, bench.csv.
# Usage: bash scripts/gpu_rmsnorm_gemm_sm90.sh [phases...]   (default: build numerics stress sanitize bench)
# Variants: *-xf = transform warps (TW_NORM_XFORM, measured slower: x -> x*g in smem by the producer warpgroup, SS
# wgmma), the others register-A (the default: ldmatrix -> x*g -> RS wgmma in the consumers; -sb single-buffered).
# Localising a numerics failure (numerics.csv): every variant runs, so compare the rows -
#   register-A: only the double-buffered builds fail -> fragment reuse / wgmma wait; coop128x256s3/g=1 fails but
#     -ssdebug/g=1 passes -> the fragment path (ldmatrix swizzle, pack, RS wgmma); only pp* -> MA = 2.
#   -xf: fails with g=1 too (x written back unchanged) -> transformed / rstd barriers or the proxy fence; only with
#     g != 1 -> the chunk -> g mapping (swizzle XOR); rstd_err alone -> octet row-sum reduction / rstd buffer parity;
#     only the 8192x2048x264 many-wave case or the stress -> rstd double buffer reuse; only /B-N-major (K % 8 != 0) ->
#     the partial g chunk. rstd_err alone on register-A -> row sums / quad reduction.
set -u
export TILEWRIGHT_AUTOTUNE=0 PYTHONPATH=src TILEWRIGHT_CACHE_DIR=${TILEWRIGHT_CACHE_DIR:-$PWD/.twcache} OUT=${OUT:-out}
mkdir -p "$OUT"
LOG="$OUT/rmsnorm_sm90.log"
: > "$LOG"
PHASES=${*:-"build numerics stress sanitize bench"}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
head -2 "$OUT/gpu.txt"
declare -A LIMIT=([build]=45 [numerics]=45 [stress]=30 [sanitize]=50 [bench]=60)
summary=()
for ph in $PHASES; do
  echo "=== phase $ph (limit ${LIMIT[$ph]}s)" >> "$LOG"
  t0=$SECONDS
  if [ "$ph" = sanitize ]; then
    timeout ${LIMIT[$ph]} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python scripts/gpu_rmsnorm_gemm_sm90.py sanitize >> "$LOG" 2>&1
  else
    timeout ${LIMIT[$ph]} python scripts/gpu_rmsnorm_gemm_sm90.py $ph >> "$LOG" 2>&1
  fi
  rc=$?
  echo "rc=$rc" >> "$LOG"
  case $ph in
    sanitize) last=$(grep -E "ERROR SUMMARY" "$LOG" | tail -1) ;;
    bench) last=$(grep -E "geomean" "$LOG" | tail -1) ;;
    *) last=$(grep -E "^(numerics|stress|[0-9]+ builds)" "$LOG" | tail -1) ;;
  esac
  line="$ph rc=$rc $((SECONDS - t0))s | ${last:0:400}"
  echo "$line"; summary+=("$line")
  if [ $ph = build ] && [ $rc != 0 ]; then echo "build failed: see $LOG"; tail -15 "$LOG"; fi
done
echo "--- bench (median ms, x cuBLAS)"; grep -E "^ +(sq|l3)" "$LOG" | cut -c1-700
grep -E "^FAIL|vs triton" "$LOG" | head -12
echo "--- summary"; printf '%s\n' "${summary[@]}"
