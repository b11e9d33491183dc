#!/bin/bash
# Session 27, first call (one GPU): session 26's unrun checks. Phase 1, untimed and in parallel: the attention GPU tiers
# the dQ reorder did not rerun (two pytest processes), issue 19's GPU tests of the copied-ahead block scales, and the
# builds of both source trees' attention kernels (working tree, base = 75f7bae under scratch/trees/base). Phase 2,
# alone on the GPU: issue 19's block-scale A/B.
export PYTHONPATH=$PWD/src
A=perf/results/h200/attention/heavy_first_ab_2026-11-28.py
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
(timeout 450 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_varlen_sm90_gpu.py \
  tests/cuda/test_attention_band_sm90_gpu.py tests/test_varlen_gpu.py > $OUT/gpu_varlen_band.txt 2>&1; echo "rc=$?" >> $OUT/gpu_varlen_band.txt) &
(timeout 450 python -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu.py tests/cuda/test_attention_sm90_gpu.py \
  > $OUT/gpu_attention.txt 2>&1; echo "rc=$?" >> $OUT/gpu_attention.txt) &
(timeout 300 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_fp8_gemm_sm90_gpu.py \
  > $OUT/gpu_fp8.txt 2>&1; echo "rc=$?" >> $OUT/gpu_fp8.txt) &
(PYTHONPATH=scratch/trees/base/src timeout 300 python $A warm > /dev/null 2>&1) &
(timeout 300 python $A warm > /dev/null 2>&1) &
wait
echo "phase 1: $(( $(date +%s) - T0 )) s"
tail -3 $OUT/gpu_varlen_band.txt $OUT/gpu_attention.txt $OUT/gpu_fp8.txt
timeout 150 python perf/results/h200/fp8/block_fix_ab_2026-11-29.py > $OUT/fp8_block_fix_ab.csv 2>&1
grep "#" $OUT/fp8_block_fix_ab.csv
echo "total: $(( $(date +%s) - T0 )) s"
