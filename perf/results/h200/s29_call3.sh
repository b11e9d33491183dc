#!/bin/bash
# Session 29, call 3 (~1.5 min): issue 19 - cuBLASLt's accurate row-wise FP8 kernel beside ours at 8192^3 under ncu
# (its name gives the tile and cluster shape; SOL, launch, warp state, memory and compute sections). The kernel filter
# skips the fp8 casts that call 2's run profiled by mistake.
export PYTHONPATH=$PWD/src
for who in cublaslt tw; do
  timeout 150 ncu --section SpeedOfLight --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --section Occupancy -k regex:"gemm|xmma|cutlass|tw_fp8" --launch-skip 3 --launch-count 1 \
    python perf/results/h200/fp8/ncu_row_vs_cublaslt_2026-11-29.py $who 8192 > $OUT/ncu_fp8_row_8192_$who.txt 2>&1
  echo "ncu $who rc=$?"; grep -E "Context 1|Throughput|Cluster Size|Registers|Grid Size|Block Size|Duration|Hit Rate|Shared Memory Per|Issued|Eligible" $OUT/ncu_fp8_row_8192_$who.txt | head -30
done
