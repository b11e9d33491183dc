"""Host time per stage of the small blocks (autograd recording, GPU held by a sleep kernel so the host never waits),
tilewright vs torch, plus a cProfile of each tilewright stage, and dynamo explain of both blocks."""
import cProfile, io, pstats, statistics, sys, time
import torch, torch.nn.functional as F
import tilewright
from tilewright.bench import model

def host_us(fn, n=100, reps=7):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize(); torch.cuda._sleep(int(60e6))
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)

def prof(fn, n=200, top=25):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(n): fn()
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(top)
    return s.getvalue()

case = [c for c in model.SUITES["default"] if c.tag == "llama-small"][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16).requires_grad_(True)
c = case.dims; B, S = case.batch, case.seq
with torch.no_grad():
    qkv = ours.attn_norm_qkv(x)
heads = qkv.detach().view(B, S, -1, c.head_dim).requires_grad_(True)
qk = heads[:, :, :c.n_heads + c.n_kv_heads]
q = torch.randn(B, c.n_heads, S, c.head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
k = torch.randn(B, c.n_kv_heads, S, c.head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
v = torch.randn_like(k, requires_grad=True)
o = torch.randn(B, S, c.n_heads * c.head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
gu = torch.randn(B, S, 2 * c.ffn, device="cuda", dtype=torch.bfloat16, requires_grad=True)
hh = torch.randn(B, S, c.ffn, device="cuda", dtype=torch.bfloat16, requires_grad=True)
cos, sin = ours.rope_cos, ours.rope_sin
stages = {
    "norm+qkv": (lambda: ours.attn_norm_qkv(x), lambda: ref.wqkv(ref.attn_norm(x))),
    "rope q,k": (lambda: tilewright.apply_rotary(qk, cos[:, 0], sin[:, 0]),
                 lambda: (model.apply_rope(qk[:, :, :c.n_heads], cos, sin), model.apply_rope(qk[:, :, c.n_heads:], cos, sin))),
    "attention": (lambda: tilewright.flash_attention(q, k, v, causal=True),
                  lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)),
    "wo+res": (lambda: ours.wo(o, residual=x), lambda: x + ref.wo(o)),
    "swiglu": (lambda: tilewright.swiglu(gu), lambda: (lambda g, u: F.silu(g) * u)(*gu.chunk(2, dim=-1))),
    "down+res": (lambda: ours.w_down(hh, residual=x), lambda: x + ref.w_down(hh)),
    "block fwd": (lambda: ours(x), lambda: ref(x)),
}
for name, (tw, th) in stages.items():
    for f in (tw, th):
        for _ in range(5): f()
    a, b = host_us(tw), host_us(th)
    a2, b2 = host_us(tw), host_us(th)
    print(f"{name:10s} host/call tilewright {min(a,a2):7.1f} us  torch {min(b,b2):7.1f} us  ratio {min(a,a2)/min(b,b2):.2f}", flush=True)
# no-grad rows
with torch.no_grad():
    for name in ("norm+qkv", "rope q,k", "attention", "wo+res", "swiglu", "block fwd"):
        tw, th = stages[name]
        a, b = host_us(tw), host_us(th)
        print(f"{name:10s} no_grad  tilewright {a:7.1f} us  torch {b:7.1f} us  ratio {a/b:.2f}", flush=True)
# backward of the whole block
def bw(blk):
    y = blk(x); g = torch.ones_like(y)
    def run():
        y.backward(g, retain_graph=True)
    return run
for name, blk in (("tilewright", ours), ("torch", ref)):
    f = bw(blk)
    print(f"block backward host {name}: {host_us(f, n=30):.1f} us", flush=True)
for name, (tw, th) in stages.items():
    print(f"===== cProfile tilewright {name}\n" + prof(tw)[:5000], flush=True)
print("===== cProfile tilewright block backward\n" + prof(bw(ours), n=50)[:6000], flush=True)
print("===== cProfile torch block backward\n" + prof(bw(ref), n=50)[:3000], flush=True)
import torch._dynamo as dynamo
for name, blk in (("tilewright", ours), ("torch", ref)):
    dynamo.reset()
    ex = dynamo.explain(blk)(x)
    print(f"===== explain {name}: graphs {ex.graph_count} breaks {ex.graph_break_count} ops {ex.op_count}")
    for r in ex.break_reasons[:5]:
        print("   break:", str(r.reason)[:200])
    for g in ex.graphs:
        print(g.code[:4000] if hasattr(g, "code") else "")
