#!/bin/bash
# Session 43, call 1: the rotary split under torch.compile - GPU tests of the touched code (sharded; warms the cubin
# cache for what follows), the in-process A/B (model/rotary_split_ab_2026-12-08.py), then the model bench's four
# cases for the README table; the cubins back for the next call.
source perf/results/h200/call_steps.sh
TAILN=8 step gpu_tests 120 python scripts/pytest_shards.py --shards 8 --logs /tmp/shards -- -m gpu \
  tests/test_swiglu_rotary_gpu.py tests/test_bench_model.py tests/test_rms_norm_linear_gpu.py
TAILN=40 step rotary_split_ab 200 python perf/results/h200/model/rotary_split_ab_2026-12-08.py
TAILN=60 step model 230 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
save_cubins
