#!/bin/bash
# Session 40's fourth call (~3 min): the swiglu paths decide the fused kernel's region before entering their op
# (a small call keeps the pair's routes: the B1 compiled forward had fallen to 0.61x torch.compile) - GPU tests of
# the swiglu_linear file and the rms_norm_linear tier, then the model bench's B1 rows.
source perf/results/h200/call_steps.sh
TAILN=3 step gpu_tests 150 python scripts/pytest_shards.py --shards 8 --logs /tmp/shards -- -m gpu \
  tests/test_swiglu_linear_gpu.py tests/test_rms_norm_linear_gpu.py tests/test_swiglu_rotary_gpu.py
cat /tmp/shards/shard*.log > $OUT/gpu_tests_shards.txt
TAILN=30 step model_b1 120 python -m tilewright.bench.model --no-max-autotune --cases llama-small,vit-small \
  --csv $OUT/model_b1.csv
