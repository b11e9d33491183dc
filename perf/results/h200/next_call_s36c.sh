#!/bin/bash
# Session 36, third call (one GPU, ~4 min): issue 15's forward route below 4096 keys - which of grouped-query heads,
# the CTA count or a key length off the 128 grid makes the kernels beat cuDNN (session 36's GQA grid: 1.01-1.30x on
# causal 2k / 3k rows and on 3k rows without the mask, where the rule routes cuDNN) - at head dims 128 and 96; issue
# 14's odd row: does N = 5000's 10,000-byte output pitch cost the store?
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
TAILN=4 step route_grid_128 200 python perf/results/h200/attention/forward_route_grid_2026-12-01.py
TAILN=4 step route_grid_96 200 python perf/results/h200/attention/forward_route_grid_2026-12-01.py --head-dim 96
TAILN=6 step odd_pitch_probe 90 python perf/results/h200/gemm/odd_pitch_probe_2026-12-01.py
