#!/bin/bash
# Session 24, first working call (one GPU): the attention GPU tier's cases the previous call's 240 s limit cut off
# (the last 80 collected of tests/test_attention_gpu.py) and the packed sm_90a file; the H200 host-cost bench
# (issue 14 item 1: no H200 run committed yet); the host diagnosis of the model rows (host vs GPU per step, cProfile).
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
python -m pytest -q -m gpu --co -p no:cacheprovider tests/test_attention_gpu.py 2>/dev/null | grep '::' > $OUT/ids.txt
wc -l < $OUT/ids.txt
tail -n 80 $OUT/ids.txt > $OUT/ids_tail.txt
timeout 200 xargs -d '\n' -a $OUT/ids_tail.txt python -m pytest -q -m gpu -p no:cacheprovider \
  tests/cuda/test_attention_varlen_sm90_gpu.py > $OUT/gpu_tests.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/gpu_tests.txt
tail -4 $OUT/gpu_tests.txt
T0=$(date +%s)
timeout 120 python -m tilewright.cli bench --op host --out $OUT/res > $OUT/host_bench.log 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/host_bench.log
grep -E "tilewright .* torch" $OUT/host_bench.log | head -20
T0=$(date +%s)
timeout 200 python perf/results/h100/model/host_diag_2026-11-27.py vit-prefill,llama-small > $OUT/host_diag.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/host_diag.txt
grep -E "host fwd|synchronizing|rc=" $OUT/host_diag.txt
