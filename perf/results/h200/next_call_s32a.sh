#!/bin/bash
# Next session's first call (kind nvidia-h200-x2, ~5 min; issue 18): FSDP2 and TP=2 with the two builds trained
# interleaved (bench.parallel --block 5, session 31), three FSDP2 runs and two TP runs, then the GPU tier of
# tests/test_parallel.py. Session 31 measured FSDP2 0.72-0.99x (one build after the other; consecutive runs on one
# host 0.80x / 0.99x) and TP 1.106-1.146x; the training linears the router gives to cuBLAS run on ATen now (the q
# projection at 4096 x 2048 x 2048). Prediction: FSDP2 0.90-0.97x with a spread of a few percent (the rest is host:
# the GEMMs on tilewright's kernels keep Python autograd nodes - gate / up / wo / down, four a layer).
export PYTHONPATH=$PWD/src
nvidia-smi -L
for m in fsdp tp fsdp tp fsdp; do
  T0=$(date +%s)
  timeout 100 torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode $m --steps 60 > $OUT/${m}_$T0.log 2>&1
  echo "$m rc=$? $(( $(date +%s) - T0 ))s $(grep -o 'worst relative.*' $OUT/${m}_$T0.log)" | tee -a $OUT/summary.txt
done
rm -f $OUT/*.log
timeout 150 python -m pytest -q -m gpu -p no:cacheprovider -s tests/test_parallel.py > $OUT/test_parallel.txt 2>&1
echo "rc=$?" >> $OUT/test_parallel.txt; grep -E "tokens/s|passed|failed|rc=" $OUT/test_parallel.txt
