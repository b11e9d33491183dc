#!/usr/bin/env bash
# One device call for the GPU test tier (thin wrapper over pytest): each phase is one pytest run under its own time
# limit, so a hang shows up as a timed-out phase instead of eating the lease; logs land flat in $OUT, a summary prints
# last. The stress phase adds --stress (10,000-launch tests), the sanitizer phase --sanitizer (compute-sanitizer runs),
# the gemm phase --long (the whole tuning space, not the default tier's sample).
# Usage on the device: bash scripts/gpu_verify.sh [phases...]
#   phases (default all): gemm rms attn kvcache varlen fp8 tune cuda stress sanitizer
# Timings and per-variant comparisons are `tilewright diag --what ...`; the peer benchmark is scripts/bench.sh.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=src PYTHONUNBUFFERED=1 OUT=${OUT:-out}
mkdir -p "$OUT"
PHASES=${*:-"gemm rms attn kvcache varlen fp8 tune cuda stress sanitizer"}
PYTEST="python -m pytest -q -p no:cacheprovider -m gpu"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
# Phases run concurrently (PARALLEL=0: one after the other): they are correctness checks, compile-bound on the CPU,
# and together fit one device call; nothing here is timed against a peer.
phase() {
  local ph=$1 rc
  SECONDS=0
  case $ph in
    gemm) timeout 420 $PYTEST tests/test_gemm_gpu.py tests/test_cublas_routes_gpu.py --long ;;
    rms) timeout 300 $PYTEST tests/test_rms_norm_linear_gpu.py ;;
    attn) TILEWRIGHT_AUTOTUNE=0 timeout 400 $PYTEST tests/test_attention_gpu.py ;;
    kvcache) timeout 200 $PYTEST tests/test_kvcache_gpu.py ;;
    varlen) timeout 300 $PYTEST tests/test_varlen_gpu.py ;;
    fp8) timeout 200 $PYTEST tests/test_scaled_mm_gpu.py ;;
    tune) timeout 300 $PYTEST tests/test_tuning_gpu.py ;;
    cuda) timeout 480 $PYTEST tests/cuda ;;
    stress) timeout 400 $PYTEST tests/cuda -k stress --stress ;;
    sanitizer) timeout 500 $PYTEST tests/cuda -k sanitizer --sanitizer ;;
    *) echo "unknown phase $ph (phases: gemm rms attn kvcache varlen fp8 tune cuda stress sanitizer)"; return ;;
  esac > "$OUT/t_$ph.log" 2>&1
  rc=$?
  line="$ph rc=$rc ${SECONDS}s | $(tail -1 "$OUT/t_$ph.log")"
  [ $rc = 124 ] && line="$line (TIMED OUT)"
  echo "$line" > "$OUT/t_$ph.status"
}
for ph in $PHASES; do
  if [ "${PARALLEL:-1}" = 1 ]; then phase "$ph" & else phase "$ph"; fi
done
wait
echo "=== summary"; cat "$OUT"/t_*.status
for f in "$OUT"/t_*.log; do grep -E "^(FAILED|ERROR)" "$f" | head -5; done
