import os, sys, torch
import tilewright
from tilewright._record import recording
EPS = 1e-6
# 1. what the two-pass call records (the failing replay test), no grad, env 0
os.environ["TILEWRIGHT_RMS_FOLDED"] = "0"
g_ = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(4096, 4000, device="cuda", generator=g_).bfloat16()
w = torch.randn(4096, 4000, device="cuda", generator=g_).bfloat16()
g = torch.randn(4000, device="cuda", generator=g_).bfloat16()
b = (0.1 * torch.randn(4096, device="cuda")).bfloat16()
for i in range(2):
    with recording() as L:
        tilewright.rms_norm_linear(x, g, w, b, eps=EPS)
    print("recorded:", [(type(bd).__name__, list(r), *wr) for bd, r, *wr in L], flush=True)
import importlib
rms = importlib.import_module("tilewright.ops.rms_norm_linear")
print("replays:", [(type(r).__name__, len(getattr(r, "bounds", ()))) for r in rms._replays.values()], flush=True)
# 2. host profile of a training step on the folded path (weights train: folded every call)
os.environ["TILEWRIGHT_RMS_FOLDED"] = ""
from torch.profiler import profile, ProfilerActivity
M, N, K = 16384, 3072, 2048
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, requires_grad=True)
g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16().requires_grad_()
w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16().requires_grad_()
dy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
print("folded applies:", rms.folded_applies(x.detach(), N, w, g), flush=True)
for _ in range(3):
    torch.autograd.backward(tilewright.rms_norm_linear(x, g, w, eps=EPS), dy)
torch.cuda.synchronize()
import time
t = time.perf_counter()
for _ in range(10):
    y = tilewright.rms_norm_linear(x, g, w, eps=EPS)
t1 = time.perf_counter()
torch.cuda.synchronize()
print(f"host per forward call {(t1 - t) / 10 * 1e6:.0f} us", flush=True)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(5):
        torch.autograd.backward(tilewright.rms_norm_linear(x, g, w, eps=EPS), dy)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60), flush=True)
