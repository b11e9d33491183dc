import io, logging, re, torch, tilewright
import torch.nn.functional as F
buf = io.StringIO()
logging.getLogger("torch._dynamo.guards").addHandler(logging.StreamHandler(buf))
torch._logging.set_logs(guards=True)
import sys
if len(sys.argv) > 1: torch._logging.set_logs()
x = torch.randn(1, 8, 64); w = torch.randn(32, 64); g = torch.ones(64)
q = torch.randn(1, 2, 8, 16); cos, sin = torch.randn(8, 16), torch.randn(8, 16); qk = torch.randn(1, 8, 2, 16)
gu = torch.randn(1, 8, 64); res = torch.randn(1, 8, 32)
cases = {
    "linear": (lambda: tilewright.linear(x, w), lambda: F.linear(x, w)),
    "linear+res": (lambda: tilewright.linear(x, w, residual=res), lambda: F.linear(x, w) + res),
    "rms_norm_linear": (lambda: tilewright.rms_norm_linear(x, g, w, eps=1e-6), lambda: F.linear(F.rms_norm(x, (64,), g, 1e-6), w)),
    "flash_attention": (lambda: tilewright.flash_attention(q, q, q, causal=True), lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)),
    "apply_rotary": (lambda: tilewright.apply_rotary(qk, cos, sin), lambda: qk * cos[:, None] + qk * sin[:, None]),
    "swiglu": (lambda: tilewright.swiglu(gu), lambda: (lambda a, b: F.silu(a) * b)(*gu.chunk(2, -1))),
}
for name, (tw, th) in cases.items():
    out = []
    for fn in (tw, th):
        torch._dynamo.reset(); buf.seek(0); buf.truncate()
        with torch.no_grad():
            torch.compile(fn, backend="eager", fullgraph=True)()
        t = buf.getvalue()
        lat = re.findall(r"Guard eval latency = ([0-9.]+) us", t)
        tree = t[t.find("TREE_GUARD_MANAGER"):]
        n = sum(1 for l in tree.splitlines() if "_MATCH" in l or "LAMBDA_GUARD" in l or "DIMENSION_DYNAMIC" in l)
        out.append((n, lat[-1] if lat else "?"))
    print(f"{name:16s} tilewright guards {out[0][0]:4d} eval {out[0][1]:>7s} us | torch guards {out[1][0]:4d} eval {out[1][1]:>7s} us")
import time, statistics
import os
if os.environ.get("NOLAMBDA"): torch._dynamo.config.use_lamba_guard_for_object_aliasing = False
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
print("steady-state guard check time (us per call):")
for name, (tw, th) in cases.items():
    rs = []
    for fn in (tw, th):
        torch._dynamo.reset()
        c = torch.compile(fn, backend="eager", fullgraph=True)
        with torch.no_grad():
            c()
        entries = _debug_get_cache_entry_list(fn.__code__)
        gm = entries[0].guard_manager
        ts = []
        with torch.no_grad():
            assert gm.check({})
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(2000):
                    gm.check({})
                ts.append((time.perf_counter() - t0) / 2000 * 1e6)
        rs.append(statistics.median(ts))
    print(f"{name:16s} tilewright {rs[0]:6.2f} us | torch {rs[1]:6.2f} us")
