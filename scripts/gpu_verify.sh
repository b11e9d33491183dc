#!/usr/bin/env bash
# One device call that re-runs the GPU test tier after a benchmark (reuses its autotune results on a warm machine):
# Triton GEMM, RMSNorm-GEMM, FP8 scaled_mm, CUDA GEMM, tune, and compute-sanitizer (memcheck, racecheck, synccheck)
# on small CUDA GEMM launches. Each phase has its own time limit; logs land flat in $OUT; a summary prints last.
# Usage on the device: bash scripts/gpu_verify.sh [phases...]
#   phases (default all): gemm rms fp8 cuda tune sanitizer every_config
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 OUT=${OUT:-out}
mkdir -p "$OUT"
PHASES=${*:-"gemm rms fp8 cuda tune sanitizer every_config"}
PYTEST="python -m pytest -q -p no:cacheprovider"
summary=()
for ph in $PHASES; do
  SECONDS=0
  case $ph in
    gemm) timeout 200 $PYTEST tests/test_gemm_gpu.py -k "not every_config" > "$OUT/t_gemm.log" 2>&1 ;;
    rms) timeout 150 $PYTEST tests/test_rms_norm_linear_gpu.py > "$OUT/t_rms.log" 2>&1 ;;
    fp8) timeout 90 $PYTEST tests/test_scaled_mm_gpu.py > "$OUT/t_fp8.log" 2>&1 ;;
    cuda) timeout 90 $PYTEST tests/cuda/test_gemm_sm90_gpu.py > "$OUT/t_cuda.log" 2>&1 ;;
    tune) timeout 120 $PYTEST tests/test_tuning_gpu.py > "$OUT/t_tune.log" 2>&1 ;;
    sanitizer)
      # Small problems with K and N tails; the kernels' async-proxy traffic (TMA, wgmma) is invisible to racecheck,
      # so it checks the generic-proxy smem accesses (epilogue staging) only.
      : > "$OUT/sanitizer.log"
      for tool in memcheck racecheck synccheck; do
        for v in pp128x128s5 coop128x256s3; do
          echo "== $tool $v" >> "$OUT/sanitizer.log"
          TILEWRIGHT_AUTOTUNE=0 timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 \
            python scripts/gpu_cuda_gemm.py one --variants $v --shape 200,328,520 >> "$OUT/sanitizer.log" 2>&1
          echo "rc=$?" >> "$OUT/sanitizer.log"
        done
      done
      tail -4 "$OUT/sanitizer.log"; false ;;
    every_config) timeout ${EVERY_S:-150} $PYTEST tests/test_gemm_gpu.py -k every_config > "$OUT/t_every.log" 2>&1 ;;
  esac
  rc=$?
  [ $ph = sanitizer ] && rc=$(grep -c "rc=[^0]" "$OUT/sanitizer.log")
  line="$ph rc=$rc ${SECONDS}s | $(tail -1 "$OUT/t_$ph.log" 2>/dev/null || grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | sort | uniq -c | tr '\n' ';')"
  echo "$line"; summary+=("$line")
done
echo "=== summary"; printf '%s\n' "${summary[@]}"
for f in "$OUT"/t_*.log; do grep -E "^(FAILED|ERROR)" "$f" | head -5; done
