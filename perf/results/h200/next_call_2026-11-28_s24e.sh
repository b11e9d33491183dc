#!/bin/bash
# For the session after 24 (written in session 24, NOT yet run; one GPU, ~5 min): A/B of the attention kernels' tile
# order on the causal rows - main (longest tiles first over every head where Skv <= 4096, head by head above) against
# grouped_order_2026-11-28.patch (longest first within groups of heads spanning two waves of tiles, every Skv: a
# list-scheduling model puts both 8k and 2k rows at 1.00-1.03x the ideal while the heads running at once stay few
# enough for L2). Prediction: 2 x 16 x 8k and 1 x 16 x 16k forward and fwd+bwd +3-5% over main, the 2k-4k rows
# within 1-2% of main. Then `python -m pytest -m gpu` on the three sm_90a attention files if the patch is kept.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/grouped && mkdir -p /tmp/grouped && cp -r src /tmp/grouped/ && \
  (cd /tmp/grouped && patch -p1 -s < $OLDPWD/perf/results/h200/attention/grouped_order_2026-11-28.patch) || exit 1
AB=perf/results/h200/attention/heavy_first_ab_2026-11-28.py
for round in 1 2; do
  for tree in main grouped; do
    if [ $tree = main ]; then P=$PWD/src; else P=/tmp/grouped/src; fi
    PYTHONPATH=$P timeout 140 python $AB $tree$round >> $OUT/ab_grouped.csv 2>> $OUT/ab.err
  done
done
cat $OUT/ab_grouped.csv
