#!/bin/bash
# Next session's first call (one GPU, ~5 min): session 28's unrun checks.
# (1) the training RMSNorm-linear's cuBLAS-rule GPU test (its first run failed on a test bug, fixed since);
# (2) the FP8 block scales brought with the stage (BLOCK_STAGE_VARIANT) as the default for block scales: the FP8 and
#     scaled_mm GPU tiers with `_default_variant` patched in-process, then its A/B once more (geomean 0.956 vs the
#     copied-ahead build's 0.943 in the 07:03 run; the long-N shape 0.936 vs 0.944);
# (3) paged decode with the page-table prefetch (prepared by a helper in session 28): its GPU tests, then its A/B.
export PYTHONPATH=$PWD/src
T0=$(date +%s)
timeout 120 python -m pytest -m gpu -q -p no:cacheprovider tests/test_aten_route.py > $OUT/gpu_aten_cublas.txt 2>&1
echo "aten rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $OUT/gpu_aten_cublas.txt
timeout 200 python - > $OUT/gpu_fp8_stage_default.txt 2>&1 <<'PY'
import pytest
from tilewright.cuda_fallback import fp8_gemm_sm90 as f8
default = f8._default_variant
f8._default_variant = lambda M, mode, fast: f8.BLOCK_STAGE_VARIANT if mode == 3 else default(M, mode, fast)
raise SystemExit(pytest.main(["-m", "gpu", "-q", "-p", "no:cacheprovider", "tests/cuda/test_fp8_gemm_sm90_gpu.py",
                              "tests/test_scaled_mm_gpu.py"]))
PY
echo "fp8 stage default rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $OUT/gpu_fp8_stage_default.txt
timeout 100 python perf/results/h200/fp8/block_fix_ab_2026-11-29.py stage > $OUT/fp8_stage_ab.csv 2>&1
echo "ab rc=$?"; grep "^#" $OUT/fp8_stage_ab.csv
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/test_kvcache_gpu.py -k "prefetch or fused" > $OUT/gpu_prefetch.txt 2>&1
echo "prefetch tests rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $OUT/gpu_prefetch.txt
timeout 150 python -c "import sys, pytest; from tilewright.triton_kernels import kvcache_attention as ka; ka.PAGE_PREFETCH = True; sys.exit(pytest.main(['-q', '-m', 'gpu', '-p', 'no:cacheprovider', 'tests/test_kvcache_gpu.py']))" \
  > $OUT/gpu_kvcache_prefetch_on.txt 2>&1; echo "kvcache tier, prefetch on rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $OUT/gpu_kvcache_prefetch_on.txt
timeout 200 python perf/results/h200/decode/page_prefetch_ab_2026-11-29.py > $OUT/page_prefetch_ab.txt 2>&1
echo "prefetch ab rc=$? $(( $(date +%s) - T0 ))s"; tail -25 $OUT/page_prefetch_ab.txt
