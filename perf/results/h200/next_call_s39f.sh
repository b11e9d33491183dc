#!/bin/bash
# Session 39, last call (one GPU, ~2 min): apply_rotary replayed under autograd - its GPU tests (the fast path's
# rotary tests, the op's numerics), then the in-process A/B on the Llama B1 forward + backward.
source perf/results/h200/call_steps.sh
TAILN=4 step gpu_tests_rotary 120 python -m pytest -q -m gpu -p no:cacheprovider tests/test_fast_gpu.py \
  tests/test_swiglu_rotary.py -k "rotary"
cd perf/results/h200/model && TAILN=12 step rotary_grad_replay_ab 100 python rotary_grad_replay_ab_2026-12-02.py
