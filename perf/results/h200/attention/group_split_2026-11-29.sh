#!/bin/bash
# Session 26, one GPU: the GQA group split of the dK / dV kernel - its GPU tests, then the heads-per-CTA A/B.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_bwd_sm90_gpu.py -k "split" > $OUT/gpu_split.txt 2>&1; echo "rc=$?" >> $OUT/gpu_split.txt
tail -3 $OUT/gpu_split.txt
timeout 300 python perf/results/h200/attention/group_split_ab_2026-11-29.py 2>&1 | grep -v Warn | tee $OUT/group_split_ab.csv
