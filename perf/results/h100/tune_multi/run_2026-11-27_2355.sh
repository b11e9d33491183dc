export PYTHONPATH=src
for mode in tp fsdp; do
  timeout 110 torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode $mode --size llama --steps 50 --csv $OUT/parallel_${mode}_llama.csv > $OUT/parallel_${mode}.log 2>&1
  echo "rc=$?"; grep "tokens/s" $OUT/parallel_${mode}.log | tail -1
done
timeout 100 python -m pytest -m gpu -q -p no:cacheprovider -s tests/test_parallel.py tests/test_tuning_gpu.py -k "two_gpu or precompile_worker" > $OUT/test_parallel_gpu.txt 2>&1; grep "tokens/s\|passed\|failed" $OUT/test_parallel_gpu.txt
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 150 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms"
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t2 TILEWRIGHT_CACHE_DIR=$T/c2 timeout 120 python -m tilewright.cli tune --suite default --no-report --gpus all > $OUT/tune_2gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune two GPUs rc=$r $(( (e - s) / 1000000 )) ms"
grep "compiled" $OUT/tune_1gpu.log $OUT/tune_2gpu.log | sed 's/.*\r//'
python scratch/cmp_tunes.py $T/c1/autotune.json $T/c2/autotune.json > $OUT/tune_compare.txt 2>&1; cat $OUT/tune_compare.txt | cut -c1-120
