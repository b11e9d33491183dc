import os, torch
os.environ.setdefault("TILEWRIGHT_AUTOTUNE", "0")
from tilewright.triton_kernels.rmsnorm_gemm import launch_rmsnorm_gemm
from tilewright.autotune.space import _config
import torch.nn.functional as F
cfgs = {"default": None, "128x128s4e2": _config(128, 128, 64, 8, 4, split=2), "128x128ptr": _config(128, 128, 64, 8, 4, split=2, tma=False),
        "128x256s3e4": _config(128, 256, 64, 8, 3, split=4)}
bad = 0; n = 0
for (M, N, K) in [(381, 255, 1024), (381, 256, 1024), (2036, 127, 2048), (514, 7, 1024), (1025, 4099, 1024), (1280, 129, 256), (4096, 4096, 4096)]:
  for dtype in (torch.float16, torch.bfloat16):
    for name, cfg in cfgs.items():
      for seed in range(3):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
        g = ((1 + 0.5 * torch.randn(K, device="cuda", generator=gen)) * (3.0 if seed % 2 else 1.0)).to(dtype)
        w = (torch.randn(N, K, device="cuda", generator=gen) / K ** .5).to(dtype)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype); rstd = torch.empty(M, device="cuda")
        launch_rmsnorm_gemm(x, g, w.t(), out, rstd, 1e-5, config=cfg)
        torch.cuda.synchronize()
        ref = F.linear(F.rms_norm(x.double(), (K,), g.double(), 1e-5), w.double())
        same = F.linear(F.rms_norm(x, (K,), g, 1e-5), w).double()
        err = (out.double() - ref).abs().max().item(); base = (same - ref).abs().max().item()
        n += 1
        if not err <= 2 * base + 1e-3 * ref.abs().max().item():
            bad += 1
            print(f"BAD {M}x{N}x{K} {dtype} {name} seed {seed}: err {err:.3g} torch {base:.3g}", flush=True)
print(f"diag4: {bad} bad of {n}")
