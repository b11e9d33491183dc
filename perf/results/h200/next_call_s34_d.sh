#!/bin/bash
# Session 34, fourth call (~9 min): the backward's new default at head dim 128 ("defer", DEFAULT_STEP_BY_HEAD_DIM)
# through its whole GPU tier (windows, soft caps, offsets, GQA, fp16) and the packed-batch (varlen) and band tiers,
# whose head-dim-128 builds now take it; then the model bench (its Llama layers' backward at head dim 128).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
step gpu_bwd 240 python -m pytest -m gpu -q -p no:cacheprovider -x tests/cuda/test_attention_bwd_sm90_gpu.py
step gpu_varlen_band 120 python -m pytest -m gpu -q -p no:cacheprovider -x tests/cuda/test_attention_varlen_sm90_gpu.py \
  tests/cuda/test_attention_band_sm90_gpu.py
step model 170 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
grep -E "^model" $OUT/model.txt | grep -v first_call | cut -c1-170
