#!/bin/bash
# Session 27 (one GPU): the attention backward replay (ops/attention._BackwardReplay). GPU tests of the backward and
# band files (correctness, incl. the replay against the full path), then host cost per step of fwd + bwd and of the
# backward op alone, working tree vs scratch/trees/hostbase (8617057, before the replay), then fwd + bwd of the op
# against cuDNN on the A/B rows (heavy_first_ab_2026-11-28.py), both trees, two interleaved rounds.
export PYTHONPATH=$PWD/src
A=perf/results/h200/attention/heavy_first_ab_2026-11-28.py
H=perf/results/h200/attention/bwd_host_profile_2026-11-29.py
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
(timeout 300 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_bwd_sm90_gpu.py \
  tests/cuda/test_attention_band_sm90_gpu.py > $OUT/gpu_bwd_band.txt 2>&1; echo "rc=$?" >> $OUT/gpu_bwd_band.txt) &
(PYTHONPATH=scratch/trees/hostbase/src timeout 250 python $A warm > /dev/null 2>&1) &
wait
echo "tests: $(( $(date +%s) - T0 )) s"; tail -n 3 $OUT/gpu_bwd_band.txt; grep -E "^(FAILED|ERROR)" $OUT/gpu_bwd_band.txt | head
for r in 1 2; do
  for t in new base; do
    if [ $t = new ]; then P=$PWD/src; else P=$PWD/scratch/trees/hostbase/src; fi
    PROFILER=none PYTHONPATH=$P timeout 60 python $H > $OUT/bwd_host_$t$r.txt 2>&1
    grep "us/step" $OUT/bwd_host_$t$r.txt | sed "s/^/$t$r /" | grep -v "this thread"
  done
done
echo "host: $(( $(date +%s) - T0 )) s"
for r in 1 2; do
  PYTHONPATH=$PWD/src timeout 100 python $A new$r 2>&1 | grep -v Warn | tee -a $OUT/op_ab.csv
  PYTHONPATH=scratch/trees/hostbase/src timeout 100 python $A base$r 2>&1 | grep -v Warn | tee -a $OUT/op_ab.csv
done
echo "total: $(( $(date +%s) - T0 )) s"
