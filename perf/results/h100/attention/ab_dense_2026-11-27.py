"""Dense attention rows through the public op (router's pick), fwd and fwd+bwd, with cuDNN in the same process:
run once with the old tree's PYTHONPATH and once with the new one to see what the band code costs the dense path."""
import os, sys
import torch, triton
import torch.nn.functional as F
import tilewright
from torch.nn.attention import sdpa_kernel, SDPBackend
os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
tag = sys.argv[1]
ROWS = ((2, 16, 16, 8192, 128, True), (2, 16, 16, 8192, 128, False), (4, 32, 8, 2048, 128, True),
        (2, 8, 8, 8192, 64, False), (1, 28, 4, 3000, 96, True), (2, 16, 16, 4096, 256, True))
if len(sys.argv) > 2:
    ROWS = [ROWS[int(i)] for i in sys.argv[2].split(",")]
for (B, Hq, Hkv, S, D, causal) in ROWS:
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    kk = k.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()
    vv = v.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()
    def fb(fn, *args):
        def run():
            o = fn(*args)
            torch.autograd.grad(o, args, do)
        return run
    def fwd(fn, *args):
        def run():
            with torch.no_grad():
                fn(*args)
        return run
    tw = lambda q, k, v: tilewright.flash_attention(q, k, v, causal=causal)
    sd = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    t = [triton.testing.do_bench(f(tw, q, k, v), warmup=25, rep=300, return_mode="median") for f in (fwd, fb)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        c = [triton.testing.do_bench(f(sd, q, kk, vv), warmup=25, rep=300, return_mode="median") for f in (fwd, fb)]
    print(f"{tag} B{B} {Hq}/{Hkv} S{S} D{D} causal={int(causal)}: fwd {t[0]:.4f} ms ({c[0] / t[0]:.3f}x cuDNN) "
          f"fwd+bwd {t[1]:.4f} ms ({c[1] / t[1]:.3f}x cuDNN)", flush=True)
