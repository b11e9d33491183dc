#!/bin/bash
# Session 27, third call (one GPU): issue 14's host cost per call before / after the key and SDPA-call trims
# (`bench --op host`, working tree vs scratch/trees/hostbase = 8617057, alternating, two rounds each), then issue
# 15's GQA backward breakdown (attention/bwd_breakdown_2026-11-29.py).
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
for r in 1 2; do
  for t in new base; do
    if [ $t = new ]; then P=$PWD/src; else P=$PWD/scratch/trees/hostbase/src; fi
    PYTHONPATH=$P timeout 120 python -m tilewright.cli bench --op host --out $OUT/host_$t$r > $OUT/host_${t}$r.log 2>&1
    echo "$t$r rc=$? $(( $(date +%s) - T0 ))s"; grep "us |" $OUT/host_${t}$r.log | sed -n 1,14p | awk -v t=$t$r '{print t, $0}'
  done
done
PYTHONPATH=$PWD/src timeout 360 python perf/results/h200/attention/bwd_breakdown_2026-11-29.py > $OUT/bwd_breakdown.csv 2>&1
echo "breakdown rc=$? $(( $(date +%s) - T0 ))s"
grep -v "^kernel," $OUT/bwd_breakdown.csv | tail -80
