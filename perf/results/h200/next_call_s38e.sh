#!/bin/bash
# Session 38, fifth call (one GPU, ~4 min): small residual GEMMs without autograd keep the kernel
# (gemm.residual_keeps_kernel) - its GPU tests with the ATen route's and the fast path's, then the model bench on the
# final code (headline) and the B1 rows once more.
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
python -c "from tilewright import _native; _native.load(block=True); print(_native.status())"
TAILN=10 step gpu_tests 200 python -m pytest -q -m gpu -p no:cacheprovider tests/test_aten_route.py \
  tests/test_fast_gpu.py tests/test_native_hit.py
TAILN=24 step model 200 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
TAILN=14 step model_b1 80 python -m tilewright.bench.model --no-max-autotune --cases llama-small,vit-small \
  --csv $OUT/model_b1.csv
