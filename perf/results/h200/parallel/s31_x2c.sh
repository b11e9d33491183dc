#!/bin/bash
# Session 31, two-GPU call C (issue 18; ~300 s of device time left): FSDP2 / TP=2 with training linears the router
# gives to cuBLAS on ATen's C++ nodes (the q projection at 4096 x 2048 x 2048), interleaved; the ATen-route GPU tests;
# then the tune, one GPU vs two, with the two-GPU split balanced by moves / swaps and the compile pool capped at 16
# (predicted: two GPUs ~60 s where 69.4 s ran, ~0.62x of the one-GPU time).
export PYTHONPATH=$PWD/src
for m in fsdp tp fsdp; do
  T0=$(date +%s)
  timeout 60 torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode $m --steps 50 > $OUT/${m}_$T0.log 2>&1
  echo "$m rc=$? $(( $(date +%s) - T0 ))s $(grep -o 'worst relative.*' $OUT/${m}_$T0.log)" | tee -a $OUT/summary.txt
done
rm -f $OUT/*.log
CUDA_VISIBLE_DEVICES=0 timeout 40 python -m pytest -m gpu -q -p no:cacheprovider tests/test_aten_route.py 2>&1 | tail -1 | tee -a $OUT/summary.txt
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 120 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms" | tee -a $OUT/summary.txt
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t2 TILEWRIGHT_CACHE_DIR=$T/c2 timeout 90 python -m tilewright.cli tune --suite default --no-report --gpus all > $OUT/tune_2gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune two GPUs rc=$r $(( (e - s) / 1000000 )) ms" | tee -a $OUT/summary.txt
grep "swept in\|compiled\|tuned" $OUT/tune_2gpu.log | cut -c1-160
python perf/results/h100/tune_multi/cmp_tunes.py $T/c1/autotune.json $T/c2/autotune.json > $OUT/tune_compare.txt 2>&1; tail -1 $OUT/tune_compare.txt | tee -a $OUT/summary.txt
