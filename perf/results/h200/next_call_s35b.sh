#!/bin/bash
# Session 35, second call (one GPU, ~6 min): session 34's CPU-only changes, never run on a GPU.
# 1. The GEMM's 192-column tile (coop128x192s4) and the tuned winner taken at launch: their GPU tests (every layout /
#    dtype / epilogue row the variant list takes), then the wave A/B (issue 17's 3000 x 5120 x 5120 and eleven other rows; a pick rule only from it).
# 2. Decode: the call's LSE as the head of the partials' buffer, a replay making no LSE tensor unless asked - the
#    decode GPU tier, then the host bench (the decode call's host time: 37.2 us in session 34).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
step gpu_gemm192 150 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_gemm_sm90_gpu.py -k "192 or tuned"
TAILN=14 step wave_tile_ab 120 python perf/results/h200/gemm/wave_tile_ab_2026-11-29.py
step gpu_kvcache 90 python -m pytest -m gpu -q -p no:cacheprovider tests/test_kvcache_gpu.py
TAILN=20 step host 150 python -m tilewright.cli bench --op host --out /tmp/host
