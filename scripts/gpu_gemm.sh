#!/usr/bin/env bash
# One device call for the Triton GEMM: card facts, the side-by-side benchmark (tuned kernels, outputs checked
# against the peer), then the GPU test tier. Each phase has a time limit so one slow phase cannot eat the lease.
# Usage on the device: bash scripts/gpu_gemm.sh [bench] [tests]   (default: both). Files land flat in $OUT.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 OUT=${OUT:-out} TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
mkdir -p "$OUT"
PHASES=${*:-"bench tests"}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
for ph in $PHASES; do
  echo "=== $ph"
  case $ph in
    bench) timeout ${BENCH_S:-330} python -m tilewright.cli bench --op gemm --out /tmp/twbench ${BENCH_ARGS:-} > "$OUT/bench_gemm.log" 2>&1
           echo "rc=$?"; cp /tmp/twbench/perf/results/*/*.csv /tmp/twbench/perf/results/*/*.json "$OUT/" 2>/dev/null
           grep -E "WARNING|Error|error" "$OUT/bench_gemm.log" | head -5; tail -60 "$OUT/bench_gemm.log" ;;
    tests) timeout ${TESTS_S:-240} python -m pytest tests/test_gemm_gpu.py -q -x ${PYTEST_ARGS:-} > "$OUT/tests_gemm.log" 2>&1
           echo "rc=$?"; tail -25 "$OUT/tests_gemm.log" ;;
  esac
done
