#!/bin/bash
# Session 38, third call (one GPU, ~6 min): apply_rotary's eager replay - its GPU tests with the fast path's, the
# rotary A/B (host per call, Llama B1 forward), then the model bench on the final code (headline) and the host bench.
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
python -c "from tilewright import _native; _native.load(block=True); print(_native.status())"
TAILN=10 step gpu_tests 200 python -m pytest -q -m gpu -p no:cacheprovider tests/test_fast_gpu.py \
  tests/test_swiglu_rotary.py tests/test_native_hit.py
TAILN=10 step rotary_ab 90 python perf/results/h200/host/rotary_replay_ab_2026-12-02.py 3
TAILN=24 step model 200 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
TAILN=6 step host 80 python -m tilewright.cli bench --op host --out $OUT/hostcsv --no-plots
