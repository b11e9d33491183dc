#!/bin/bash
# Session 22, two-GPU call D (issue 18): the local TP route's loss parity and GPU tier, tokens/s once more.
export PYTHONPATH=$PWD/src
T0=$(date +%s)
timeout 200 python -m pytest -q -m gpu -p no:cacheprovider -s tests/test_parallel.py > $OUT/test_parallel.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/test_parallel.txt
grep -E "tokens/s|passed|failed|rc=" $OUT/test_parallel.txt
for m in tp fsdp; do
  timeout 100 torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode $m --steps 50 --csv $OUT/${m}_x2.csv > $OUT/${m}_x2.log 2>&1
  grep -o "final loss.*" $OUT/${m}_x2.log
done
