# The script behind the log of the same name, as run on 2026-11-26 (fold=True calls the folded-weight variant, removed
# since: launch_rmsnorm_gemm(x, None, ...) now raises TypeError).
import os, torch
os.environ.setdefault("TILEWRIGHT_AUTOTUNE", "0")
from tilewright.triton_kernels.rmsnorm_gemm import launch_rmsnorm_gemm
from tilewright.autotune.space import _config
import torch.nn.functional as F
cfgs = {"128x256s3e4": _config(128, 256, 64, 8, 3, split=4), "128x128ptr": _config(128, 128, 64, 8, 4, split=2, tma=False),
        "128x256s3e4-1prog": _config(128, 256, 64, 8, 3, split=4), "128x256s2": _config(128, 256, 64, 8, 2, split=4),
        "128x256s3e1": _config(128, 256, 64, 8, 3, split=1)}
for (M, N, K) in [(381, 255, 1024), (2036, 127, 2048)]:
  for dtype in (torch.float16, torch.bfloat16):
    for name, cfg in cfgs.items():
      for fold in (False, True):
        gen = torch.Generator(device="cuda").manual_seed(1)
        x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
        g = (1 + 0.5 * torch.randn(K, device="cuda", generator=gen)).to(dtype)
        w = (torch.randn(N, K, device="cuda", generator=gen) / K ** .5).to(dtype)
        worst = (0, 0, 0)
        for rep in range(5):
            out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype); rstd = torch.full((M,), float("nan"), device="cuda")
            launch_rmsnorm_gemm(x, None if fold else g, ((w * g) if fold else w).t(), out, rstd, 1e-5, config=cfg,
                                num_programs=1 if name.endswith("1prog") else None)
            torch.cuda.synchronize()
            rt = torch.rsqrt(x.double().pow(2).mean(1) + 1e-5)
            ref = F.linear(F.rms_norm(x.double(), (K,), g.double(), 1e-5), w.double())
            rerr = ((rstd.double() - rt).abs() / rt).max().item()
            fixed = out.double() * (rt / rstd.double())[:, None]
            err = (out.double() - ref).abs().max().item(); ferr = (fixed - ref).abs().max().item()
            worst = max(worst, (err, rerr, ferr))
        print(f"{M}x{N}x{K} {str(dtype)[6:]} {name:18s} fold={fold}: out err {worst[0]:.3g}  rstd rel err {worst[1]:.3g}  out err with true rstd {worst[2]:.3g}", flush=True)
