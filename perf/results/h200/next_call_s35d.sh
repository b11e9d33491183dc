#!/bin/bash
# Session 35, fourth call (one GPU, ~8 min). 1. The 192-column tile picked by the wave rule (gemm_sm90.wave_balanced)
# and in the switched builds: the rstd / sums-of-squares GPU tests with it, the decode tier with the table row taken
# by default on the short paged rows (table_row_pays), the rms_norm_linear op tier. 2. Issue 17's consumer rows again
# (op + sums / bare cuBLAS; 3000 x 5120 x 5120 now on the 192 tile). 3. The attention bench with its providers timed
# interleaved (bench.common.time_ms_alternating): issue 15's table without the order drift.
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
step gpu_tests 200 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_gemm_sumsq_sm90_gpu.py \
  tests/cuda/test_rstd_gemm_sm90_gpu.py tests/test_kvcache_gpu.py tests/test_rms_norm_linear_gpu.py -x
TAILN=20 step sumsq_handoff 200 python perf/results/h200/rms_norm_linear/sumsq_handoff_2026-11-29.py
step attention_bench 330 python -m tilewright.cli bench --op attention --no-plots --out /tmp/attn
grep -E "^attention" $OUT/attention_bench.txt | head -90
