#!/bin/bash
# Next session (one GPU, ~3 min; issue 16): the decode combine as a programmatic dependent launch (session 31, CPU
# only: ACQBULK / PREEXIT in the AOT sm_90 SASS, off by default) - its GPU test (first call, bound replays, CUDA-graph
# replay against the ordinary launch), then the A/B on the decode bench's rows with cuDNN. Flip PDL_COMBINE if the
# short rows gain (predicted B 1 x 1k ~6 us against 7.2, 1.3x cuDNN) and no row loses.
export PYTHONPATH=$PWD/src
timeout 120 python -m pytest -m gpu -q -p no:cacheprovider tests/test_kvcache_gpu.py -k "programmatic or fused or prefetch" \
  > $OUT/gpu_kvcache_pdl.txt 2>&1; echo "gpu tests rc=$?"; tail -n 3 $OUT/gpu_kvcache_pdl.txt
timeout 200 python perf/results/h200/decode/pdl_combine_ab_2026-11-29.py > $OUT/pdl_combine_ab.txt 2>&1
echo "ab rc=$?"; cat $OUT/pdl_combine_ab.txt
