#!/bin/bash
# Session 37, third call (one GPU, ~6 min): issue 14's tables with the C replay key - the model bench (headline), the
# host bench, and the C / Python key A/B again (B1 model rows and host rows, same process).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
python -c "from tilewright import _native; _native.load(block=True); print(_native.status())"
TAILN=24 step model 260 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
TAILN=20 step host 120 python -m tilewright.cli bench --op host --out $OUT/hostcsv --no-plots
TAILN=30 step native_key_ab 180 python perf/results/h200/host/native_key_ab_2026-12-01.py 3
