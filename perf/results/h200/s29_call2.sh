#!/bin/bash
# Session 29, call 2 (~4 min): the new defaults on the GPU - paged decode with the page-table entries a step ahead at
# the contiguous launch's shape (PAGE_PREFETCH), block-scaled FP8 with the scales brought into the stages
# (BLOCK_STAGE_VARIANT) - their GPU tiers, then the decode bench (issue 16's rows, SDPA's backends in the same run).
export PYTHONPATH=$PWD/src
T0=$(date +%s)
timeout 150 python -m pytest -m gpu -q -p no:cacheprovider tests/test_kvcache_gpu.py tests/cuda/test_fp8_gemm_sm90_gpu.py \
  tests/test_scaled_mm_gpu.py > $OUT/gpu_kvcache_fp8_defaults.txt 2>&1
echo "tiers rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $OUT/gpu_kvcache_fp8_defaults.txt
timeout 200 python -m tilewright.bench.decode default $OUT/decode.csv > $OUT/decode.log 2>&1
echo "decode bench rc=$? $(( $(date +%s) - T0 ))s"
tail -60 $OUT/decode.log
# Issue 19: cuBLASLt's accurate row-wise FP8 kernel beside ours at 8192^3 (name: tile and cluster; SOL, launch, warp
# state, memory sections)
for who in cublaslt tw; do
  timeout 120 ncu --section SpeedOfLight --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --launch-skip 3 --launch-count 1 \
    python perf/results/h200/fp8/ncu_row_vs_cublaslt_2026-11-29.py $who 8192 > $OUT/ncu_fp8_row_8192_$who.txt 2>&1
  echo "ncu $who rc=$?"; grep -E "^\s+[a-z_0-9]+.*\(|Throughput|Cluster Size|Registers|Grid Size|Block Size|Duration|Pipe|Hit" $OUT/ncu_fp8_row_8192_$who.txt | head -30
done
