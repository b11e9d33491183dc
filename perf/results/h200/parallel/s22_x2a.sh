#!/bin/bash
# Session 22, two-GPU call A (issue 18): tune one GPU vs --gpus all (empty caches each), then the GPU tier of
# tests/test_parallel.py.
export PYTHONPATH=$PWD/src
nvidia-smi -L; nvidia-smi topo -m > $OUT/topo.txt 2>&1; head -5 $OUT/topo.txt
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 170 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms" | tee -a $OUT/timings.txt
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t2 TILEWRIGHT_CACHE_DIR=$T/c2 timeout 140 python -m tilewright.cli tune --suite default --no-report --gpus all > $OUT/tune_2gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune two GPUs rc=$r $(( (e - s) / 1000000 )) ms" | tee -a $OUT/timings.txt
sed 's/\r/\n/g' $OUT/tune_2gpu.log | grep -i "compiled\|error" | head -5
python scratch/cmp_tunes.py $T/c1/autotune.json $T/c2/autotune.json > $OUT/tune_compare.txt 2>&1; tail -1 $OUT/tune_compare.txt
T0=$(date +%s)
timeout 200 python -m pytest -q -m gpu -p no:cacheprovider -s tests/test_parallel.py > $OUT/test_parallel.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/test_parallel.txt
grep -E "tokens/s|passed|failed|rc=" $OUT/test_parallel.txt
