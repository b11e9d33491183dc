#!/bin/bash
# Session 40's third call (one GPU, ~8 min): the gated-linear GEMM on the pingpong tile (GLU_VARIANT) - its GPU tests,
# the op bench again; the model A/B of the MLP (pair / glu / glu_norm, one process); the model bench's B8 and B1 rows
# on the final code (its Llama block now takes RMSNormLinear(activation="swiglu")) for the README table.
source perf/results/h200/call_steps.sh
TAILN=3 step gpu_tests_glu 120 python scripts/pytest_shards.py --shards 8 --logs /tmp/shards -- -m gpu \
  tests/test_swiglu_linear_gpu.py
TAILN=30 step swiglu_linear 90 python perf/results/h200/gemm/swiglu_linear_2026-12-02.py
TAILN=12 step swiglu_linear_ab 100 python perf/results/h200/model/swiglu_linear_ab_2026-12-02.py
TAILN=16 step model 230 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
