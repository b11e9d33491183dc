"""Op-level A/B after the session-21 changes (H200 table, decode cuBLAS routes, the -roov folded forward, decode two
passes): rms_norm_linear (eager pair, compiled pair, the op, bare cuBLAS) and linear (router vs cuBLAS, plain and with
bias+gelu) - CUDA graphs, L2 flushed, interleaved. Also the new small-M tiles with a bias+gelu+residual epilogue."""
import sys, torch, torch.nn.functional as F, triton
import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.autotune.space import _config
from tilewright.triton_kernels import gemm as tg
EPS = 1e-6
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
# 1. the new tiles with the full epilogue, vs fp32 torch
for (bm, bn, bk, st) in [(16, 32, 256, 6), (16, 128, 128, 4), (64, 32, 128, 8), (64, 64, 128, 6)]:
    for tma in (False, True):
        M, N, K = 100, 1000, 1100
        x = torch.randn(M, K, device="cuda").bfloat16(); w = (torch.randn(N, K, device="cuda") / K ** .5).bfloat16()
        bias = torch.randn(N, device="cuda").bfloat16(); res = torch.randn(1, M, N, device="cuda").bfloat16()
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        tg.launch_gemm(x, w.t(), out, bias=bias, residual=res, activation=2, config=_config(bm, bn, bk, 4, st, persistent=False, tma=tma))
        ref = F.gelu(x.float() @ w.float().t() + bias.float()) + res[0].float()
        own = (F.gelu(F.linear(x, w, bias)) + res[0]).float()
        e, et = (out.float() - ref).abs().max().item(), (own - ref).abs().max().item()
        print(f"tile {bm}x{bn}x{bk} s{st} tma={tma}: max err {e:.3g} (torch bf16 {et:.3g}) {'OK' if e <= 2 * et + 1e-2 else 'BAD'}", flush=True)
pair = lambda x, g, w: F.linear(F.rms_norm(x, (x.shape[-1],), g, EPS), w)
cpair = torch.compile(pair)
rows = [(8192, 4096, 4096), (8192, 6144, 4096), (2048, 14336, 4096), (16384, 3072, 2048), (16384, 11264, 2048),
        (3000, 5120, 5120), (128, 4096, 4096), (64, 4096, 4096), (16, 4096, 4096), (128, 14336, 4096)]
print("rms_norm_linear (no_grad, eager calls; ratios: eager / op, compiled / op, op / bare cuBLAS)", flush=True)
for M, N, K in rows:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
    with torch.no_grad():
        for _ in range(3):
            cpair(x, g, w); tilewright.rms_norm_linear(x, g, w, eps=EPS)
        y = tilewright.rms_norm_linear(x, g, w, eps=EPS)
        ref = (x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + EPS) * g.double()) @ w.double().t()
        e_op = ((y.double() - ref).norm() / ref.norm()).item(); e_t = ((pair(x, g, w).double() - ref).norm() / ref.norm()).item()
        t = graph_ms_alternating([lambda: pair(x, g, w), lambda: cpair(x, g, w),
                                  lambda: tilewright.rms_norm_linear(x, g, w, eps=EPS), lambda: F.linear(x, w)])
    print(f"{M}x{N}x{K}: eager {t[0]*1e3:.1f} compiled {t[1]*1e3:.1f} op {t[2]*1e3:.1f} bare {t[3]*1e3:.1f} us | "
          f"vs eager {t[0]/t[2]:.3f} vs compiled {t[1]/t[2]:.3f} /bare {t[2]/t[3]:.3f} | rel err op {e_op:.2e} torch {e_t:.2e}", flush=True)
print("linear: router vs cuBLAS (plain; bias+gelu vs F.gelu(F.linear))", flush=True)
for M, N, K in [(1, 4096, 4096), (16, 4096, 4096), (32, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096),
                (128, 14336, 4096), (256, 4096, 4096), (128, 1024, 1024), (1100, 5000, 3000), (700, 2816, 1792), (4096, 4096, 4096)]:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16(); b = torch.randn(N, device="cuda").bfloat16()
    with torch.no_grad():
        t = graph_ms_alternating([lambda: F.linear(x, w), lambda: tilewright.linear(x, w),
                                  lambda: F.gelu(F.linear(x, w, b)), lambda: tilewright.linear(x, w, b, activation="gelu")])
    print(f"{M}x{N}x{K}: plain cublas {t[0]*1e3:.1f} tw {t[1]*1e3:.1f} ({t[0]/t[1]:.3f}) | bias+gelu torch {t[2]*1e3:.1f} tw {t[3]*1e3:.1f} ({t[2]/t[3]:.3f})", flush=True)
