#!/bin/bash
# Session 30, fourth call (one GPU, ~9 min): the new defaults on the GPU - c3 for head dim 64 attention forwards, 4
# stages for block-scaled FP8, dg's last reduction level in one Triton kernel (float64) - then (1) issue 17's fwd+bwd
# rows (loops and CUDA graphs) with the new dg reduction, (2) the attention rows through the op against cuDNN
# (the D64 row now on c3; fwd+bwd with the sm_90a backward).
export PYTHONPATH=$PWD/src
T0=$(date +%s)
(timeout 230 python -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu.py > $OUT/gpu_attn_op.txt 2>&1;
 echo rc=$? >> $OUT/gpu_attn_op.txt) &
(timeout 230 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_fp8_gemm_sm90_gpu.py \
  tests/test_rms_norm_linear_gpu.py "tests/cuda/test_attention_sm90_gpu.py::test_every_build_compiles_without_spills" \
  "tests/cuda/test_attention_sm90_gpu.py::test_op_forward_and_backward_through_cuda" > $OUT/gpu_fp8_rms.txt 2>&1;
 echo rc=$? >> $OUT/gpu_fp8_rms.txt) &
wait; echo "tiers $(( $(date +%s) - T0 ))s"; tail -n 3 $OUT/gpu_attn_op.txt $OUT/gpu_fp8_rms.txt
timeout 160 python perf/results/h200/rms_norm_linear/fwd_bwd_rows_2026-11-29.py --graphs > $OUT/rms_fwd_bwd_graphs.txt 2>&1
echo "rms rc=$? $(( $(date +%s) - T0 ))s"; grep -E "x eager|failed" $OUT/rms_fwd_bwd_graphs.txt
timeout 150 python perf/results/h200/attention/descriptor_ab_2026-11-29.py c3default > $OUT/attn_rows.txt 2>&1
echo "attn rows rc=$? $(( $(date +%s) - T0 ))s"; grep -E "fwd|^#" $OUT/attn_rows.txt
