#!/bin/bash
# Session 26, one GPU: the dK / dV kernel's row statistics, four source trees (carried under scratch/trees):
# base (HEAD), baselaunder (HEAD + the loop-top launder of sbase alone), staged and direct (statistics by bulk
# with the stage, copied into each consumer's buffer behind the per-step barrier), direct (bulk copy, read in place,
# no barrier). Builds in parallel, then two interleaved timed rounds.
S=perf/results/h200/attention/stats_ab_2026-11-29.py
nvidia-smi --query-gpu=name --format=csv,noheader
for t in base baselaunder staged direct; do
  (PYTHONPATH=scratch/trees/$t/src timeout 280 python $S $t --build-only > $OUT/build_$t.txt 2>&1; echo "$t build rc=$?" >> $OUT/build_$t.txt) &
done
wait
cat $OUT/build_*.txt | grep -v Warning | tail -20
for r in 1 2; do
  for t in base baselaunder staged direct; do
    PYTHONPATH=scratch/trees/$t/src timeout 100 python $S $t$r 2>&1 | grep -v "^ *warn\|Warning" | tee -a $OUT/stats_ab.csv
  done
done
