#!/bin/bash
# Session 35, third call (one GPU, ~7 min): the model bench after session 34's changes (the compiled forward's fold,
# cp on short causal rows, the backward's "defer" at head dim 128, the decode LSE) - issue 14's table.
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
step model 240 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
grep -E "^model" $OUT/model.txt | grep -v first_call | cut -c1-170
# issue 16: the paged short rows' launch shapes (pages of 16 within 5% of contiguous wanted)
TAILN=60 step paged_short_rows 150 python perf/results/h200/decode/paged_short_rows_2026-11-29.py
