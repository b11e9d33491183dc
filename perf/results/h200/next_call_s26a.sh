#!/bin/bash
# Session 26, one GPU: (1) ncu --set full of the dK / dV kernel after the statistics change (same launch as session
# 25's ncu_bwd_source_2026-11-28.sh: 2 x 16 x 8k x 128 causal, third launch), (2) the model bench (issue 14's
# headline) with this session's code, no max-autotune column.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
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
timeout 200 ncu --set full --import-source yes --kernel-name regex:tw_attn_bwd_dkdv --launch-skip 2 --launch-count 1 \
  -f -o /tmp/bwd_full env TILEWRIGHT_ATEN_BELOW=0 python /tmp/bwd.py > $OUT/ncu_run.txt 2>&1; echo "ncu rc=$?"
ncu -i /tmp/bwd_full.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu -i /tmp/bwd_full.ncu-rep --page source --csv 2>&1 | gzip > $OUT/ncu_source_sass.csv.gz
grep -E "Duration|Tensor|Issue Slots" $OUT/ncu_details.txt | head -6
timeout 330 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv > $OUT/model.log 2>&1; echo "model rc=$?"
grep -E "fwd |fwd\+bwd|done" $OUT/model.log | head -60
