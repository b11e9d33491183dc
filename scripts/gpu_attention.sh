#!/usr/bin/env bash
# GPU run for the attention op: benchmark (BENCHMARKS.md suite), GPU tests, a profile of the smallest row, then a
# FlexAttention pass (slow to compile, so last); results under $OUT.  usage: OUT=out bash scripts/gpu_attention.sh
set -u -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())"
TRITON_PRINT_AUTOTUNING=1 TILEWRIGHT_BENCH_FLEX=0 timeout ${BENCH_TIMEOUT:-240} python3 -W ignore -m tilewright.bench.attention default "$OUT/attention.csv" > "$OUT/bench.log" 2>&1
grep -E "precompiled|best config|TFLOP" "$OUT/bench.log" | grep -E "precompiled|best config" | sort | uniq -c | sort -rn | head -40
TILEWRIGHT_AUTOTUNE=0 timeout ${TEST_TIMEOUT:-120} python3 -m pytest tests/test_attention_gpu.py -q -p no:cacheprovider 2>&1 | tail -15 | tee "$OUT/tests.log"
timeout 60 python3 - <<'PY' 2>&1 | tail -25
import torch, tilewright
from torch.profiler import profile, ProfilerActivity
q = torch.randn(4, 16, 512, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
for _ in range(3):
    o = tilewright.flash_attention(q, q, q); torch.autograd.grad(o, q, torch.ones_like(o))
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
    for _ in range(10):
        o = tilewright.flash_attention(q, q, q); torch.autograd.grad(o, q, torch.ones_like(o))
    torch.cuda.synchronize()
print(p.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=50))
PY
TILEWRIGHT_BENCH_ONLY=flex TILEWRIGHT_BENCH_FLEX=1 timeout ${FLEX_TIMEOUT:-100} python3 -W ignore -m tilewright.bench.attention default "$OUT/attention_flex.csv" > "$OUT/flex.log" 2>&1
tail -3 "$OUT/flex.log"
python3 - "$OUT/attention.csv" "$OUT/attention_flex.csv" <<'PY'
import sys, os, pandas as pd
from tilewright.bench.attention import ratio_table
df = pd.read_csv(sys.argv[1])
if os.path.exists(sys.argv[2]):
    df = pd.concat([df, pd.read_csv(sys.argv[2])], ignore_index=True)
pd.set_option("display.width", 220)
print(ratio_table(df).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
PY
