#!/usr/bin/env bash
# Issue 14 item 5: Nsight Compute of the sm_90a GEMM's epilogue cost - the pingpong 128 x 128 tile and the cooperative
# default, plain and with bias + GELU + residual, at 16384 x 4096 x 1024 (the residual tile's worst row: 1.252x
# cuBLAS's plain GEMM against ~1.02 plain, epilogue_paths_ab_s39.txt). Four kernels, one launch each, in the
# profiled range (cudaProfilerStart / Stop), after warm-up launches outside it.
# Usage (repository root, GPU box): bash perf/results/h200/gemm/ncu_epilogue_2026-12-02.sh > profile.txt
set -eo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
ncu --profile-from-start off --kernel-name regex:tw_gemm_sm90 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section LaunchStats \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg \
    python - "$@" <<'PY'
import math
import torch
from tilewright.cuda_fallback import gemm_sm90
M, N, K = 16384, 4096, 1024
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / math.sqrt(K)
bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
r = torch.randn(1, M, N, device="cuda", dtype=torch.bfloat16)
out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
runs = [(v, e) for v in ("pp128x128s5", "coop128x256s3") for e in ("plain", "bias+gelu+residual")]
def launch(v, e):
    kw = dict(bias=bias, residual=r, activation="gelu") if e != "plain" else {}
    gemm_sm90.launch_cuda_gemm(a, b, out, variant=v, **kw)
for v, e in runs:
    for _ in range(3):
        launch(v, e)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for v, e in runs:
    print("profiling", v, e, flush=True)
    launch(v, e)
    torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
PY
