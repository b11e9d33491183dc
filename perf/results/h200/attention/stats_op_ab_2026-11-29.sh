#!/bin/bash
# Session 26, one GPU: the packed statistics through the public op. GPU tiers of the dense and packed backward on
# the working tree while the base tree (HEAD before the change, carried under scratch/trees/base) warms its builds,
# then forward and forward + backward of both trees against cuDNN (heavy_first_ab_2026-11-28.py), two interleaved
# rounds.
A=perf/results/h200/attention/heavy_first_ab_2026-11-28.py
nvidia-smi --query-gpu=name --format=csv,noheader
(PYTHONPATH=$PWD/src timeout 300 python -m pytest -m gpu -x -q -p no:cacheprovider tests/cuda/test_attention_bwd_sm90_gpu.py \
  tests/cuda/test_attention_varlen_sm90_gpu.py > $OUT/gpu_bwd.txt 2>&1; echo "rc=$?" >> $OUT/gpu_bwd.txt) &
(PYTHONPATH=scratch/trees/base/src timeout 300 python $A warm > /dev/null 2>&1) &
wait
tail -4 $OUT/gpu_bwd.txt
for r in 1 2; do
  PYTHONPATH=$PWD/src timeout 120 python $A new$r 2>&1 | grep -v Warn | tee -a $OUT/op_ab.csv
  PYTHONPATH=scratch/trees/base/src timeout 120 python $A base$r 2>&1 | grep -v Warn | tee -a $OUT/op_ab.csv
done
