"""Decode-row probe (128 x 4096 x 4096 and friends): cuBLAS, the router's linear, every split-K / small tile Triton
config forced, eager and compiled rms_norm + linear, the row sum-of-squares pass."""
import itertools, torch, torch.nn.functional as F, triton
import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.triton_kernels import gemm as tg
from tilewright.autotune import space
from tilewright.triton_kernels.rmsnorm_gemm import launch_row_sumsq
EPS = 1e-6
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
pair = lambda x, g, w: F.linear(F.rms_norm(x, (x.shape[-1],), g, EPS), w)
cpair = torch.compile(pair)
for M, N, K in [(128, 4096, 4096), (64, 4096, 4096), (128, 14336, 4096), (16, 4096, 4096), (3000, 5120, 5120)]:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ss = torch.empty(M, device="cuda")
    cfgs = [c for c in space.gemm_configs() if c.kwargs.get("SPLIT_K", 1) > 1 or c.kwargs["BLOCK_M"] <= 64]
    cfgs = space.prune_gemm_configs(cfgs, M, N, K, 2, 2, True, smem_limit=tg._smem_limit(x.device), use_tma=True,
                                    periodic_residual=False, precise_acc=False, fallback=False)
    base = {"cublas": lambda: F.linear(x, w), "tw_linear": lambda: tilewright.linear(x, w),
            "eager_pair": lambda: pair(x, g, w), "compiled_pair": lambda: cpair(x, g, w),
            "tw_rms_linear": lambda: tilewright.rms_norm_linear(x, g, w, eps=EPS),
            "sumsq_pass": lambda: launch_row_sumsq(x, ss)}
    with torch.no_grad():
        for _ in range(3):
            cpair(x, g, w)
        ms = dict(zip(base, graph_ms_alternating(list(base.values()))))
        print(f"{M}x{N}x{K}: " + "  ".join(f"{k} {v * 1e3:.1f}us" for k, v in ms.items()), flush=True)
        res = []
        for c in cfgs:
            try:
                fn = lambda c=c: tg.launch_gemm(x, w.t(), out, config=c)
                fn(); torch.cuda.synchronize()
                err = (out.float() - F.linear(x, w).float()).abs().max().item()
                t = graph_ms_alternating([fn, base["cublas"]])
                res.append((t[0] / t[1], t[0] * 1e3, err, str(c.kwargs)))
            except Exception as e:
                print("  fail", c.kwargs, type(e).__name__, str(e)[:100])
        for r in sorted(res)[:8]:
            print(f"   /cublas {r[0]:.3f} {r[1]:.1f}us err {r[2]:.3g} {r[3]}", flush=True)
