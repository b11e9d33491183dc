#!/bin/bash
# Session 28, tenth call (one GPU): the FP8 block scales brought by a producer warp with the stage (helper's
# prepared BLOCK_STAGE_VARIANT: bit-equality + A/B), issue 17's training rows after the cuBLAS-GEMM ATen route, the
# route's GPU tests.
export PYTHONPATH=$PWD/src
T0=$(date +%s)
timeout 120 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_fp8_gemm_sm90_gpu.py -k "in_the_stage or copied_ahead" \
  > $OUT/gpu_fp8_stage.txt 2>&1; echo "fp8 rc=$? $(( $(date +%s) - T0 ))s"; tail -3 $OUT/gpu_fp8_stage.txt
timeout 100 python perf/results/h200/fp8/block_fix_ab_2026-11-29.py stage > $OUT/fp8_stage_ab.csv 2>$OUT/fp8_stage_ab.err
echo "ab rc=$? $(( $(date +%s) - T0 ))s"; grep "^#" $OUT/fp8_stage_ab.csv; tail -2 $OUT/fp8_stage_ab.err
timeout 120 python perf/results/h200/rms_norm_linear/fwd_bwd_rows_2026-11-29.py 2>&1 | grep -v -i warn > $OUT/fwd_bwd_rows.txt
echo "rows rc=$? $(( $(date +%s) - T0 ))s"; cat $OUT/fwd_bwd_rows.txt
timeout 90 python -m pytest -m gpu -q -p no:cacheprovider tests/test_aten_route.py tests/test_rms_norm_linear_gpu.py \
  > $OUT/gpu_aten_rms.txt 2>&1; echo "aten rc=$? $(( $(date +%s) - T0 ))s"; tail -3 $OUT/gpu_aten_rms.txt
