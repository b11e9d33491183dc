#!/bin/bash
# Session 41, first call: (1) the gated GEMM's GPU tests after session 40's last refactor (shared check_out /
# tile_order_code, one launch-count fixture: never run on a GPU) and the sm_90a GEMM tier they share code with;
# (2) where the Llama B8 forward + backward's time goes now (kernels per provider, wall per step), and the B1 forward's.
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAILN=12 step gpu_glu_tests 200 python scripts/pytest_shards.py --shards 8 --logs /tmp/shards -- -m gpu \
  tests/test_swiglu_linear_gpu.py tests/cuda/test_gemm_sm90_gpu.py tests/test_rms_norm_linear_gpu.py
TAILN=3 step prof_b8_fwdbwd 150 python perf/results/h200/model/prof_step_s41.py llama-prefill fwdbwd
TAILN=3 step prof_b1_fwd 100 python perf/results/h200/model/prof_step_s41.py llama-small fwd
TAILN=3 step prof_b1_fwdbwd 100 python perf/results/h200/model/prof_step_s41.py llama-small fwdbwd
save_cubins
