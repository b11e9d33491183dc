"""swiglu / apply_rotary vs the eager torch formulas and torch.compile of them, Llama layer sizes (B8 S2048 and
B1 S512; FFN 5632, 16/4 heads of 128), bf16, CUDA-graph timed, providers interleaved, cold L2. fwd and fwd+bwd."""
import sys, torch, torch.nn.functional as F
import tilewright
from tilewright.bench.common import graph_ms_alternating, environment

dev, dt = "cuda", torch.bfloat16
print(environment() if callable(environment) else "", flush=True)
def rope_torch(x, cos, sin):
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    h = x.shape[-1] // 2
    return x * c + torch.cat([-x[..., h:], x[..., :h]], -1) * s
def swiglu_torch(gu):
    g, u = gu.chunk(2, -1)
    return F.silu(g) * u
rows = []
for B, S in ((8, 2048), (1, 512)):
    M = B * S
    gu = torch.randn(M, 2 * 5632, device=dev, dtype=dt, requires_grad=True)
    dy = torch.randn(M, 5632, device=dev, dtype=dt)
    qkv = torch.randn(B, S, 24, 128, device=dev, dtype=dt)
    ang = torch.outer(torch.arange(S, device=dev).float(), 1.0 / 10000 ** (torch.arange(0, 128, 2, device=dev) / 128))
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos().to(dt), ang.sin().to(dt)
    qk = qkv[:, :, :20].detach().requires_grad_()
    dq = torch.randn(B, S, 20, 128, device=dev, dtype=dt)
    sw_c = torch.compile(swiglu_torch)
    ro_c = torch.compile(rope_torch)
    def fwd(f, x, *a):
        def run():
            with torch.no_grad():
                f(x, *a)
        return run
    def fb(f, x, g, *a):
        def run():
            x.grad = None
            f(x, *a).backward(g)
        return run
    for what, provs in (
        ("swiglu fwd", {"torch": fwd(swiglu_torch, gu), "compile": fwd(sw_c, gu), "tilewright": fwd(tilewright.swiglu, gu)}),
        ("swiglu fwd+bwd", {"torch": fb(swiglu_torch, gu, dy), "compile": fb(sw_c, gu, dy), "tilewright": fb(tilewright.swiglu, gu, dy)}),
        ("rope qk fwd", {"torch": fwd(rope_torch, qk, cos, sin), "compile": fwd(ro_c, qk, cos, sin), "tilewright": fwd(tilewright.apply_rotary, qk, cos, sin)}),
        ("rope qk fwd+bwd", {"torch": fb(rope_torch, qk, dq, cos, sin), "compile": fb(ro_c, qk, dq, cos, sin), "tilewright": fb(tilewright.apply_rotary, qk, dq, cos, sin)}),
    ):
        ms = graph_ms_alternating(list(provs.values()))
        line = f"B{B} S{S} {what:16s} " + "  ".join(f"{k} {v*1000:8.1f} us" for k, v in zip(provs, ms)) + \
            f"  | tw/torch {ms[0]/ms[2]:.2f}x  tw/compile {ms[1]/ms[2]:.2f}x"
        print(line, flush=True)
        for k, v in zip(provs, ms):
            rows.append((B, S, what, k, v))
import csv
with open(sys.argv[1], "w", newline="") as f:
    w = csv.writer(f); w.writerow(["B", "S", "what", "provider", "median_ms"]); w.writerows(rows)
