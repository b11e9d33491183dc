#!/bin/bash
# Session 36, fifth call (one GPU, ~7 min): the model bench on this session's code (issue 14's headline; the forward
# route change touches none of its rows: Llama B8 has 128 (batch, head) pairs, the B1 rows sit under the FLOPs limit),
# and the head-dim-64 backward's ncu (issue 15, prepared since session 30).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
TAILN=24 step model 240 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
(bash perf/results/h200/attention/ncu_bwd_d64_2026-11-29.sh > $OUT/ncu_bwd_d64.txt 2>&1; echo "ncu script rc=$?"; tail -45 $OUT/ncu_bwd_d64.txt)
