#!/bin/bash
# Session 22, two-GPU call C (issue 18): TP local route A/B (same machine, interleaved), FSDP profile, tune 1 vs 2
# GPUs with the near-tie rule, the GPU tier of test_parallel + test_dtensor.
export PYTHONPATH=$PWD/src
for r in 1 0 1 0; do
  TILEWRIGHT_TP_LOCAL=$r timeout 100 torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode tp --steps 50 --csv $OUT/tp_local$r.csv > $OUT/tp_local$r.log 2>&1
  echo "TP_LOCAL=$r $(grep -o 'tokens/s.*' $OUT/tp_local$r.log)" | tee -a $OUT/tp_ab.txt
done
timeout 100 torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode fsdp --steps 50 --csv $OUT/fsdp_x2.csv > $OUT/fsdp_x2.log 2>&1
echo "fsdp $(grep -o 'tokens/s.*' $OUT/fsdp_x2.log)"
MODE=tp timeout 100 torchrun --nproc-per-node 2 perf/results/h100/parallel/prof_tp_2026-11-27.py > $OUT/prof_tp.txt 2>&1; grep "=====" $OUT/prof_tp.txt
MODE=fsdp timeout 100 torchrun --nproc-per-node 2 perf/results/h100/parallel/prof_tp_2026-11-27.py > $OUT/prof_fsdp.txt 2>&1; grep "=====" $OUT/prof_fsdp.txt
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 170 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms" | tee -a $OUT/timings.txt
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t2 TILEWRIGHT_CACHE_DIR=$T/c2 timeout 140 python -m tilewright.cli tune --suite default --no-report --gpus all > $OUT/tune_2gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune two GPUs rc=$r $(( (e - s) / 1000000 )) ms" | tee -a $OUT/timings.txt
python scratch/cmp_tunes.py $T/c1/autotune.json $T/c2/autotune.json > $OUT/tune_compare.txt 2>&1; tail -1 $OUT/tune_compare.txt
