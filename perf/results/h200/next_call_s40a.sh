#!/bin/bash
# Prepared in session 39 for the next session's first call (one GPU, ~8 min): the bias path compiled in
# (TW_BIAS_PATH, gemm_sm90.epilogue_paths; CPU-tested only) - the sm_90a GEMM's GPU tests (odd-aligned biases take the
# register path), the sums / rstd builds that share its launcher; then the epilogue probe on that code (bias rows:
# compare with gemm/epilogue_floor_final_s39.txt) and the model bench's B8 rows (README table).
source perf/results/h200/call_steps.sh
TAILN=4 step gpu_tests_bias_path 420 python -m pytest -q -m gpu -p no:cacheprovider tests/cuda/test_gemm_sm90_gpu.py \
  tests/cuda/test_gemm_sumsq_sm90_gpu.py tests/cuda/test_rstd_gemm_sm90_gpu.py tests/test_fast_gpu.py \
  tests/test_native_hit.py
TAILN=3 step epilogue_floor 150 python perf/results/h200/gemm/epilogue_floor_2026-12-02.py
save_cubins
