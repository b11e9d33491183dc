#!/bin/bash
# Session 40's first call (one GPU, ~9 min): the bias path compiled in (TW_BIAS_PATH, gemm_sm90.epilogue_paths;
# CPU-tested only) - the sm_90a GEMM's GPU tests (odd-aligned biases take the register path), the sums / rstd builds
# that share its launcher, the fast path and the native hit (the rotary table-grad error case among them) - as 8
# concurrent shards (a fresh machine compiles every build: scripts/pytest_shards.py); then the epilogue probe on that
# code (bias rows: compare with gemm/epilogue_floor_final_s39.txt) and the model bench's B8 rows (README table).
source perf/results/h200/call_steps.sh
TAILN=12 step gpu_tests_bias_path 330 python scripts/pytest_shards.py --shards 8 --logs /tmp/shards -- -m gpu \
  tests/cuda/test_gemm_sm90_gpu.py tests/cuda/test_gemm_sumsq_sm90_gpu.py tests/cuda/test_rstd_gemm_sm90_gpu.py \
  tests/test_fast_gpu.py tests/test_native_hit.py
cat /tmp/shards/shard*.log > $OUT/gpu_tests_shards.txt
TAILN=3 step epilogue_floor 120 python perf/results/h200/gemm/epilogue_floor_2026-12-02.py
TAILN=16 step model 110 python -m tilewright.bench.model --no-max-autotune --cases llama-prefill,vit-prefill \
  --csv $OUT/model.csv
save_cubins
