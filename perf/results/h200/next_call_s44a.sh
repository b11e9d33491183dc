#!/bin/bash
# For session 44's first device call (written in session 43, which was lent no device): the direct store of
# odd-pitch outputs (5f53627) - the sm_90a GEMM's GPU tier (sharded: its new odd-pitch test, every ODD shape whose
# contiguous output now takes the direct store, the residual paths), then its A/B against the TMA store; then
# session 43's call 1 (the compiled block's rotary split A/B, the B8 step's kernels in order, the model bench).
source perf/results/h200/call_steps.sh
TAILN=8 step gpu_gemm_tests 200 python scripts/pytest_shards.py --shards 12 --logs /tmp/shards -- -m gpu \
  tests/cuda/test_gemm_sm90_gpu.py tests/cuda/test_gemm_sumsq_sm90_gpu.py tests/test_swiglu_rotary_gpu.py
TAILN=10 step direct_store_ab 90 python perf/results/h200/gemm/direct_store_ab_2026-12-08.py
TAILN=30 step rotary_split_ab 200 python perf/results/h200/model/rotary_split_ab_2026-12-08.py
save_cubins
