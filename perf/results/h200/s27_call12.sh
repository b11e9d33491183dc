#!/bin/bash
# Session 27, last call (one GPU): the bound CUDA launch's prebuilt parameter array and the split's partial sums -
# the replay GPU tests (every CUDA family's replay bit for bit, the attention backward's split and replay), then host
# cost per call (`bench --op host`) working tree vs scratch/trees/hostbase (8617057) alternating, and the attention
# step's host cost (bwd_host_profile_2026-11-29.py, PROFILER=none).
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
(timeout 120 python -m pytest -m gpu -q -p no:cacheprovider tests/test_fast_gpu.py > $OUT/gpu_fast.txt 2>&1; echo "rc=$?" >> $OUT/gpu_fast.txt) &
(timeout 120 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_bwd_sm90_gpu.py \
  -k "replay or split or deterministic" > $OUT/gpu_replay.txt 2>&1; echo "rc=$?" >> $OUT/gpu_replay.txt) &
wait
echo "tests: $(( $(date +%s) - T0 )) s"; tail -n 2 $OUT/gpu_fast.txt $OUT/gpu_replay.txt; grep -E "^(FAILED|ERROR)" $OUT/gpu_*.txt | head
for t in new base; do
  if [ $t = new ]; then P=$PWD/src; else P=$PWD/scratch/trees/hostbase/src; fi
  PYTHONPATH=$P timeout 40 python -m tilewright.cli bench --op host --out $OUT/host_$t > $OUT/host_$t.log 2>&1
  grep "us |" $OUT/host_$t.log | sed -n 1,9p | sed "s/^/$t /"
done
PROFILER=none timeout 40 python perf/results/h200/attention/bwd_host_profile_2026-11-29.py > $OUT/bwd_host_new.txt 2>&1
grep "us/step" $OUT/bwd_host_new.txt | grep -v "this thread"
echo "total: $(( $(date +%s) - T0 )) s"
