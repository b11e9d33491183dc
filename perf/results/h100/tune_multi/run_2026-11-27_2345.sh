export PYTHONPATH=src
MODE=tp timeout 200 torchrun --nproc-per-node 2 scratch/prof_tp.py > $OUT/prof_tp.txt 2>&1; echo rc=$?
grep "=====" $OUT/prof_tp.txt
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 170 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms"
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t2 TILEWRIGHT_CACHE_DIR=$T/c2 timeout 150 python -m tilewright.cli tune --suite default --no-report --gpus all > $OUT/tune_2gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune two GPUs rc=$r $(( (e - s) / 1000000 )) ms"
python scratch/cmp_tunes.py $T/c1/autotune.json $T/c2/autotune.json > $OUT/tune_compare.txt 2>&1; tail -3 $OUT/tune_compare.txt
