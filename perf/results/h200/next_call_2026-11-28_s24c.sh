#!/bin/bash
# Session 24, third call (one GPU): the heavy-first CTA order of the sm_90a attention kernels - A/B against the
# committed tree (scratch/old, carried) in alternating processes, then the GPU tiers of the changed kernels, then the
# packed backward cases no call has run yet.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
AB=perf/results/h200/attention/heavy_first_ab_2026-11-28.py
T0=$(date +%s)
for round in 1 2; do
  for tree in old new; do
    if [ $tree = old ]; then P=$PWD/scratch/old/src; else P=$PWD/src; fi
    PYTHONPATH=$P timeout 150 python $AB $tree$round >> $OUT/ab.csv 2>> $OUT/ab.err
  done
done
echo "ab $(( $(date +%s) - T0 ))s"; cat $OUT/ab.csv
T0=$(date +%s)
timeout 200 python -m pytest -q -x -m gpu -p no:cacheprovider tests/cuda/test_attention_sm90_gpu.py \
  tests/cuda/test_attention_bwd_sm90_gpu.py tests/cuda/test_attention_band_sm90_gpu.py > $OUT/gpu_tests.txt 2>&1
echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/gpu_tests.txt; tail -3 $OUT/gpu_tests.txt
T0=$(date +%s)
timeout 150 python -m pytest -q -x -m gpu -p no:cacheprovider tests/cuda/test_attention_varlen_sm90_gpu.py -k backward \
  > $OUT/gpu_varlen_bwd.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/gpu_varlen_bwd.txt; tail -3 $OUT/gpu_varlen_bwd.txt
