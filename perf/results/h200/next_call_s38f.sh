#!/bin/bash
# Session 38, last call (one GPU, ~2 min; ~280 s of device time left): small epilogue GEMMs without autograd take one
# fused launch (gemm.fused_launch_preferred) - its GPU tests, the per-call / forward probe again, the B1 model rows.
source perf/results/h200/call_steps.sh
TAILN=6 step gpu_tests 90 python -m pytest -q -m gpu -p no:cacheprovider tests/test_aten_route.py -k "one_launch"
TAILN=30 step b1_epilogue_ab_fused 60 python perf/results/h200/host/b1_epilogue_kernels_ab_2026-12-02.py
TAILN=14 step model_b1 70 python -m tilewright.bench.model --no-max-autotune --cases llama-small,vit-small \
  --csv $OUT/model_b1.csv
