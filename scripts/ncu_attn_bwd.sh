#!/usr/bin/env bash
# Nsight Compute profile of the sm_90a attention backward kernel (dK / dV with dQ in the pass) on the GPU box:
# speed of light, warp states, scheduler, memory, plus the tensor-pipe and MUFU utilisation. The third launch of the
# kernel is profiled (the first two bind and warm up).
# Usage: scripts/ncu_attn_bwd.sh [B H S D causal] > profile.txt   (default: 2 16 8192 128 1)
set -eo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
ncu --kernel-name regex:tw_attn_bwd_dkdv --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active \
    python - "$@" <<'PY'
import sys
import torch
import tilewright
B, H, S, D, causal = (int(a) for a in (sys.argv[1:] or ["2", "16", "8192", "128", "1"]))
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
o = tilewright.flash_attention(q, k, v, causal=bool(causal))
for _ in range(3):
    torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()
PY
