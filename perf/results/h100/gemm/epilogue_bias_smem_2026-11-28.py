"""Session 17: the sm_90a epilogue with the bias by cp.async into smem and the residual TMA load at kt / 2, against
the plain GEMM and cuBLAS (CUDA-graph, interleaved, cold L2); GELU on every CUDA variant (is a pingpong variant's
overlapped epilogue cheaper than the cooperative one's exposed one?)."""
import os, torch, torch.nn.functional as F
import tilewright
from tilewright.bench.common import graph_ms_alternating

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
M = 16384
rows = [("qkv bias", 1024, 3072, True, None, None), ("proj+res", 1024, 1024, True, None, "full"),
        ("fc1+gelu", 1024, 4096, True, "gelu", None), ("fc1 bias", 1024, 4096, True, None, None),
        ("fc2+res", 4096, 1024, True, None, "full"), ("llama wo+res", 2048, 2048, False, None, "full"),
        ("llama down+res", 5632, 2048, False, None, "full"), ("patch+pos", 768, 1024, True, None, "pos")]
VAR = "TILEWRIGHT_CUDA_GEMM_VARIANT"


def variant(v, fn):
    def f():
        os.environ[VAR] = v
        try:
            return fn()
        finally:
            del os.environ[VAR]
    return f


for name, K, N, has_bias, act, res in rows:
    x = torch.randn(8, 2048, K, device=dev, dtype=dt)
    w = torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5
    b = torch.randn(N, device=dev, dtype=dt) if has_bias else None
    r = torch.randn(8, 2048, N, device=dev, dtype=dt) if res == "full" else (
        torch.randn(2048, N, device=dev, dtype=dt) if res == "pos" else None)

    def torch_unfused():
        z = F.linear(x, w, b)
        if act: z = F.gelu(z)
        return z + r if r is not None else z
    ref = torch_unfused().float()
    fns = {"cublas_plain": lambda: F.linear(x, w), "torch_unfused": torch_unfused,
           "cuda_plain": lambda: tilewright.linear(x, w, backend="cuda")}
    for be in (None, "triton", "cuda"):
        fns[f"tw_{be or 'router'}"] = lambda be=be: tilewright.linear(x, w, b, residual=r, activation=act, backend=be)
    if act or name == "fc1 bias":
        for v in ("pp128x128s4", "pp128x128s5", "pp64x256s4", "coop256x128s3"):
            fns[f"cuda_{v}"] = variant(v, lambda: tilewright.linear(x, w, b, residual=r, activation=act, backend="cuda"))
            fns[f"plain_{v}"] = variant(v, lambda: tilewright.linear(x, w, backend="cuda"))
    for k, f in list(fns.items()):
        if k.startswith(("tw_", "cuda_")):
            err = ((f().float() - ref).norm() / ref.norm()).item()
            if err > 1e-2:
                print(f"  {name} {k}: WRONG rel err {err:.2e}", flush=True)
    ms = graph_ms_alternating(list(fns.values()))
    base = ms[0]
    print(f"{name:15s} M{M} N{N} K{K} " + " ".join(f"{k} {m*1e3:.1f} ({m/base:.3f}x)" for k, m in zip(fns, ms)),
          flush=True)
