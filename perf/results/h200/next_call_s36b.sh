#!/bin/bash
# Session 36, second call (one GPU, ~8 min): issue 15's 4k causal rows across processes - cuDNN's time on 4 x 32 x
# 4k causal moved 0.93-1.17 ms over three processes in session 35 while the kernels stayed at 1.14-1.18: the route
# probe (graph replays, c / c176 / cp / the op / cuDNN) in three fresh processes before any routing change.
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2 3; do TAILN=14 step route_probe_$i 100 python perf/results/h200/attention/route_probe_2026-11-29.py; done
# issue 14 item 4's odd row: K = 4000 (misaligned 8000-byte rows), N = 5000 or the waves? (~40 s)
TAILN=8 step odd_shape_probe 90 python perf/results/h200/gemm/odd_shape_probe_2026-11-29.py
# issue 15: grouped-query rows below 4096 keys at head dims 96 and 128 (the 72-120 rule; ~2 x 60 s)
TAILN=26 step gqa_route_96 120 python perf/results/h200/attention/forward_route_128_2026-11-29.py --head-dim 96 --gqa-grid
TAILN=26 step gqa_route_128 120 python perf/results/h200/attention/forward_route_128_2026-11-29.py --gqa-grid
