#!/bin/bash
# Session 36, first call (one GPU, ~8 min). 1. The compiled inference op's folded replay (session 35, CPU-tested
# only): its GPU test and the rms_norm_linear GPU tier's compile test, then the Llama B8 forward's kernel table
# (compiled first) and host-stall probe - does the compiled forward's wall now sit on its kernels (2.743 ms wall,
# 2.566 of kernels in session 35)? 2. Issue 17's folded paths at the wave-balanced shapes (which path to take
# without sums at 3000 x 5120 x 5120: in-kernel 1.080x bare in session 35).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
step gpu_tests 150 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_rstd_gemm_sm90_gpu.py \
  tests/test_rms_norm_linear_gpu.py -x -k "inference_op or replays or compile or wave"
(cd perf/results/h200/model && TAILN=30 step k_llama_fwd 200 python kernels_2026-11-29.py llama-prefill fwd \
  tilewright_compile,tilewright_eager,torch_compile)
(cd perf/results/h200/model && TAILN=30 step stall_llama_fwd 120 python host_stall_2026-11-29.py llama-prefill fwd \
  tilewright_compile,torch_compile)
TAILN=8 step wave_fold_paths 90 python perf/results/h200/rms_norm_linear/wave_fold_paths_2026-11-29.py
# issue 14's host-bound B1 forward (0.86x torch eager in session 35): where its host time goes now (cProfile)
TAILN=40 step whole_fwd_host 120 python perf/results/h200/model/whole_forward_host_2026-11-29.py llama-small
save_cubins  # (unpack into .cubins/ here and carry it next time: call_steps.sh)
