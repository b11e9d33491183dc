"""Issue 15's hdim-96 rows, forward and forward + backward through the public op (router's pick, CUDA backward on
by default where it wins) vs cuDNN and FA2 (SDPA flash, K/V repeated for GQA) in the same process."""
import os
import torch, triton
import torch.nn.functional as F
import tilewright
from torch.nn.attention import sdpa_kernel, SDPBackend
os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"  # (these rows are over the limit anyway)
for (B, Hq, Hkv, S, D, causal) in ((1, 28, 4, 3000, 96, True), (2, 16, 16, 4096, 96, True), (8, 16, 4, 2048, 96, True),
                                   (2, 16, 16, 8192, 128, True)):
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    kk = k.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()
    vv = v.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()
    res = {}
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
    for name, be, args in (("tilewright", None, (q, k, v)), ("cudnn", SDPBackend.CUDNN_ATTENTION, (q, kk, vv)),
                           ("fa2", SDPBackend.FLASH_ATTENTION, (q, kk, vv))):
        fn = tw if be is None else sd
        try:
            if be is None:
                res[name] = [triton.testing.do_bench(f(fn, *args), warmup=25, rep=200, return_mode="median")
                             for f in (fwd, fb)]
            else:
                with sdpa_kernel(be):
                    res[name] = [triton.testing.do_bench(f(fn, *args), warmup=25, rep=200, return_mode="median")
                                 for f in (fwd, fb)]
        except RuntimeError as e:
            res[name] = [float("nan")] * 2
    t, c, f2 = res["tilewright"], res["cudnn"], res["fa2"]
    print(f"B{B} {Hq}/{Hkv} S{S} D{D} causal={causal}: fwd tw {t[0]:.3f} ms ({c[0] / t[0]:.2f}x cuDNN, "
          f"{f2[0] / t[0]:.2f}x FA2) | fwd+bwd tw {t[1]:.3f} ms ({c[1] / t[1]:.2f}x cuDNN {c[1]:.3f}, "
          f"{f2[1] / t[1]:.2f}x FA2 {f2[1]:.3f})", flush=True)
