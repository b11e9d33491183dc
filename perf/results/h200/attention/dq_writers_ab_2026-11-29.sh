#!/bin/bash
# Session 26, one GPU: one dQ writer warp per consumer (writers) against one warp serving both in turn (head), the
# dK / dV kernel alone (stats_ab_2026-11-29.py: launch_dkdv, variant b with dQ in the pass, float64 check first),
# builds in parallel, two interleaved rounds; then the backward GPU tests on the writers tree.
S=perf/results/h200/attention/stats_ab_2026-11-29.py
nvidia-smi --query-gpu=name --format=csv,noheader
for t in head writers; do
  (PYTHONPATH=scratch/trees/$t/src timeout 200 python $S $t --build-only > $OUT/build_$t.txt 2>&1; echo "$t build rc=$?" >> $OUT/build_$t.txt) &
done
wait
cat $OUT/build_*.txt | grep -v "Warning\|run_backward" | tail -6
for r in 1 2; do
  for t in head writers; do
    PYTHONPATH=scratch/trees/$t/src timeout 100 python $S $t$r 2>&1 | grep -v "Warning\|run_backward" | tee -a $OUT/writers_ab.csv
  done
done
PYTHONPATH=scratch/trees/writers/src timeout 200 python -m pytest -m gpu -q -p no:cacheprovider -x \
  tests/cuda/test_attention_bwd_sm90_gpu.py > $OUT/gpu_writers.txt 2>&1; echo "rc=$?" >> $OUT/gpu_writers.txt
tail -3 $OUT/gpu_writers.txt
