#!/bin/bash
# Session 38, second call (one GPU, ~9 min): the CPU tier's compile-route tests on torch 2.11 with a numpy the Triton
# interpreter runs on (the device's numpy breaks it; the wheel is carried in .whl/), then issue 14's tables with the
# one-call hit - the model bench (headline), the host bench - and the B1 residual GEMMs' route probe.
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
pip install -q --no-deps --target /tmp/np .whl/numpy-2.2.6-*.whl 2>&1 | tail -1
python -c "from tilewright import _native; _native.load(block=True); print(_native.status())"
TAILN=8 step cpu_tier_on_211 200 env PYTHONPATH=/tmp/np:$PYTHONPATH TRITON_INTERPRET=1 python -m pytest -q \
  -p no:cacheprovider -m "not gpu" tests/test_native_hit.py tests/test_aten_route.py tests/test_opaque.py \
  tests/test_rms_norm_linear.py tests/test_rms_norm_sumsq.py tests/test_rms_norm_linears.py \
  tests/test_swiglu_rotary.py -k "compile or graph or traced or native or hit or opaque or guard"
TAILN=24 step model 270 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
TAILN=20 step host 110 python -m tilewright.cli bench --op host --out $OUT/hostcsv --no-plots
TAILN=8 step b1_residual_route 60 python perf/results/h200/host/b1_residual_route_2026-12-02.py
