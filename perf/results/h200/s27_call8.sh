#!/bin/bash
# Session 27, last call (one GPU): issue 14's host cost per call, working tree vs scratch/trees/hostbase (8617057),
# alternating, three rounds each; then the attention op's fwd + bwd host cost on its own kernels with the backward
# op's direct path alone and its pyinstrument tree (attention/bwd_host_profile_2026-11-29.py).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
for r in 1 2 3; do
  for t in new base; do
    if [ $t = new ]; then P=$PWD/src; else P=$PWD/scratch/trees/hostbase/src; fi
    PYTHONPATH=$P timeout 120 python -m tilewright.cli bench --op host --out $OUT/host_$t$r > $OUT/host_${t}$r.log 2>&1
    echo "$t$r rc=$? $(( $(date +%s) - T0 ))s"
  done
done
for t in new base; do
  if [ $t = new ]; then P=$PWD/src; else P=$PWD/scratch/trees/hostbase/src; fi
  PROFILER=pyinstrument PYTHONPATH=/tmp/site:$P timeout 200 python perf/results/h200/attention/bwd_host_profile_2026-11-29.py > $OUT/bwd_host_$t.txt 2>&1
  echo "bwd_host $t rc=$? $(( $(date +%s) - T0 ))s"; grep "us/step" $OUT/bwd_host_$t.txt
done
