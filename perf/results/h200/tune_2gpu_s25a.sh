#!/bin/bash
# Kind nvidia-h200-x2 (written in session 25; the kind was not lent that session - NOT yet run): `tilewright tune`
# with the finals (contenders re-timed interleaved), the nice'd pool reporting its start-up, the 15 ms graph budget
# and the sm_90a builds started ahead - one GPU, then --gpus all, empty caches each; the per-shape lines ("swept in",
# "waiting for their compiles", "into the tune") say where each run's time goes.
# Prediction (from the one-GPU timeline of 2026-11-28_2246: 100.4 s): two GPUs ~58 s (~7 s process start, ~10 s to
# the first compiled shapes, ~38 s of sweeps a GPU), <= 0.6x; identical winners on >= 9 of 11 shapes.
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
