#!/bin/bash
# One GPU, ~8 min: the attention backward's step options (issue 15; TILEWRIGHT_CUDA_ATTN_BWD_STEP = defer / stsm /
# lds64), written and build-checked on a CPU in session 33 and never run on a GPU.
# 0. Compile their builds (every setting at head dims 64 / 128, both masks; the op test's window / soft-cap builds) on
#    parallel nvcc processes: no GPU time in nvcc.
# 1. Their GPU tests: each option and all three bit-equal to the default build (dK / dV always, dQ with one key
#    block; dQ within its reductions' reordering otherwise), odd lengths, GQA, hdim 64 / 128, both masks; and through
#    the op with a window / soft cap. A hang (a barrier count wrong in "defer") shows as rc=124: the A/B is then skipped.
# 2. The A/B: default, A (defer), B (stsm), C (lds64), ABC and cuDNN interleaved in one process, fwd + bwd, 4 rows.
# Not in this call (it does not fit the 600 s with the above): the ncu re-profile of the head-dim-64 backward's
# default build, ~4 min on its own: `bash perf/results/h200/attention/ncu_bwd_d64_2026-11-29.sh` (to profile an option,
# prefix TILEWRIGHT_CUDA_ATTN_BWD_STEP=defer,stsm,lds64).
export PYTHONPATH=$PWD/src
AB=perf/results/h200/attention/bwd_sync_ab_2026-11-29.py
T0=$(date +%s)
# step NAME LIMIT CMD...: CMD under a time limit into $OUT/NAME.txt; its rc, the elapsed time and the output's tail
step() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc at $(( $(date +%s) - T0 ))s"; tail -n 40 "$OUT/$name.txt"
  return $rc
}
nvidia-smi --query-gpu=name --format=csv,noheader
step bwd_sync_prebuild 100 python $AB --prebuild
step gpu_bwd_step 150 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_bwd_sm90_gpu.py \
  -k step_options
if [ $? -eq 124 ]; then echo "GPU tests timed out (a hang?): A/B skipped"; else step bwd_sync_ab 300 python $AB; fi
