#!/bin/bash
# Session 39, fourth call (one GPU): the residual path compiled in (TW_RES_PATH, gemm_sm90.prepare) - the sm_90a
# GEMM's GPU tests (every residual path and layout), the sums / rstd builds that share its launcher, the fast path;
# then the epilogue probe again on the final code (gemm/epilogue_floor_2026-12-02.py).
source perf/results/h200/call_steps.sh
TAILN=4 step gpu_tests_res_path 420 python -m pytest -q -m gpu -p no:cacheprovider tests/cuda/test_gemm_sm90_gpu.py \
  tests/cuda/test_gemm_sumsq_sm90_gpu.py tests/cuda/test_rstd_gemm_sm90_gpu.py tests/test_fast_gpu.py
TAILN=3 step epilogue_floor_final 150 python perf/results/h200/gemm/epilogue_floor_2026-12-02.py
save_cubins
