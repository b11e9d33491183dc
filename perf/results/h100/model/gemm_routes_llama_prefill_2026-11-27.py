"""Which backend each GEMM of one Llama B8 x S2048 fwd+bwd step runs, and each call's time on every eligible backend
(forced triton / cuda, and torch.mm = cuBLAS) in the same layouts, CUDA-graph timed, interleaved, cold L2."""
import sys, torch
import tilewright
from tilewright import router
from tilewright.bench import model
from tilewright.bench.common import graph_ms_alternating

log = []
orig = router._decide
def spy(op, tensors, backend, honor_forced=True):
    d = orig(op, tensors, backend, honor_forced)
    if op in ("gemm", "rms_norm_linear") and backend is None:
        ts = [t for t in tensors if isinstance(t, torch.Tensor)]
        log.append((op, d.backend, [(tuple(t.shape), t.stride()) for t in ts[:2]], [r for r in d.reasons][-1][:120]))
    return d
router._decide = spy
case = [c for c in model.SUITES["default"] if c.tag == "llama-prefill"][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16)
ours(x).sum().backward()
torch.cuda.synchronize()
router._decide = orig
seen = set()
for op, be, shapes, why in log:
    key = (op, be, str(shapes))
    if key in seen:
        continue
    seen.add(key)
    print(op, be, shapes, "|", why, flush=True)
    if op != "gemm":
        continue
    (sa, ta), (sb, tb) = shapes
    if len(sa) != 2 or len(sb) != 2:
        continue
    a = torch.empty_strided(sa, ta, device="cuda", dtype=torch.bfloat16).normal_()
    b = torch.empty_strided(sb, tb, device="cuda", dtype=torch.bfloat16).normal_()
    M, K = sa; N = sb[1]
    fns, names = [lambda: torch.mm(a, b)], ["cublas"]
    for name in ("triton", "cuda"):
        try:
            tilewright.matmul(a, b, backend=name)
            fns.append(lambda name=name: tilewright.matmul(a, b, backend=name)); names.append(name)
        except Exception as e:
            print("   ", name, "not eligible:", str(e)[:100])
    ms = graph_ms_alternating(fns)
    tf = [2 * M * N * K / (m * 1e-3) / 1e12 for m in ms]
    print("    M N K", M, N, K, " ".join(f"{n} {m*1000:.1f} us ({t:.0f} TF/s, {ms[0]/m:.2f}x cublas)" for n, m, t in zip(names, ms, tf)), flush=True)
