#!/bin/bash
# The first one-GPU call of the session after 23 (written in session 23, not yet run): the GPU tests session 23 could
# not finish or wrote after its device time, the model bench for the README table, and the ncu profile issue 15 asks
# for before a change to the sm_90a backward. `bash perf/results/h200/next_call_2026-11-28_s23.sh` from the
# repository root (writes under $OUT; ~8-9 minutes).
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
timeout 240 python -m pytest -q -m gpu -p no:cacheprovider tests/test_attention_gpu.py \
  tests/cuda/test_attention_varlen_sm90_gpu.py > $OUT/gpu_tests.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/gpu_tests.txt
tail -3 $OUT/gpu_tests.txt
T0=$(date +%s)
timeout 230 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv > $OUT/model.log 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/model.log
grep -v -i warn $OUT/model.log | tail -16
# training attention with TILEWRIGHT_ATEN_BELOW=0 so the op runs tilewright's backward (cuDNN takes it otherwise)
TILEWRIGHT_ATEN_BELOW=0 timeout 90 bash scripts/ncu_attn_bwd.sh 2 16 8192 128 1 > $OUT/ncu_attn_bwd.txt 2>&1; echo "ncu rc=$?"
grep -E "Duration|Throughput|stalled|pipe_tensor" $OUT/ncu_attn_bwd.txt | head -12
