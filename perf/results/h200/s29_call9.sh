#!/bin/bash
# Session 29 (~6 min): issue 19's prepared mainloop changes on the GPU - (A) the consumer's wgmma descriptors formed
# once a stage in uniform registers (every sm_90a GEMM build: 16-bit, FP8, the RMSNorm transform builds), (B) the
# ordered issue between the two consumers (TW_FP8_ISSUE_ORDER: ACCURATE_ORDER_VARIANT, BLOCK_STAGE_ORDER_VARIANT).
# Bit-equality tiers first (a hang would be a failure under the timeout), then the FP8 A/B (set `order`: cuBLASLt row
# in the same run), then the 16-bit kernel at the model benches' residual shapes against cuBLAS, new source (src) and
# main's (headsrc: 3e55aef), in two processes.
export PYTHONPATH=$PWD/src
T0=$(date +%s)
timeout 240 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_fp8_gemm_sm90_gpu.py tests/test_scaled_mm_gpu.py \
  tests/cuda/test_gemm_sm90_gpu.py tests/cuda/test_rmsnorm_gemm_sm90_gpu.py tests/cuda/test_rstd_gemm_sm90_gpu.py \
  > $OUT/gpu_sm90_gemm_family.txt 2>&1
echo "tiers rc=$? $(( $(date +%s) - T0 ))s"; tail -3 $OUT/gpu_sm90_gemm_family.txt
timeout 150 python perf/results/h200/fp8/block_fix_ab_2026-11-29.py order > $OUT/fp8_order_ab.csv 2>&1
echo "order ab rc=$? $(( $(date +%s) - T0 ))s"; grep "^#" $OUT/fp8_order_ab.csv
for src in src headsrc/src; do
  PYTHONPATH=$src timeout 100 python perf/results/h200/gemm/residual_cublas_ab_2026-11-29.py > $OUT/residual_ab_${src%%/*}.txt 2>&1
  echo "residual ab ($src) rc=$?"; grep -v Warn $OUT/residual_ab_${src%%/*}.txt | sed 's/ | max err.*//' | cut -c1-200
done
echo "total $(( $(date +%s) - T0 ))s"
