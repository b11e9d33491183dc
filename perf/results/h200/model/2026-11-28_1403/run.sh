#!/bin/bash
# Session 22 call 1 (one GPU): issue 14's model bench with session 21's routes, the never-run K=0 test,
# issue 16's H200 decode / varlen rows.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
T0=$(date +%s)
timeout 230 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv > $OUT/model.log 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/model.log
grep -v Warning $OUT/model.log | tail -45
T0=$(date +%s)
timeout 60 python -m pytest -q -m gpu -p no:cacheprovider tests/test_scaled_mm_gpu.py -k k_zero > $OUT/k_zero.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/k_zero.txt
tail -3 $OUT/k_zero.txt
T0=$(date +%s)
timeout 150 python -m tilewright.bench.decode default $OUT/decode.csv > $OUT/decode.log 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/decode.log
grep -v -i warn $OUT/decode.log | grep -v scaled_dot | tail -5
T0=$(date +%s)
timeout 100 python -m tilewright.bench.varlen default $OUT/varlen.csv > $OUT/varlen.log 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/varlen.log
grep -v -i warn $OUT/varlen.log | grep -v scaled_dot | tail -5
