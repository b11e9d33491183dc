#!/bin/bash
# Session 39, third call (one GPU): the residual tile (gemm_sm90.RESIDUAL_VARIANT) - its GPU tests and the sm_90a
# GEMM's residual / epilogue ones, the model-level A/B of the tile in one process (model/residual_tile_ab_2026-12-02.py),
# and Nsight Compute of the epilogue on both tiles (gemm/ncu_epilogue_2026-12-02.sh).
source perf/results/h200/call_steps.sh
TAILN=4 step gpu_tests_residual_tile 200 python -m pytest -q -m gpu -p no:cacheprovider tests/cuda/test_gemm_sm90_gpu.py \
  -k "residual or epilogue or tuned"
TAILN=30 step residual_tile_ab 240 python perf/results/h200/model/residual_tile_ab_2026-12-02.py
TAILN=3 step ncu_epilogue 120 bash perf/results/h200/gemm/ncu_epilogue_2026-12-02.sh
save_cubins
