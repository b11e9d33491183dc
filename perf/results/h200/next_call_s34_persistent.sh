#!/bin/bash
# One GPU, ~7 min: the persistent-CTA attention forward (variants cp / c176p, issue 15), written and build-checked on a
# CPU in session 33 and never run on a GPU.
# 0. Compile its builds (and the twins' and band builds the tests ask for) on parallel nvcc processes: no GPU needed,
#    so the tests and the A/B below spend their time limits on the device, not in nvcc.
# 1. Its GPU tests: cp / c176p bit-equal to c / c176 (the grid at the device's SM count, forced to 1 and 5 CTAs),
#    tails, GQA, B > 1, tiles without a key block, a window; the variants' numerics rows and the op with gradients.
#    A hang (a barrier phase wrong) shows as rc=124: the A/B is then skipped.
# 2. The A/B: c, cp, c176, c176p and cuDNN in one process, 16 rows (S 1k-8k, both masks, MHA 16 / GQA 32/8).
export PYTHONPATH=$PWD/src
AB=perf/results/h200/attention/persistent_ab_2026-11-29.py
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python $AB --prebuild > $OUT/persistent_prebuild.txt 2>&1; echo "prebuild rc=$?"
tail -n 2 $OUT/persistent_prebuild.txt
timeout 150 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_sm90_gpu.py \
  -k "cp or c176p or persistent" > $OUT/gpu_persistent.txt 2>&1
rc=$?; echo "tests rc=$rc"; tail -n 25 $OUT/gpu_persistent.txt
if [ $rc -eq 124 ]; then
  echo "tests timed out (a hang?): A/B skipped"
else
  timeout 240 python $AB > $OUT/persistent_ab.txt 2>&1; echo "ab rc=$?"; cat $OUT/persistent_ab.txt
fi
