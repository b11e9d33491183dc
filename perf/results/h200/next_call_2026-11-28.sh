#!/bin/bash
# The first one-GPU call of the session after 22 (written in session 22, not yet run): the GPU tests of what session
# 22 changed without a device (the H200 decode rule, the fused combine, the TP route's last guards), the decode A/B,
# the decode bench with the rule, and the RMSNorm-linear host profile. `bash perf/results/h200/next_call_2026-11-28.sh`
# from the repository root (writes under $OUT).
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
timeout 200 python -m pytest -q -m gpu -p no:cacheprovider tests/test_kvcache_gpu.py tests/test_varlen_gpu.py \
  > $OUT/gpu_tests.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/gpu_tests.txt; tail -2 $OUT/gpu_tests.txt
timeout 150 python perf/results/h200/decode/fused_combine_ab.py > $OUT/fused_combine_ab.txt 2>&1; echo rc=$? >> $OUT/fused_combine_ab.txt
cat $OUT/fused_combine_ab.txt | cut -c1-220
timeout 120 python -m tilewright.bench.decode default $OUT/decode.csv > $OUT/decode.log 2>&1; echo rc=$? >> $OUT/decode.log
STEPS=20 timeout 60 python perf/results/h200/rms_norm_linear/host_profile_2026-11-28.py > $OUT/rms_host.txt 2>&1; grep "ms/step" $OUT/rms_host.txt
