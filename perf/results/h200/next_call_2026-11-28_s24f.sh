#!/bin/bash
# For a later session (written in session 24, NOT yet run; kind nvidia-h200-x2, ~5 min): `tilewright tune` with the
# precompile beside the sweeps (compile-only, per-shape readiness) - one GPU, then --gpus all, empty caches each, as
# session 22 measured (121.3 s / 80.9 s = 0.667x at 2026-11-28_1425). Prediction: one GPU ~105-112 s, two ~60-65 s
# (the 22 s of compiling now under the sweeps), ratio <= 0.6x; then the GPU test of the compile-only path.
export PYTHONPATH=$PWD/src
nvidia-smi -L
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 170 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms"
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t2 TILEWRIGHT_CACHE_DIR=$T/c2 timeout 130 python -m tilewright.cli tune --suite default --no-report --gpus all > $OUT/tune_2gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune two GPUs rc=$r $(( (e - s) / 1000000 )) ms"
sed 's/\r/\n/g' $OUT/tune_1gpu.log $OUT/tune_2gpu.log | grep "compiled\|Error\|error\|not compiled" | head -8
python perf/results/h100/tune_multi/cmp_tunes.py $T/c1/autotune.json $T/c2/autotune.json > $OUT/tune_compare.txt 2>&1; tail -3 $OUT/tune_compare.txt
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/test_tuning_gpu.py -k "compile_only or precompile_worker" > $OUT/tests.txt 2>&1; tail -2 $OUT/tests.txt
