#!/bin/bash
# Session 43, call 1: the rotary split under torch.compile - the in-process A/B (model/rotary_split_ab_2026-12-08.py);
# the Llama B8 step's kernels in launch order (model/step_kernel_order_2026-12-08.py); the model bench's four cases
# for the README table; the GPU tests of the rotary op; the cubins back for the next call.
source perf/results/h200/call_steps.sh
TAILN=40 step rotary_split_ab 200 python perf/results/h200/model/rotary_split_ab_2026-12-08.py
TAILN=4 step order_b8_fwdbwd 80 python perf/results/h200/model/step_kernel_order_2026-12-08.py llama-prefill fwdbwd
TAILN=4 step order_b8_fwd 45 python perf/results/h200/model/step_kernel_order_2026-12-08.py llama-prefill fwd
TAILN=60 step model 170 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
TAILN=4 step gpu_tests 40 python -m pytest -q -m gpu tests/test_swiglu_rotary_gpu.py
save_cubins
