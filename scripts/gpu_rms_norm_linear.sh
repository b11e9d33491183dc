#!/usr/bin/env bash
# GPU run for issue 4 (RMSNorm-fused GEMM): the benchmark (it also autotunes every suite shape into the Triton cache),
# then the GPU tests (which reuse those tunings); logs and CSVs under $OUT, a compact summary printed last.
# Usage on the device machine: bash scripts/gpu_rms_norm_linear.sh [bwd-cases: all | none | tag,tag,...]
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
SECONDS=0
timeout "${BENCH_TIMEOUT:-300}" python -m tilewright.bench.rms_norm_linear --out "$OUT" --bwd "${1:-all}" \
    > "$OUT/bench.log" 2>&1
echo "bench rc=$? after ${SECONDS}s"
TILEWRIGHT_NUMERICS_CSV=$OUT/numerics.csv timeout "${TEST_TIMEOUT:-150}" \
    python -m pytest tests/test_rms_norm_linear_gpu.py -q -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
echo "tests rc=$? after ${SECONDS}s"
grep -E "passed|failed|Error|assert" "$OUT/gpu_tests.log" | tail -15
[ -f "$OUT/numerics.csv" ] && column -s, -t < "$OUT/numerics.csv" | cut -c1-250
grep -E "^ +[a-z0-9-]+ +[a-z_]+ +[0-9.]+ ms$" "$OUT/bench.log" | tail -3
sed -n '/^fused time/,$p' "$OUT/bench.log"
tail -3 "$OUT/bench.log"
