#!/bin/bash
# Session 26, one GPU: (1) ncu --set full of the dK / dV kernel after the statistics change - session 25's
# ncu_bwd_source_2026-11-28.sh (2 x 16 x 8k x 128 causal, third launch; summarised by
# attention/ncu_stalls_summary.py), (2) the model bench (issue 14's headline) with this session's code, no
# max-autotune column.
bash perf/results/h200/attention/ncu_bwd_source_2026-11-28.sh
export PYTHONPATH=$PWD/src
timeout 330 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv > $OUT/model.log 2>&1; echo "model rc=$?"
grep -E "fwd |fwd\+bwd|done" $OUT/model.log | head -60
