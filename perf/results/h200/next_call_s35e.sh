#!/bin/bash
# Session 35, fifth call (one GPU, ~6 min): the GPU tiers call D's time limit cut (decode with the table row taken on
# short paged rows; rms_norm_linear with the fold on wave-balanced shapes), issue 17's consumer rows with 3000 x 5120
# x 5120 folded, and the attention route probe (GQA routed vs forced; causal 4096).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
step gpu_tests 170 python -m pytest -m gpu -q -p no:cacheprovider tests/test_kvcache_gpu.py tests/test_rms_norm_linear_gpu.py
TAILN=30 step route_probe 90 python perf/results/h200/attention/route_probe_2026-11-29.py
TAILN=12 step sumsq_handoff 150 python perf/results/h200/rms_norm_linear/sumsq_handoff_2026-11-29.py
