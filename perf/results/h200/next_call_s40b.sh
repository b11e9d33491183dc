#!/bin/bash
# Session 40's second call (one GPU, ~8 min): the gated-linear GEMM (sm_90a TW_GLU, tilewright.swiglu_linear; CPU-
# tested only) - its GPU tests beside the sm_90a GEMM's whole tier (the producer's stage loads changed for every
# build), 8 concurrent shards; the op against the pair, torch eager and torch.compile (gemm/swiglu_linear_*.py); the
# Llama B8 inference forward with the MLP through it (model/swiglu_linear_ab_*.py); the model bench's B1 rows.
source perf/results/h200/call_steps.sh
TAILN=12 step gpu_tests_glu 300 python scripts/pytest_shards.py --shards 8 --logs /tmp/shards -- -m gpu \
  tests/test_swiglu_linear_gpu.py tests/cuda/test_gemm_sm90_gpu.py tests/cuda/test_gemm_sumsq_sm90_gpu.py \
  tests/cuda/test_rstd_gemm_sm90_gpu.py tests/cuda/test_rmsnorm_gemm_sm90_gpu.py
cat /tmp/shards/shard*.log > $OUT/gpu_tests_shards.txt
TAILN=30 step swiglu_linear 120 python perf/results/h200/gemm/swiglu_linear_2026-12-02.py
TAILN=12 step swiglu_linear_ab 150 python perf/results/h200/model/swiglu_linear_ab_2026-12-02.py
save_cubins
