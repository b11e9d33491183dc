"""Host time of rms_norm_linear / linear forward + backward at the FSDP layer's sizes (GPU held by a sleep kernel,
so only the host is timed), torch's unfused pair beside it; then cProfile of tilewright's backward."""
import cProfile, pstats, time, torch, torch.nn.functional as F, tilewright
dev = "cuda"; dt = torch.bfloat16
torch.manual_seed(0)
def host_us(fn, n=100):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e9))  # ~1 s of GPU: the queue never drains while the host runs
    t0 = time.perf_counter()
    for _ in range(n): fn()
    t = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return t
for M, K, N in ((4096, 2048, 2048), (4096, 2048, 5632), (4096, 5632, 2048)):
    x = torch.randn(M, K, device=dev, dtype=dt, requires_grad=True)
    g = (torch.rand(K, device=dev, dtype=dt) + 0.5).requires_grad_()
    w = (torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5).requires_grad_()
    dy = torch.randn(M, N, device=dev, dtype=dt)
    def tw():
        tilewright.rms_norm_linear(x, g, w).backward(dy)
    def th():
        F.linear(F.rms_norm(x, (K,), g, 1e-6), w).backward(dy)
    def twl():
        tilewright.linear(x, w).backward(dy)
    def thl():
        F.linear(x, w).backward(dy)
    def tw_fwd():
        return tilewright.rms_norm_linear(x, g, w)
    rows = {"tw rms_norm_linear fwd+bwd": tw, "torch rms_norm+linear fwd+bwd": th, "tw linear fwd+bwd": twl,
            "torch linear fwd+bwd": thl}
    for name, fn in rows.items():
        print(f"{M}x{N}x{K} {name:32s} host {host_us(fn):7.1f} us/call", flush=True)
    with torch.no_grad():
        print(f"{M}x{N}x{K} {'tw rms_norm_linear fwd no_grad':32s} host {host_us(tw_fwd):7.1f} us/call", flush=True)
    y = tilewright.rms_norm_linear(x, g, w)
    torch.cuda._sleep(int(2e9))
    pr = cProfile.Profile(); pr.enable()
    for _ in range(50):
        tilewright.rms_norm_linear(x, g, w).backward(dy)
    pr.disable(); torch.cuda.synchronize()
    print(f"===== cProfile {M}x{N}x{K} tilewright rms_norm_linear fwd+bwd x50")
    pstats.Stats(pr).sort_stats("tottime").print_stats(28)
    pstats.Stats(pr).sort_stats("cumulative").print_stats(28)
