#!/bin/bash
# Session 22, two-GPU call B (issue 18): the throughput runs (llama widths, 50 steps) and the TP profile.
export PYTHONPATH=$PWD/src
for m in tp fsdp; do
  T0=$(date +%s)
  timeout 150 torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode $m --steps 50 --csv $OUT/${m}_x2.csv > $OUT/${m}_x2.log 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/${m}_x2.log
  grep -E "tokens/s|rc=|Error" $OUT/${m}_x2.log | tail -3
done
MODE=tp timeout 150 torchrun --nproc-per-node 2 perf/results/h100/parallel/prof_tp_2026-11-27.py > $OUT/prof_tp.txt 2>&1; echo rc=$? >> $OUT/prof_tp.txt
grep -E "=====|rc=" $OUT/prof_tp.txt
