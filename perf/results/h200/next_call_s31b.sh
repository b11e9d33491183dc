#!/bin/bash
# Next session's second call (one GPU, ~3 min): the head-dim-64 forward against cuDNN over a grid (S 512-16k,
# causal or not, MHA / GQA 4): the table a forward-only routing rule at head dim 64 needs - ops/_aten.cudnn_faster
# sends every forward-only hdim-64 call on sm_90 to cuDNN (measured on H100 with the two-warpgroup forward, 0.76-0.93x);
# c3 ran 0.90-1.10x on session 30's seven rows. The op column is the public op with backend="cuda" (its host path).
export PYTHONPATH=$PWD/src
timeout 200 python perf/results/h200/attention/consumers3_ab_2026-11-29.py c,c3 --grid > $OUT/d64_grid.txt 2>&1
echo "rc=$?"; grep -v Warn $OUT/d64_grid.txt
