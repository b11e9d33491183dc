#!/bin/bash
# Session 28, sixth call (one GPU): burst vs sustained GEMM time with clocks and power (sustained_2026-11-29.py), the
# model bench after the folded replay, the B1 rows' host per op (host_per_op_2026-11-28.py).
export PYTHONPATH=$PWD/src
T0=$(date +%s)
TILEWRIGHT_RMS_FOLDED=capture timeout 150 python perf/results/h200/model/sustained_2026-11-29.py > $OUT/sustained.txt 2>&1
echo "sustained rc=$? $(( $(date +%s) - T0 ))s"; grep -v Warn $OUT/sustained.txt
timeout 300 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv > $OUT/model.log 2>&1
echo "model rc=$? $(( $(date +%s) - T0 ))s"; grep -E " fwd |fwd\+bwd" $OUT/model.log | grep -v "^model" | head -40
timeout 100 python perf/results/h200/model/host_per_op_2026-11-28.py > $OUT/host_per_op.txt 2>&1
echo "per-op rc=$? $(( $(date +%s) - T0 ))s"; grep -E "ratio|sum of" $OUT/host_per_op.txt
