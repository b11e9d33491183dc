#!/bin/bash
# Session 40's last call (~9 min; session 40 ran it under 250 s: 1,390 passed before the limit): the whole default GPU tier on the final code as 12 concurrent shards (a regression
# check of everything the session's shared changes touch: tma_load_stage, Guard, rms_norm_linear's signature).
source perf/results/h200/call_steps.sh
TAILN=16 step gpu_tier 560 python scripts/pytest_shards.py --shards 12 --logs /tmp/shards -- -m gpu tests
cat /tmp/shards/shard*.log > $OUT/gpu_tier_shards.txt
