#!/bin/bash
# Issue 15 (session 25): where the dK / dV kernel's warps stall, instruction by instruction - ncu --set full on one
# launch (2 x 16 x 8k x 128 causal, the third launch), then the SASS source page (per-instruction stall samples) and
# the details page as text under $OUT. Session 24's sections: tensor pipe 51.6%, 0.50 eligible warps a scheduler.
export PYTHONPATH=$PWD/src
cat > /tmp/bwd.py <<'PY'
import torch, tilewright
B, H, S, D = 2, 16, 8192, 128
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
o = tilewright.flash_attention(q, k, v, causal=True)
for _ in range(3):
    torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()
PY
TILEWRIGHT_ATEN_BELOW=0 python /tmp/bwd.py && echo "built"
timeout 300 ncu --set full --import-source yes --kernel-name regex:tw_attn_bwd_dkdv --launch-skip 2 --launch-count 1 \
  -f -o /tmp/bwd_full env TILEWRIGHT_ATEN_BELOW=0 python /tmp/bwd.py > $OUT/ncu_run.txt 2>&1; echo "ncu rc=$?"
ncu -i /tmp/bwd_full.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu -i /tmp/bwd_full.ncu-rep --page source --csv > $OUT/ncu_source_sass.csv 2>&1
ls -la $OUT; head -c 600 $OUT/ncu_source_sass.csv; grep -A30 "Warp State Statistics" $OUT/ncu_details.txt | head -40
