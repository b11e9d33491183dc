"""Session 16 call A: (1) the ViT GEMMs with their epilogues on every backend vs cuBLAS + torch's unfused epilogue;
(2) attention fwd / fwd+bwd: tilewright (router) vs SDPA (its default = cuDNN here) vs SDPA forced flash, and
whether SDPA's default really is cuDNN on these shapes."""
import sys, time, torch, torch.nn.functional as F
import tilewright
from tilewright import router
from tilewright.bench.common import graph_ms_alternating, loop_ms_alternating

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
print(torch.cuda.get_device_name(), torch.__version__, torch.backends.cudnn.version(), flush=True)

def route_of(fn):
    log = []
    orig = router._decide
    def spy(op, tensors, backend, honor_forced=True):
        d = orig(op, tensors, backend, honor_forced)
        log.append((op, d.backend, list(d.reasons)[-1][:140]))
        return d
    router._decide = spy
    try:
        fn()
    finally:
        router._decide = orig
    return log

M = 16384
rows = [  # name, K, N, bias, act, residual kind
    ("patch+pos", 768, 1024, True, None, "pos"),
    ("qkv", 1024, 3072, True, None, None),
    ("proj+res", 1024, 1024, True, None, "full"),
    ("fc1+gelu", 1024, 4096, True, "gelu", None),
    ("fc2+res", 4096, 1024, True, None, "full"),
    ("fc2+res nobias", 4096, 1024, False, None, "full"),
    ("llama wo+res", 2048, 2048, False, None, "full"),
    ("llama down+res", 5632, 2048, False, None, "full"),
]
print("== GEMM epilogues (us, CUDA-graph, interleaved, cold L2)", flush=True)
for name, K, N, has_bias, act, res in rows:
    x = torch.randn(M, K, device=dev, dtype=dt)
    w = torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5
    b = torch.randn(N, device=dev, dtype=dt) if has_bias else None
    r = None
    if res == "full":
        r = torch.randn(8, 2048, N, device=dev, dtype=dt)
    elif res == "pos":
        r = torch.randn(2048, N, device=dev, dtype=dt)
    x3 = x.view(8, 2048, K)
    def torch_unfused():
        z = F.linear(x3, w, b)
        if act: z = F.gelu(z)
        return z + r if r is not None else z
    fns = {"cublas_plain": lambda: F.linear(x, w), "torch_unfused": torch_unfused}
    for be in (None, "triton", "cuda"):
        f = lambda be=be: tilewright.linear(x3, w, b, residual=r, activation=act, backend=be)
        try:
            ref = torch_unfused().float(); got = f().float()
            err = ((got - ref).norm() / ref.norm()).item()
            fns[f"tw_{be or 'router'}"] = f
            if be is None:
                print(f"  {name}: route {route_of(f)[-1:]} relerr {err:.2e}", flush=True)
        except Exception as e:
            print(f"  {name}: {be} not eligible: {str(e)[:120]}", flush=True)
    ms = graph_ms_alternating(list(fns.values()))
    base = ms[0]
    print(f"{name:16s} M{M} N{N} K{K} " + " ".join(f"{k} {m*1e3:.1f} ({m/base:.3f}x plain)" for k, m in zip(fns, ms)), flush=True)

print("== attention (ms, loop timing, interleaved)", flush=True)
from torch.nn.attention import sdpa_kernel, SDPBackend
att = [(8, 16, 16, 2048, 64, False), (8, 16, 4, 2048, 128, True), (2, 16, 16, 8192, 128, True),
       (2, 16, 16, 8192, 128, False), (1, 28, 4, 3000, 96, True), (2, 8, 8, 8192, 64, False),
       (2, 8, 8, 8192, 64, True), (2, 16, 16, 4096, 256, True), (1, 16, 16, 512, 64, False), (4, 32, 8, 2048, 128, True)]
for B, Hq, Hkv, S, D, causal in att:
    # (B, S, H, D) storage as models have it
    q = torch.randn(B, S, Hq, D, device=dev, dtype=dt).transpose(1, 2).requires_grad_()
    k = torch.randn(B, S, Hkv, D, device=dev, dtype=dt).transpose(1, 2).requires_grad_()
    v = torch.randn(B, S, Hkv, D, device=dev, dtype=dt).transpose(1, 2).requires_grad_()
    do = torch.randn(B, S, Hq, D, device=dev, dtype=dt).transpose(1, 2)
    gqa = Hq != Hkv
    def tw(): return tilewright.flash_attention(q, k, v, causal=causal)
    def sd(): return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    def sd_cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    def sd_flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    provs = {"tw": tw, "sdpa": sd, "sdpa_cudnn": sd_cudnn, "sdpa_flash": sd_flash}
    ok = {}
    for n, f in provs.items():
        try:
            f(); ok[n] = f
        except Exception as e:
            print(f"  {n} fails: {str(e)[:150]}", flush=True)
    # which kernel does plain SDPA run?
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        sd().backward(do); torch.cuda.synchronize()
    kn = sorted({e.name[:60] for e in prof.events() if "sdpa" in e.name or "flash" in e.name or "fmha" in e.name})
    q.grad = k.grad = v.grad = None
    fw = loop_ms_alternating([(lambda f=f: f()) for f in ok.values()])
    def fb(f):
        def g():
            q.grad = k.grad = v.grad = None
            f().backward(do)
        return g
    fbm = loop_ms_alternating([fb(f) for f in ok.values()])
    names = list(ok)
    i0 = names.index("sdpa") if "sdpa" in names else 0
    print(f"B{B} {Hq}/{Hkv} S{S} D{D} causal={int(causal)} fwd " + " ".join(f"{n} {m:.3f}" for n, m in zip(names, fw))
          + f" | tw/sdpa {fw[i0]/fw[0]:.3f}x  || fwd+bwd " + " ".join(f"{n} {m:.3f}" for n, m in zip(names, fbm))
          + f" | tw/sdpa {fbm[i0]/fbm[0]:.3f}x | sdpa kernels {kn[:3]}", flush=True)
