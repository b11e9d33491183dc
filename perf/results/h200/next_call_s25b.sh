#!/bin/bash
# Session 25, one GPU: (1) the model bench's large GEMMs per layout, own kernels / router / cuBLAS (issue 14: the Llama
# B8 step's GEMMs 5.66 ms vs compile's cuBLAS 5.52 with the router's H100 points); (2) the one-GPU tune after the
# finals / nice'd pool / graph budget, with its per-shape timeline (issue 18); (3) the tuning GPU tests.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 240 python perf/results/h200/gemm/model_points_2026-11-28.py $OUT/model_points.csv > $OUT/model_points.txt 2>&1; echo "points rc=$?"; cat $OUT/model_points.txt
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 200 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms"
sed 's/\r/\n/g' $OUT/tune_1gpu.log | grep -v "^tune gemm" | cut -c1-170 | tail -32
cp $T/c1/autotune.json $OUT/autotune_1gpu.json
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/test_tuning_gpu.py > $OUT/tests_tuning.txt 2>&1; tail -2 $OUT/tests_tuning.txt
