#!/bin/bash
# Session 34, third call (~4 min): the two sweeps whose files the second call lost (over the 8 files a call returns),
# the short split rows' GPU test (its spy fixed), the GEMM GPU tier (timed out compiling after the epilogue change).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
step short_rows 60 python perf/results/h200/decode/short_rows_splits_2026-11-29.py
step rstd_tiles 60 python perf/results/h200/rms_norm_linear/rstd_tiles_2026-11-29.py
step gpu_kvcache 60 python -m pytest -m gpu -q -p no:cacheprovider tests/test_kvcache_gpu.py -k short_split
step gpu_gemm 200 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_gemm_sm90_gpu.py
