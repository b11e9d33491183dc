"""Per-kernel GPU time of the attention backward through the op (torch.profiler), per dQ mode. Usage:
python bwd_kernels.py [b+atomic] [b+kernel] [b] [triton]"""
import os, sys
import torch
import tilewright
from torch.profiler import profile, ProfilerActivity
for (B, Hq, Hkv, S, D, causal) in ((2, 16, 16, 8192, 128, True), (8, 16, 4, 2048, 128, True), (2, 8, 8, 8192, 64, False)):
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    for spec in sys.argv[1:]:
        if spec == "triton":
            os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = "0"
        else:
            os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = "1"
            os.environ["TILEWRIGHT_CUDA_ATTN_BWD_VARIANT"] = spec.split("+")[0]
            os.environ["TILEWRIGHT_CUDA_ATTN_BWD_DQ"] = spec.split("+")[1] if "+" in spec else "triton"
        o = tilewright.flash_attention(q, k, v, causal=causal)
        for _ in range(3):
            torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
            torch.cuda.synchronize()
        parts = {}
        for e in prof.key_averages():
            if e.device_type.name == "CUDA" or getattr(e, "device_time_total", 0):
                t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
                if t:
                    parts[e.key[:60]] = t / 10 / 1000
        tot = sum(parts.values())
        print(f"B{B} {Hq}/{Hkv} S{S} D{D} causal={causal} {spec}: total {tot:.3f} ms | " +
              " | ".join(f"{k} {v:.3f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])), flush=True)
