#!/bin/bash
# Session 44's second call (from session 43): the Llama B8 step's kernels in launch order, then the model bench's
# four cases for the README table (carry .cubins from the first call's cubins.tgz).
source perf/results/h200/call_steps.sh
TAILN=4 step order_b8_fwdbwd 80 python perf/results/h200/model/step_kernel_order_2026-12-08.py llama-prefill fwdbwd
TAILN=4 step order_b8_fwd 45 python perf/results/h200/model/step_kernel_order_2026-12-08.py llama-prefill fwd
TAILN=60 step model 230 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
