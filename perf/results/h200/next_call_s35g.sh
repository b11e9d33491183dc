#!/bin/bash
# Session 35, last call (~4 min): the folded forward's 192-column in-kernel-sums build (rmsnorm_gemm_sm90
# FOLDED_WAVE_VARIANT, first GPU run) - its GPU tests, then issue 17's consumer rows (3000 x 5120 x 5120 op without
# sums: 1.090x bare cuBLAS on the 256 tile; prediction ~1.02x).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
step gpu_tests 110 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_rstd_gemm_sm90_gpu.py -x -k "coop128x192s4-xf-roov or wave"
TAILN=12 step sumsq_handoff 100 python perf/results/h200/rms_norm_linear/sumsq_handoff_2026-11-29.py
