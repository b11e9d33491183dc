export PYTHONPATH=src
nvidia-smi -L
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 130 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms"
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t2 TILEWRIGHT_CACHE_DIR=$T/c2 timeout 90 python -m tilewright.cli tune --suite default --no-report --gpus all > $OUT/tune_2gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune two GPUs rc=$r $(( (e - s) / 1000000 )) ms"
sed 's/\r/\n/g' $OUT/tune_2gpu.log | grep "compiled\|Error\|error" | head -5
python scratch/cmp_tunes.py $T/c1/autotune.json $T/c2/autotune.json > $OUT/tune_compare.txt 2>&1; tail -1 $OUT/tune_compare.txt
( CUDA_VISIBLE_DEVICES=1 timeout 190 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv > $OUT/model.log 2>&1 ) &
CUDA_VISIBLE_DEVICES=0 timeout 150 python -m pytest -m gpu -q -p no:cacheprovider -x tests/cuda/test_gemm_sm90_gpu.py -k "residual_paths or epilogues_odd_shapes or many_randomized or op_and_router" tests/cuda/test_rmsnorm_gemm_sm90_gpu.py -k "residual_paths or epilogues_odd_shapes or many_randomized or op_and_router or bias" > $OUT/tests_f.txt 2>&1; tail -2 $OUT/tests_f.txt
grep -m3 -B3 "Error\|assert" $OUT/tests_f.txt | head -20
CUDA_VISIBLE_DEVICES=0 timeout 60 python scratch/s17e.py > $OUT/epilogue.txt 2>&1; cut -c1-400 $OUT/epilogue.txt
wait
grep -v first_call $OUT/model.log | grep "fwd" | awk '{print $2, $NF, $(NF-3), $(NF-4)}' | head -20
