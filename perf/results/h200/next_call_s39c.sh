#!/bin/bash
# Session 39, third call (one GPU): the residual tile (gemm_sm90.RESIDUAL_VARIANT) - the sm_90a GEMM's GPU tests and
# the fast path's, then the model-level A/B of the tile in one process (model/residual_tile_ab_2026-12-02.py).
source perf/results/h200/call_steps.sh
TAILN=4 step gpu_tests_gemm_sm90 330 python -m pytest -q -m gpu -p no:cacheprovider tests/cuda/test_gemm_sm90_gpu.py \
  tests/test_fast_gpu.py
TAILN=30 step residual_tile_ab 240 python perf/results/h200/model/residual_tile_ab_2026-12-02.py
save_cubins
