"""Where the host goes in rms_norm_linear forward + backward at 3000x5120x5120 (host-bound there: wall 1.11 ms a
step against 0.80 ms of kernels): cProfile of STEPS steps between syncs, no sleep kernel. The session-22 run (the
_1440 output beside) used the default 100 steps, ~1,000 launches, which can fill the launch queue and block the host
(inflating its numbers); `STEPS=20` keeps the queue short (the next call's setting)."""
import cProfile, os, pstats, time, torch, tilewright
STEPS = int(os.environ.get("STEPS", "100"))
dev, dt = "cuda", torch.bfloat16
torch.manual_seed(0)
M, N, K = 3000, 5120, 5120
x = torch.randn(M, K, device=dev, dtype=dt, requires_grad=True)
g = (torch.rand(K, device=dev, dtype=dt) + 0.5).requires_grad_()
w = (torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5).requires_grad_()
dy = torch.randn(M, N, device=dev, dtype=dt)
def step():
    tilewright.rms_norm_linear(x, g, w).backward(dy)
def fwd():
    return tilewright.rms_norm_linear(x, g, w)
for _ in range(30): step()
torch.cuda.synchronize()
for name, fn in (("fwd+bwd", step), ("fwd", fwd)):
    t0 = time.perf_counter()
    for _ in range(STEPS): fn()
    t1 = time.perf_counter(); torch.cuda.synchronize(); t2 = time.perf_counter()
    print(f"{name}: host {(t1 - t0) / STEPS * 1e3:.3f} ms/step (queue), wall {(t2 - t0) / STEPS * 1e3:.3f} ms/step")
pr = cProfile.Profile(); pr.enable()
for _ in range(STEPS): step()
pr.disable(); torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(30)
pstats.Stats(pr).sort_stats("cumulative").print_stats(45)
