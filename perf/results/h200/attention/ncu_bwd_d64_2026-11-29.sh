#!/bin/bash
# Issue 15 (session 30): the head-dim-64 dK / dV kernel (2 x 8 x 8k x 64 non-causal, the third launch; forced to the
# sm_90a backward with TILEWRIGHT_CUDA_ATTN_BWD=1) under ncu --set full: where its warps stall (fwd+bwd 0.93x cuDNN
# with the c3 forward, its backward 1.68 vs 1.54 ms). Summarise with ncu_stalls_summary.py.
export PYTHONPATH=$PWD/src
cat > /tmp/bwd.py <<'PY'
import torch, tilewright
B, H, S, D = 2, 8, 8192, 64
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
o = tilewright.flash_attention(q, k, v, causal=False, backend="cuda")
for _ in range(3):
    torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()
PY
TILEWRIGHT_ATEN_BELOW=0 TILEWRIGHT_CUDA_ATTN_BWD=1 python /tmp/bwd.py && echo "built"
timeout 170 ncu --set full --import-source yes --kernel-name regex:tw_attn_bwd_dkdv --launch-skip 2 --launch-count 1 \
  -f -o /tmp/bwd_full env TILEWRIGHT_ATEN_BELOW=0 TILEWRIGHT_CUDA_ATTN_BWD=1 python /tmp/bwd.py > $OUT/ncu_run.txt 2>&1; echo "ncu rc=$?"
ncu -i /tmp/bwd_full.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu -i /tmp/bwd_full.ncu-rep --page source --csv > $OUT/ncu_source_sass.csv 2>&1
ls -la $OUT; head -c 600 $OUT/ncu_source_sass.csv; grep -A30 "Warp State Statistics" $OUT/ncu_details.txt | head -40
