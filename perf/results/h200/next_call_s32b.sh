#!/bin/bash
# Next session's second call (one GPU, ~6 min; issue 14): the model bench with session 31's changes (training
# linear / matmul calls the router gives to cuBLAS on ATen's C++ nodes - the Llama / ViT B1 rows' small GEMMs were on
# the ATen route already below 2^35 FLOPs, the ones just over it the router gives to cuBLAS move now), and the host
# bench per op.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
timeout 360 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv > $OUT/model.log 2>&1; echo "model rc=$?"
grep -E "fwd |fwd\+bwd|done" $OUT/model.log | head -60
timeout 150 python -m tilewright.cli bench --op host --out $OUT > $OUT/host.log 2>&1; echo "host rc=$?"
tail -20 $OUT/host.log
echo "total: $(( $(date +%s) - T0 )) s"
