#!/bin/bash
# Session 39, first call (one GPU): the rotary replay's unrun GPU test (session 38), then issue 14 item 5's state on
# this card - every epilogue on the item's large rows, per kernel and tile variant (gemm/epilogue_floor_2026-12-02.py).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
TAILN=4 step gpu_rotary_repeat 150 python -m pytest -q -m gpu -p no:cacheprovider tests/test_fast_gpu.py -k repeat
TAILN=3 step epilogue_floor 420 python perf/results/h200/gemm/epilogue_floor_2026-12-02.py
save_cubins
