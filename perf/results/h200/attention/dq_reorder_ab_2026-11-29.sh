#!/bin/bash
# Session 26, one GPU: dQ issued before dK (reorder: its staging overlaps dK's product) against HEAD (head),
# the dK / dV kernel alone (stats_ab_2026-11-29.py: launch_dkdv, variant b with dQ in the pass, float64 check first),
# builds in parallel, two interleaved rounds; then the dQ-in-the-pass and split GPU tests on the reorder tree.
S=perf/results/h200/attention/stats_ab_2026-11-29.py
nvidia-smi --query-gpu=name --format=csv,noheader
for t in head reorder; do
  (PYTHONPATH=scratch/trees/$t/src timeout 200 python $S $t --build-only > $OUT/build_$t.txt 2>&1; echo "$t build rc=$?" >> $OUT/build_$t.txt) &
done
wait
cat $OUT/build_*.txt | grep -v "Warning\|run_backward" | tail -6
for r in 1 2; do
  for t in head reorder; do
    PYTHONPATH=scratch/trees/$t/src timeout 100 python $S $t$r 2>&1 | grep -v "Warning\|run_backward" | tee -a $OUT/reorder_ab.csv
  done
done
PYTHONPATH=scratch/trees/reorder/src timeout 120 python -m pytest -m gpu -q -p no:cacheprovider -x \
  tests/cuda/test_attention_bwd_sm90_gpu.py -k "pass or split or deterministic" > $OUT/gpu_reorder.txt 2>&1; echo "rc=$?" >> $OUT/gpu_reorder.txt
tail -3 $OUT/gpu_reorder.txt
