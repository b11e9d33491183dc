#!/bin/bash
# Next session (one GPU, ~4 min; issue 15): the hdim-128 forward with 176- / 192-key blocks (variants c176 / c192,
# session 31, CPU only: 0 spills, m64n176k16 / m64n192k16 wgmmas for S, 214 / 230 KB of shared memory) against c
# (128-key blocks), c with a 3-deep K / V ring (230 KB, 0 spills) and cuDNN on seven hdim-128 rows, then numerics on
# rows with tails against an fp32 reference.
# Prediction: non-causal rows +3-6% over c (1.00x cuDNN -> 1.03-1.06x): per key, 27% / 33% fewer block hand-offs
# (softmax rescale of O, the pingpong turn, the mbarrier round trip); causal rows level or worse (the diagonal block
# masks more keys). If a wide block wins the non-causal rows, route non-causal hdim-128 forwards to it
# (attention_sm90.pick_variant by mask), then the GPU tiers (tests/cuda/test_attention_sm90_gpu.py, the op tier).
export PYTHONPATH=$PWD/src
timeout 220 python perf/results/h200/attention/consumers3_ab_2026-11-29.py c,c176,c192,c:stages=3 --head-dim 128 \
  > $OUT/wide_key_blocks.txt 2>&1; echo "rc=$?"; grep -v Warn $OUT/wide_key_blocks.txt
timeout 150 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_sm90_gpu.py -k "c176 or c192" \
  > $OUT/gpu_wide_key_blocks.txt 2>&1; echo "gpu tier rc=$?"; tail -n 3 $OUT/gpu_wide_key_blocks.txt
