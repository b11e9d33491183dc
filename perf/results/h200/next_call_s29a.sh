#!/bin/bash
# Next session's first call (one GPU, ~7 min): what session 29's changes (the sm_90a GEMM's descriptors formed once a
# stage; residual GEMMs on the sm_90a kernel) move but the session had no device time left to measure.
# (1) the GPU tiers of the replay / route / RMSNorm-linear paths that now run residual GEMMs on the sm_90a kernel;
# (2) FP8 block scales: copied ahead (6 stages) vs in the stages (5) with the new descriptors, and the row-wise build
#     at 5 stages (`cuda_row5`: is the block gap at 8192^3, 0.927x, the sixth stage?);
# (3) issue 17's rows, forward + backward against eager and torch.compile (were 0.985-0.993x on the GPU-bound rows;
#     the step's three GEMMs run the new mainloop);
# (4) issue 17's forward rows (TILEWRIGHT_RMS_FOLDED=capture: the graphs time the eager folded path, as in session 21;
#     the op against the eager pair, compile and bare cuBLAS; folded rows were 1.005-1.034x
#     bare).
export PYTHONPATH=$PWD/src
T0=$(date +%s)
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_fast_gpu.py tests/test_cublas_routes_gpu.py \
  tests/test_rms_norm_linear_gpu.py > $OUT/gpu_routes_s29.txt 2>&1
echo "tiers rc=$? $(( $(date +%s) - T0 ))s"; tail -3 $OUT/gpu_routes_s29.txt
timeout 100 python perf/results/h200/fp8/block_fix_ab_2026-11-29.py stage > $OUT/fp8_stage_ab.csv 2>&1
echo "fp8 stage ab rc=$? $(( $(date +%s) - T0 ))s"; grep "^#" $OUT/fp8_stage_ab.csv
timeout 150 python perf/results/h200/rms_norm_linear/fwd_bwd_rows_2026-11-29.py > $OUT/rms_fwd_bwd_rows.txt 2>&1
echo "rms fwd+bwd rc=$? $(( $(date +%s) - T0 ))s"; grep -E "x eager" $OUT/rms_fwd_bwd_rows.txt
TILEWRIGHT_RMS_FOLDED=capture timeout 120 python perf/results/h200/rms_norm_linear/ops_2026-11-28.py > $OUT/rms_ops.txt 2>&1
echo "rms ops rc=$? $(( $(date +%s) - T0 ))s"; tail -20 $OUT/rms_ops.txt
