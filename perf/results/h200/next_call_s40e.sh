#!/bin/bash
# The whole default GPU tier as 12 concurrent shards (~9 min): a regression check of everything session 40's shared
# changes touch (tma_load_stage, Guard, rms_norm_linear's signature). Session 40 ran it under a 250 s limit: 1,390
# passed, none failed, 7 shards stopped by the limit.
source perf/results/h200/call_steps.sh
TAILN=16 step gpu_tier 560 python scripts/pytest_shards.py --shards 12 --logs /tmp/shards -- -m gpu tests
cat /tmp/shards/shard*.log > $OUT/gpu_tier_shards.txt
