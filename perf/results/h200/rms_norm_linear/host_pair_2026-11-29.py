"""Host time to queue one forward + backward (GPU held busy first, no sync inside) of the norm + projection, three
ways: tilewright.rms_norm_linear; F.rms_norm + tilewright.linear; F.rms_norm + F.linear (torch). Then cProfile of the
first two with autograd's worker threads off (the backward on the calling thread). Issue 18's FSDP2 step: the fused
op's fwd + bwd cost ~0.5 ms more host than the unfused pair with tilewright's GEMM (fsdp_diag_2026-11-29)."""
import cProfile, io, pstats, statistics, sys, time
import torch, torch.nn.functional as F
import tilewright
dev = torch.device("cuda")
M, K = 4096, 2048
busy = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)


def make(N):
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
    g = (1 + 0.1 * torch.randn(K, device=dev, dtype=torch.bfloat16)).requires_grad_()
    w = (torch.randn(N, K, device=dev, dtype=torch.bfloat16) / K ** 0.5).requires_grad_()
    dy = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
    return x, g, w, dy


def fused(x, g, w, dy):
    tilewright.rms_norm_linear(x, g, w, None, eps=1e-6).backward(dy)


def unfused_tw(x, g, w, dy):
    tilewright.linear(F.rms_norm(x, (K,), g, 1e-6), w).backward(dy)


def unfused_torch(x, g, w, dy):
    F.linear(F.rms_norm(x, (K,), g, 1e-6), w).backward(dy)


def clear(args):
    for t in args[:3]:
        t.grad = None


def host_us(fn, args, n=20, rounds=5):
    vals = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        for _ in range(12):
            busy @ busy
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args); clear(args)
        vals.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(vals)


print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; host us per fwd+bwd call (GPU busy), M {M} K {K}")
for N in (3072, 11264):
    args = make(N)
    for fn in (fused, unfused_tw, unfused_torch):
        for _ in range(3):
            fn(*args); clear(args)
    torch.cuda.synchronize()
    res = {fn.__name__: [] for fn in (fused, unfused_tw, unfused_torch)}
    for _ in range(3):
        for fn in (fused, unfused_tw, unfused_torch):
            res[fn.__name__].append(host_us(fn, args))
    print(f"N {N}: " + ", ".join(f"{k} {statistics.median(v):.1f} us" for k, v in res.items()), flush=True)
torch.autograd.set_multithreading_enabled(False)
args = make(3072)
for fn in (fused, unfused_tw):
    for _ in range(3):
        fn(*args); clear(args)
    torch.cuda.synchronize()
    for _ in range(12):
        busy @ busy
    pr = cProfile.Profile(); pr.enable()
    for _ in range(20):
        fn(*args); clear(args)
    pr.disable(); torch.cuda.synchronize()
    print(f"===== cProfile {fn.__name__} (20 calls, single-threaded autograd)")
    for key, n in (("tottime", 30), ("cumulative", 45)):
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats(key).print_stats(n); print(s.getvalue()[-9000:], flush=True)
