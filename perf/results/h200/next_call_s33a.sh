#!/bin/bash
# Next session's first call (one GPU, ~6 min): what session 32 changed and could not rerun on the device.
# 1. The GPU test it rewrote for the hdim-128 forward-only rule (test_gpu_large_training_attention_runs_cudnn_on_h100:
#    2048 keys no-grad -> cuDNN, 4096 causal -> the kernels), with the routes' GPU tier.
#    And the wide-key (176) forward's op test, extended with the gradients.
# 2. The residual-GEMM route (cuBLAS + add where the plain GEMM goes to cuBLAS): the GEMM GPU tier with the route on
#    (the suite turns it off), then the host bench (the residual rows now ATen's pair) and the model bench.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python -m pytest -m gpu -q -p no:cacheprovider tests/test_aten_route.py tests/test_cublas_routes_gpu.py \
  > $OUT/gpu_routes.txt 2>&1; echo "routes rc=$?"; tail -n 3 $OUT/gpu_routes.txt
# the wide-key forward through the op with its gradients (extended in session 32, not yet run)
timeout 90 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_sm90_gpu.py -k wide_key_variant \
  > $OUT/gpu_wide_op.txt 2>&1; echo "wide rc=$?"; tail -n 3 $OUT/gpu_wide_op.txt
timeout 60 python perf/results/h200/gemm/residual_small_2026-11-29.py > $OUT/residual_small_after.txt 2>&1
echo "residual rc=$?"; cat $OUT/residual_small_after.txt
timeout 150 python -m tilewright.cli bench --op host --out $OUT > $OUT/host.log 2>&1; echo "host rc=$?"; tail -20 $OUT/host.log
timeout 220 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv > $OUT/model.log 2>&1
echo "model rc=$?"; grep -E "^model" $OUT/model.log | grep -v first_call
