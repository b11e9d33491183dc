#!/bin/bash
# Session 28, seventh call (one GPU): the model bench's first tilewright forward under cProfile, fully cold (fresh
# TILEWRIGHT_CACHE_DIR / TRITON_CACHE_DIR), then with the kernels on disk and no tuning cache.
export PYTHONPATH=$PWD/src TILEWRIGHT_CACHE_DIR=/tmp/twc TRITON_CACHE_DIR=/tmp/trc
rm -rf /tmp/twc /tmp/trc
T0=$(date +%s)
S=perf/results/h200/model/first_call_profile_2026-11-29.py
timeout 200 python $S llama-prefill > $OUT/first_cold_llama.txt 2>&1; echo "cold rc=$? $(( $(date +%s) - T0 ))s"
rm -f /tmp/twc/autotune.json; ls /tmp/twc
timeout 100 python $S llama-prefill > $OUT/first_warm_llama.txt 2>&1; echo "warm rc=$? $(( $(date +%s) - T0 ))s"
timeout 150 python $S vit-prefill > $OUT/first_cold_vit.txt 2>&1; echo "vit rc=$? $(( $(date +%s) - T0 ))s"
grep -h "forward" $OUT/first_*.txt
