#!/bin/bash
# Session 37, first call (one GPU, ~7 min): the C replay key (issue 14) - its GPU test and the ops' replay tests with
# it loaded, then its A/B against the Python key on the B1 model rows and the host rows (same process) - and the
# sums-once op test case session 36 left un-run (issue 17).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
python -c "from tilewright import _native; _native.load(block=True); print(_native.status())"
TAILN=4 step native_tests 200 python -m pytest -q -p no:cacheprovider tests/test_native_key.py tests/test_fast.py tests/test_fast_gpu.py tests/test_aten_route.py
TAILN=30 step native_key_ab 240 python perf/results/h200/host/native_key_ab_2026-12-01.py
TAILN=6 step sums_once_tests 200 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_rmsnorm_sums_once_sm90_gpu.py -k op
save_cubins
