#!/bin/bash
# Session 31, two-GPU call A (issue 18): FSDP2 and TP=2 throughput after sessions 23-30's host-path work (llama
# widths, 50 steps, two interleaved rounds), the FSDP2 profile, and the GPU tier of tests/test_parallel.py.
export PYTHONPATH=$PWD/src
nvidia-smi -L
for r in 1 2; do
  for m in fsdp tp; do
    T0=$(date +%s)
    timeout 110 torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode $m --steps 50 --csv $OUT/${m}_x2_r$r.csv > $OUT/${m}_x2_r$r.log 2>&1
    echo "$m round $r rc=$? $(( $(date +%s) - T0 ))s $(grep -o 'worst relative.*' $OUT/${m}_x2_r$r.log)" | tee -a $OUT/summary.txt
  done
done
MODE=fsdp timeout 100 torchrun --nproc-per-node 2 perf/results/h100/parallel/prof_tp_2026-11-27.py > $OUT/prof_fsdp.txt 2>&1; grep "=====" $OUT/prof_fsdp.txt
T0=$(date +%s)
timeout 150 python -m pytest -q -m gpu -p no:cacheprovider -s tests/test_parallel.py > $OUT/test_parallel.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/test_parallel.txt
grep -E "tokens/s|passed|failed|rc=" $OUT/test_parallel.txt
