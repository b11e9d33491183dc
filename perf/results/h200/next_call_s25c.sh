#!/bin/bash
# Session 25, one GPU: the one-GPU tune after the CUDA builds ahead and the pool's start-up report (prediction ~97 s:
# 105.5 before, the first shape's ~8 s of nvcc builds now beside the pool), the decode bands' A/B with the mid band
# in the defaults (B 22-33 rows), the decode and tuning GPU tests.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 200 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms"
sed -i 's/\r/\n/g' $OUT/tune_1gpu.log; grep -v "^tune gemm" $OUT/tune_1gpu.log | cut -c1-200 | tail -28
cp $T/c1/autotune.json $OUT/autotune_1gpu.json
timeout 200 python perf/results/h200/decode/band_ab_2026-11-28.py 2>&1 | tail -13
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/test_kvcache_gpu.py tests/test_tuning_gpu.py > $OUT/tests.txt 2>&1; tail -2 $OUT/tests.txt
