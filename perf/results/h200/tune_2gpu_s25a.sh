#!/bin/bash
# Session 25, kind nvidia-h200-x2: `tilewright tune` after the finals (contenders re-timed interleaved), the nice'd
# precompile pool and the shorter graph-replay budget - one GPU, then --gpus all, empty caches each; the per-shape
# timeline lines ("swept in", "waiting for their compiles", "into the tune") say where each run's time goes.
# Prediction: one GPU ~118 - 10 (graph budget) + ~18 (finals) = ~126 s; two GPUs <= 0.6x that if the pool no longer
# slows the sweeps; identical winners on >= 9 of 11 shapes.
export PYTHONPATH=$PWD/src
nvidia-smi -L
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 200 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms"
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t2 TILEWRIGHT_CACHE_DIR=$T/c2 timeout 160 python -m tilewright.cli tune --suite default --no-report --gpus all > $OUT/tune_2gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune two GPUs rc=$r $(( (e - s) / 1000000 )) ms"
sed 's/\r/\n/g' $OUT/tune_1gpu.log | grep -v "^tune gemm" > $OUT/tune_1gpu_lines.txt
grep "swept in\|compiled\|tuned\|rror" $OUT/tune_1gpu_lines.txt $OUT/tune_2gpu.log | cut -c1-160
python perf/results/h100/tune_multi/cmp_tunes.py $T/c1/autotune.json $T/c2/autotune.json > $OUT/tune_compare.txt 2>&1; tail -3 $OUT/tune_compare.txt
