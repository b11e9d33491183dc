#!/bin/bash
# Session 24, fourth call (one GPU): heavy-first CTA order limited to Skv <= 4096 (the 8k / 16k rows lost L2 reuse in
# the third call) - one A/B round against the committed tree (scratch/old), then the GPU tiers of the changed kernels.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
AB=perf/results/h200/attention/heavy_first_ab_2026-11-28.py
T0=$(date +%s)
for tree in old new; do
  if [ $tree = old ]; then P=$PWD/scratch/old/src; else P=$PWD/src; fi
  PYTHONPATH=$P timeout 110 python $AB ${tree}_limited >> $OUT/ab.csv 2>> $OUT/ab.err
done
echo "ab $(( $(date +%s) - T0 ))s"; cat $OUT/ab.csv
T0=$(date +%s)
timeout 250 python -m pytest -q -x -m gpu -p no:cacheprovider tests/cuda/test_attention_sm90_gpu.py \
  tests/cuda/test_attention_bwd_sm90_gpu.py tests/cuda/test_attention_band_sm90_gpu.py > $OUT/gpu_tests.txt 2>&1
echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/gpu_tests.txt; tail -3 $OUT/gpu_tests.txt
