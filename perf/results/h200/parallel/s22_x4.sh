#!/bin/bash
# Session 22, four-GPU call (issue 18): 2-D FSDP x TP=2 - the GPU test and the llama-width bench.
export PYTHONPATH=$PWD/src
nvidia-smi -L
T0=$(date +%s)
timeout 150 python -m pytest -q -m gpu -p no:cacheprovider -s tests/test_parallel.py -k four_gpu > $OUT/test_parallel_x4.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/test_parallel_x4.txt
grep -E "tokens/s|passed|failed|rc=" $OUT/test_parallel_x4.txt
timeout 120 torchrun --nproc-per-node 4 -m tilewright.bench.parallel --mode fsdp+tp --steps 50 --csv $OUT/fsdp_tp_x4.csv > $OUT/fsdp_tp_x4.log 2>&1; echo "rc=$?" >> $OUT/fsdp_tp_x4.log
grep -E "final loss|rc=|Error" $OUT/fsdp_tp_x4.log | tail -3
