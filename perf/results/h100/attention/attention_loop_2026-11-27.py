"""Why tilewright's attention fwd+bwd in a loop takes ~0.5-1 ms more than its kernels: torch profiler + cProfile."""
import cProfile, pstats, io, time, torch, torch.nn.functional as F
import tilewright
from tilewright.bench.common import loop_ms_alternating
dev, dt = "cuda", torch.bfloat16
for B, Hq, Hkv, S, D, causal in [(8, 16, 4, 2048, 128, True), (1, 28, 4, 3000, 96, True)]:
    q = torch.randn(B, S, Hq, D, device=dev, dtype=dt).transpose(1, 2).requires_grad_()
    k = torch.randn(B, S, Hkv, D, device=dev, dtype=dt).transpose(1, 2).requires_grad_()
    v = torch.randn(B, S, Hkv, D, device=dev, dtype=dt).transpose(1, 2).requires_grad_()
    do = torch.randn(B, S, Hq, D, device=dev, dtype=dt).transpose(1, 2)
    def step():
        q.grad = k.grad = v.grad = None
        tilewright.flash_attention(q, k, v, causal=causal).backward(do)
    for _ in range(5): step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20): step()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(f"B{B} {Hq}/{Hkv} S{S} D{D}: host {1e3*(t1-t0)/20:.3f} ms/step, wall {1e3*(t2-t0)/20:.3f}", flush=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(10): step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=70), flush=True)
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=12, max_name_column_width=70), flush=True)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(20): step()
    torch.cuda.synchronize(); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(25); print(s.getvalue()[:6000], flush=True)
