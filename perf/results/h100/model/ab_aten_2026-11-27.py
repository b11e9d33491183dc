"""Model blocks: torch eager vs tilewright with the ATen route off (TILEWRIGHT_ATEN_BELOW=0) and on (default),
interleaved in one process (the variable is read per call: both routes' entries coexist in the replay caches)."""
import os, sys, time
import torch
from tilewright.bench import model
from tilewright.bench.common import loop_ms_alternating

def with_env(value, fn):
    def run():
        if value is None:
            os.environ.pop("TILEWRIGHT_ATEN_BELOW", None)
        else:
            os.environ["TILEWRIGHT_ATEN_BELOW"] = value
        return fn()
    return run

sizes = sys.argv[1:] or ["small", "prefill"]
for case in model.SUITES["default"]:
    if case.size not in sizes:
        continue
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x = model.make_input(case, "cuda", torch.bfloat16)
    # gradients of the route vs torch's: the route is torch's ops plus addmm fusions
    errs = {}
    for label, env in (("kernels", "0"), ("aten", None)):
        for m in (ref, ours):
            for p in m.parameters():
                p.grad = None
        xg = x.detach().clone().requires_grad_(x.requires_grad)
        with_env(env, lambda: ours(xg).float().sum().backward())()
        xr = x.detach().clone().requires_grad_(x.requires_grad)
        ref(xr).float().sum().backward()
        e = 0.0
        for (n, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters()):
            if p.grad is not None and q.grad is not None and p.grad.shape == q.grad.shape:
                e = max(e, ((p.grad.float() - q.grad.float()).abs().max() / q.grad.float().abs().max()).item())
        errs[label] = e
    for kind in ("fwd", "fwd+bwd"):
        if kind == "fwd":
            def step(m):
                with torch.no_grad():
                    m(x)
        else:
            def step(m):
                m(x).sum().backward()
        fns = [lambda: step(ref), with_env("0", lambda: step(ours)), with_env(None, lambda: step(ours))]
        t = loop_ms_alternating(fns, warmup_ms=50, rep_ms=400, repeats=9)
        os.environ.pop("TILEWRIGHT_ATEN_BELOW", None)
        print(f"{case.block}-{case.size} {kind:8s}: torch eager {t[0]:.3f} ms | tw kernels {t[1]:.3f} ms "
              f"({t[0] / t[1]:.3f}x) | tw aten route {t[2]:.3f} ms ({t[0] / t[2]:.3f}x) | grad rel diff vs torch: "
              f"kernels {errs['kernels']:.2e} aten {errs['aten']:.2e}", flush=True)
