#!/bin/bash
# The first one-GPU call of the session after 24 (written in session 24, NOT yet run; ~7 min): the GPU test of the
# tune's compile-only precompile, the one-GPU tune with the precompile beside the sweep (session 22: 121.3 s on an
# H200 with the precompile first), the attention tile-order A/B of the grouped patch (next_call_..._s24e.sh) and the
# fused decode combine A/B (four splits a merge step).
# `bash perf/results/h200/next_call_2026-11-28_s24_first.sh` from the repository root (writes under $OUT).
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/test_tuning_gpu.py -k "compile_only" > $OUT/tests_tuning.txt 2>&1
tail -2 $OUT/tests_tuning.txt
T=/tmp/tunes; rm -rf $T; mkdir -p $T
s=$(date +%s%N); TRITON_CACHE_DIR=$T/t1 TILEWRIGHT_CACHE_DIR=$T/c1 timeout 170 python -m tilewright.cli tune --suite default --no-report > $OUT/tune_1gpu.log 2>&1; r=$?; e=$(date +%s%N)
echo "tune one GPU rc=$r $(( (e - s) / 1000000 )) ms"; sed 's/\r/\n/g' $OUT/tune_1gpu.log | grep "compiled\|rror\|not compiled" | head -4
bash perf/results/h200/next_call_2026-11-28_s24e.sh
# Issue 16: the fused decode combine now merges four splits' partials per step (loads in flight together); off by
# default. A/B against the second launch (session 23: 10.3 vs 7.4 us at B 1 x 1k with one split per step).
timeout 150 python perf/results/h200/decode/fused_combine_ab.py > $OUT/fused_combine_ab.txt 2>&1; tail -16 $OUT/fused_combine_ab.txt
