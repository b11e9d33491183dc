#!/bin/bash
# Session 28, eighth call (one GPU): the FP8 lean block-scale path as the only copied-ahead one (GPU tests, A/B), the
# cold first forward with the self-checks' parallel prebuild.
export PYTHONPATH=$PWD/src
T0=$(date +%s)
timeout 150 python -m pytest -q -m gpu -p no:cacheprovider tests/cuda/test_fp8_gemm_sm90_gpu.py tests/test_scaled_mm_gpu.py \
  > $OUT/gpu_fp8.txt 2>&1; echo "fp8 tests rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $OUT/gpu_fp8.txt
timeout 120 python perf/results/h200/fp8/block_fix_ab_2026-11-29.py > $OUT/fp8_ab.csv 2>$OUT/fp8_ab.err; echo "ab rc=$?"; grep "^#" $OUT/fp8_ab.csv
( export TILEWRIGHT_CACHE_DIR=/tmp/twc2 TRITON_CACHE_DIR=/tmp/trc2; rm -rf /tmp/twc2 /tmp/trc2
  timeout 150 python perf/results/h200/model/first_call_profile_2026-11-29.py llama-prefill > $OUT/first_cold_llama_prebuild.txt 2>&1
  echo "cold rc=$? $(( $(date +%s) - T0 ))s"; grep "forward" $OUT/first_cold_llama_prebuild.txt | head -3 )
