"""rms_norm_linear forward + backward: kernel time per step, tilewright vs the eager pair (torch.profiler, 10 steps
after warm-up), and wall per step of a synchronized loop; H200."""
import time, torch, torch.nn.functional as F, tilewright
from torch.profiler import profile, ProfilerActivity
dev, dt = "cuda", torch.bfloat16
torch.manual_seed(0)
for M, N, K in ((8192, 4096, 4096), (3000, 5120, 5120), (16384, 3072, 2048)):
    x = torch.randn(M, K, device=dev, dtype=dt, requires_grad=True)
    g = (torch.rand(K, device=dev, dtype=dt) + 0.5).requires_grad_()
    w = (torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5).requires_grad_()
    dy = torch.randn(M, N, device=dev, dtype=dt)
    fns = {"tilewright": lambda: tilewright.rms_norm_linear(x, g, w).backward(dy),
           "eager": lambda: F.linear(F.rms_norm(x, (K,), g, 1e-6), w).backward(dy)}
    for name, fn in fns.items():
        for _ in range(5): fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20): fn()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / 20 * 1e3
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10): fn()
            torch.cuda.synchronize()
        ev = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        total = sum(e.self_device_time_total for e in ev) / 10 / 1e3
        print(f"== {M}x{N}x{K} {name}: wall {wall:.3f} ms/step, kernels {total:.3f} ms/step")
        for e in sorted(ev, key=lambda e: -e.self_device_time_total)[:8]:
            print(f"   {e.self_device_time_total / 10 / 1e3:8.3f} ms x{e.count // 10:2d}  {e.key[:110]}")
