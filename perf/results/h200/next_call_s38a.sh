#!/bin/bash
# Session 38, first call (one GPU, ~6 min): issue 14's one-call hit (tilewright/_native hit) - its GPU tests with the
# key's and the fast path's, the CPU-tier compile-route tests on the device's torch 2.11 (test_compiled_small_calls_
# trace_to_aten_ops fails there, session 37), and the hit A/B against session 37's path (B1 model rows, host rows).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
python -c "from tilewright import _native; _native.load(block=True); print(_native.status())"
TAILN=12 step gpu_tests 200 python -m pytest -q -m gpu -p no:cacheprovider tests/test_native_hit.py \
  tests/test_native_key.py tests/test_fast_gpu.py tests/test_aten_route.py
TAILN=30 step cpu_tier_on_211 150 env TRITON_INTERPRET=1 python -m pytest -q -p no:cacheprovider -m "not gpu" \
  tests/test_native_hit.py tests/test_aten_route.py tests/test_opaque.py tests/test_rms_norm_linear.py \
  tests/test_rms_norm_sumsq.py -k "compile or graph or traced or native or hit"
TAILN=30 step hit_ab 200 python perf/results/h200/host/hit_ab_2026-12-02.py 3
