# The script behind the log of the same name, as run on 2026-11-26 (fold=True calls the folded-weight variant, removed
# since: launch_rmsnorm_gemm(x, None, ...) now raises TypeError).
import os, sys, torch, triton
os.environ.setdefault("TILEWRIGHT_AUTOTUNE", "0")
from tilewright.triton_kernels.rmsnorm_gemm import launch_rmsnorm_gemm
from tilewright.autotune.space import _config, default_gemm_config
import torch.nn.functional as F

def run(M, N, K, dtype, cfg=None, use_tma=None, fold=False, seed=0, gscale=1.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
    g = ((1 + 0.5 * torch.randn(K, device="cuda", generator=gen)) * gscale).to(dtype)
    w = (torch.randn(N, K, device="cuda", generator=gen) / K ** .5).to(dtype)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    rstd = torch.empty(M, device="cuda")
    b = (w * g).t() if fold else w.t()
    launch_rmsnorm_gemm(x, None if fold else g, b, out, rstd, 1e-5, config=cfg, use_tma=use_tma)
    torch.cuda.synchronize()
    ref = F.linear(F.rms_norm(x.double(), (K,), g.double(), 1e-5), w.double())
    same = F.linear(F.rms_norm(x, (K,), g, 1e-5), w).double()
    err = (out.double() - ref).abs()
    bad = (err > 20 * (same - ref).abs().max() + 1e-2)
    rows = bad.any(1).nonzero().flatten()
    cols = bad.any(0).nonzero().flatten()
    return f"err {err.max().item():.3g} same {(same-ref).abs().max().item():.3g} badrows {rows.numel()} [{rows[:3].tolist()}..{rows[-3:].tolist()}] badcols {cols.numel()} [{cols[:3].tolist()}..]"

cfgs = {"default": None, "128x256s3e4": _config(128, 256, 64, 8, 3, split=4), "128x128s4e2": _config(128, 128, 64, 8, 4, split=2),
        "128x128ptr": _config(128, 128, 64, 8, 4, split=2, tma=False), "64x64x128": _config(64, 64, 128, 4, 4),
        "128x256flat": _config(128, 256, 64, 8, 3, split=4, flatten=True), "128x256nonpers": _config(128, 256, 64, 8, 3, split=4, persistent=False)}
for (M, N, K) in [(381, 255, 1024), (381, 256, 1024), (512, 256, 1024), (514, 7, 1024), (2036, 127, 2048), (258, 257, 128)]:
    for dtype in (torch.float16, torch.bfloat16):
        for name, cfg in cfgs.items():
            for fold in (False, True):
                try:
                    r = run(M, N, K, dtype, cfg, fold=fold)
                except Exception as e:
                    r = f"ERR {type(e).__name__}: {str(e)[:100]}"
                print(f"{M}x{N}x{K} {str(dtype)[6:]} {name:14s} fold={fold}: {r}", flush=True)
