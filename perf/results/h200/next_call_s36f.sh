#!/bin/bash
# Session 36 (one GPU, ~5 min): the folded RMSNorm-GEMM's sums once a row block (issue 17; CPU-built, 0 spills) -
# its GPU tests (bit-equality with every tile summing, counters zeroed per launch, a CUDA graph, the op's replay),
# the folded / rstd GPU tiers that run through it, then the A/B against every tile summing.
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
TAILN=12 step sums_once_tests 240 python -m pytest -m gpu -q -x -p no:cacheprovider tests/cuda/test_rmsnorm_sums_once_sm90_gpu.py
TAILN=6 step folded_tests 200 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_rstd_gemm_sm90_gpu.py -k "op or replay or inference or graph or gradients or wave"
TAILN=6 step sums_once_ab 120 python perf/results/h200/rms_norm_linear/sums_cost_probe_2026-12-01.py --once
save_cubins
