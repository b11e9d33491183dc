#!/bin/bash
# Session 41: the gated norm + GEMM's small calls through one ATen route (rms_norm_linear's _swiglu_routes): its GPU
# tests and the ATen-route / native-hit tiers, the Llama B1 per-call host table again, the model bench's B1 rows.
source perf/results/h200/call_steps.sh
TAILN=8 step gpu_route_tests 150 python scripts/pytest_shards.py --shards 4 --logs /tmp/shards -- -m gpu \
  tests/test_aten_route.py tests/test_native_hit.py tests/test_fast_gpu.py tests/test_rms_norm_linear_gpu.py
TAILN=30 step llama_b1_ops 120 python perf/results/h200/host/llama_b1_ops_2026-12-02.py
TAILN=30 step model_b1 200 python -m tilewright.bench.model --no-max-autotune --cases llama-small,vit-small \
  --csv $OUT/model_b1.csv
