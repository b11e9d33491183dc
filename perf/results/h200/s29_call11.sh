#!/bin/bash
# Session 29, last call (~9 min): the model bench with the session's changes (residual GEMMs on the sm_90a kernel,
# the wgmma descriptors formed once a stage; ordered issue removed), then the GPU tests left unrun by call 9's
# timeout (the RMSNorm-sumsq tier's tail, the fixed router-path test), then the FP8 / scaled_mm tiers.
export PYTHONPATH=$PWD/src
T0=$(date +%s)
timeout 270 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv > $OUT/model.log 2>&1
echo "model rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^model|^ *fwd|first_call" $OUT/model.log | grep -v "^model.*torch_eager .*torch_eager" | tail -40 | cut -c1-150
timeout 90 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_rstd_gemm_sm90_gpu.py \
  "tests/cuda/test_gemm_sm90_gpu.py::test_op_and_router_path" > $OUT/gpu_rstd_router.txt 2>&1
echo "rstd+router rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $OUT/gpu_rstd_router.txt
timeout 120 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_fp8_gemm_sm90_gpu.py tests/test_scaled_mm_gpu.py \
  > $OUT/gpu_fp8_final.txt 2>&1
echo "fp8 rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $OUT/gpu_fp8_final.txt
