#!/bin/bash
# One GPU (~6 min; issue 17 (b), written in session 33, not yet run): the sums of squares handed from a residual GEMM
# to the RMSNorm after it. 1. GPU tests: the sm_90 GEMM's sums-of-squares build against the plain GEMM (bit-equal
# output) and its own output's sums, linear(return_sumsq=True) through the op with gradients, rms_norm_linear(sumsq=)
# in bf16 (folded rstd-GEMM in inference, two passes in training) - and the build-check rows. 2. The A/B
# (rms_norm_linear/sumsq_handoff_2026-11-29.py): upstream cost, consumer / bare GEMM (target <= 1.01), the hand-off.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_gemm_sumsq_sm90_gpu.py \
  tests/test_rms_norm_linear_gpu.py -k "sumsq or sums" > $OUT/gpu_sumsq.txt 2>&1; echo "tests rc=$?"
tail -n 15 $OUT/gpu_sumsq.txt
timeout 330 python perf/results/h200/rms_norm_linear/sumsq_handoff_2026-11-29.py > $OUT/sumsq_handoff.txt 2>&1
echo "bench rc=$?"; cat $OUT/sumsq_handoff.txt
