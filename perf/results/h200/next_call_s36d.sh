#!/bin/bash
# Session 36, fourth call (one GPU, ~6 min): the few-heads causal forward route's GPU tests (issue 15, CPU-tested);
# the second route grid (rows without the mask on and off the 128-key grid, Sq != Skv); issue 14's B1 forward with
# each op swapped for torch's (which wrapper costs the host-bound step its lead), the host bench and the first-call
# bench on this host.
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
TAILN=4 step route_tests 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_aten_route.py -k "attention or few_heads"
TAILN=3 step route_grid_tails 150 python perf/results/h200/attention/forward_route_grid_2026-12-01.py --tails
TAILN=4 step b1_op_swap 120 python perf/results/h200/model/b1_op_swap_2026-12-01.py
TAILN=18 step host 120 python -m tilewright.cli bench --op host --out /tmp/host
TAILN=14 step first_call 200 python -m tilewright.cli bench --op first_call --out /tmp/first_call
