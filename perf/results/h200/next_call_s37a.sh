#!/bin/bash
# Session 37, first call (one GPU, ~4 min): what session 36 wrote after its last device call - the sums-once op test's
# 3000 x 5120 x 5120 case (the rule narrowed to the 192-column build) and the kernel header's comment edits (no code
# change since the v3 run: rebuilds only) - then issue 17's rows through the op (eager / compiled / fused / sums given
# / bare GEMM), so the done-when table has the sums-once numbers through the public op.
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
TAILN=6 step sums_once_tests 240 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_rmsnorm_sums_once_sm90_gpu.py tests/cuda/test_rmsnorm_gemm_sm90_gpu.py
TAILN=6 step sums_once_ab 120 python perf/results/h200/rms_norm_linear/sums_cost_probe_2026-12-01.py --once
TAILN=12 step sumsq_handoff 200 python perf/results/h200/rms_norm_linear/sumsq_handoff_2026-11-29.py
save_cubins
