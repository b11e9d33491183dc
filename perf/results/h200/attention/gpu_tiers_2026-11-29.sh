#!/bin/bash
# Session 26, one GPU: the attention GPU tiers after the packed statistics - the packed / band backward files and the
# varlen op tier in one process, the attention op tier in another (correctness only: nothing here is timed).
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
(timeout 560 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_varlen_sm90_gpu.py \
  tests/cuda/test_attention_band_sm90_gpu.py tests/test_varlen_gpu.py > $OUT/gpu_varlen_band.txt 2>&1; echo "rc=$?" >> $OUT/gpu_varlen_band.txt) &
(timeout 560 python -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu.py tests/cuda/test_attention_sm90_gpu.py \
  > $OUT/gpu_attention.txt 2>&1; echo "rc=$?" >> $OUT/gpu_attention.txt) &
wait
tail -5 $OUT/gpu_varlen_band.txt $OUT/gpu_attention.txt
