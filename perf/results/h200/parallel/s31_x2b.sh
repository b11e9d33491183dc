#!/bin/bash
# Session 31, two-GPU call B (issue 18): FSDP2 / TP=2 throughput with tilewright.rms_norm_linears in the bench's
# layer (one norm for q / k / v and one for gate / up when the weights are plain tensors - FSDP2; TP keeps its
# per-module calls on DTensors), two interleaved rounds; then the GPU tiers: the new op's (GPU 1) beside the attention
# op tier with the split dQ staging as default (GPU 0), then tests/test_parallel.py (both GPUs).
export PYTHONPATH=$PWD/src
nvidia-smi -L
for r in 1 2; do
  for m in fsdp tp; do
    T0=$(date +%s)
    timeout 110 torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode $m --steps 50 --csv $OUT/${m}_r$r.csv > $OUT/${m}_r$r.log 2>&1
    echo "$m round $r rc=$? $(( $(date +%s) - T0 ))s $(grep -o 'worst relative.*' $OUT/${m}_r$r.log)" | tee -a $OUT/summary.txt
  done
done
T0=$(date +%s)
(CUDA_VISIBLE_DEVICES=0 timeout 330 python -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu.py > $OUT/gpu_attention.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/gpu_attention.txt) &
(CUDA_VISIBLE_DEVICES=1 timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_rms_norm_linears_gpu.py tests/test_rms_norm_linear_gpu.py > $OUT/gpu_rms.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/gpu_rms.txt) &
wait
tail -n 2 $OUT/gpu_attention.txt $OUT/gpu_rms.txt
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider -s tests/test_parallel.py > $OUT/test_parallel.txt 2>&1; echo "rc=$?" >> $OUT/test_parallel.txt
grep -E "tokens/s|passed|failed|rc=" $OUT/test_parallel.txt
