"""rms_norm_linear forward, issue 17's rows: the folded path (the default on sm_90 for a weight that does not train,
where the plain CUDA GEMM is the router's choice: g folded into the weight and kept, one read-only sum-of-squares
pass, rstd in the GEMM's epilogue), the two passes (``TILEWRIGHT_RMS_FOLDED=0``), torch eager F.rms_norm + F.linear,
torch.compile of the pair, the bare cuBLAS GEMM and the bare sm_90a CUDA GEMM (x @ W^T, no norm); bf16, CUDA-graph
timed, providers interleaved with rotating order, cold L2. Then fwd+bwd (steady-state loop; the weights train, so
tilewright runs its two passes) vs eager vs compile. Argument: the CSV path; optional MxNxK,... shapes.
(The 0933 run's "nocache" columns used a kept fold by mistake; the 0939 run's fold every call. Since those runs a
call under CUDA-graph capture runs the two passes unless TILEWRIGHT_RMS_FOLDED=capture, which the folded column
now sets: it times the folded path's GPU work, what an eager inference call runs.)"""
import os, sys, csv, torch, torch.nn.functional as F
import tilewright
from tilewright.bench.common import graph_ms_alternating, loop_ms_alternating, environment
from tilewright.cuda_fallback import gemm_sm90
print(environment(), flush=True)
EPS = 1e-6
ENV = "TILEWRIGHT_RMS_FOLDED"
rows = []
pair = lambda x, g, w: F.linear(F.rms_norm(x, (x.shape[-1],), g, EPS), w)
pair_c = torch.compile(pair)
def tw(mode):
    def f(x, g, w):
        if mode is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = mode
        return tilewright.rms_norm_linear(x, g, w, eps=EPS)
    return f
SHAPES = [(8192, 4096, 4096), (8192, 6144, 4096), (3000, 5120, 5120), (2048, 14336, 4096), (128, 4096, 4096),
          (16384, 3072, 2048), (16384, 11264, 2048)]
if len(sys.argv) > 2:
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[2].split(",")]
rms = __import__("importlib").import_module("tilewright.ops.rms_norm_linear")
for M, N, K in SHAPES:
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
    ref = F.linear(F.rms_norm(x.double(), (K,), g.double(), EPS), w.double())
    errs = {}
    for name, f in (("folded", tw("capture")), ("two_pass", tw("0")), ("eager", pair)):
        errs[name] = ((f(x, g, w).double() - ref).abs().max() / ref.abs().max()).item()
    os.environ.pop(ENV, None)
    path = "folded" if rms.folded_applies(x, N) and rms.two_pass_applies(
        tilewright.router.decide("rms_norm_linear", x, g, w, None), x, N) else "not folded"
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    provs = {"folded": tw("capture"), "two_pass": tw("0"), "eager": pair,
             "compile": pair_c, "bare_cublas": lambda x, g, w: F.linear(x, w),
             "bare_cuda": lambda x, g, w: gemm_sm90.launch_cuda_gemm(x, w.t(), out)}
    with torch.no_grad():
        ms = graph_ms_alternating([lambda f=f: f(x, g, w) for f in provs.values()])
    os.environ.pop(ENV, None)
    d = dict(zip(provs, ms))
    bare = min(d["bare_cublas"], d["bare_cuda"])
    print(f"{M}x{N}x{K} ({path}): " + "  ".join(f"{k} {v*1000:.1f}us" for k, v in d.items()) +
          f" | /best bare: folded {d['folded']/bare:.3f} two_pass "
          f"{d['two_pass']/bare:.3f} eager {d['eager']/bare:.3f} | folded vs eager {d['eager']/d['folded']:.3f}x "
          f"vs compile {d['compile']/d['folded']:.3f}x | relerr "
          + " ".join(f"{k} {v:.2e}" for k, v in errs.items()), flush=True)
    for k, v in d.items():
        rows.append((M, N, K, "fwd", k, v))
    if M >= 2048:
        xs = x.detach().requires_grad_()
        gs, ws = g.detach().requires_grad_(), w.detach().requires_grad_()
        dy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        def step(f):
            return lambda: torch.autograd.backward(f(xs, gs, ws), dy)
        bw = {"tw": step(tw(None)), "eager": step(pair), "compile": step(pair_c)}
        msb = dict(zip(bw, loop_ms_alternating(list(bw.values()))))
        os.environ.pop(ENV, None)
        print(f"   fwd+bwd: " + "  ".join(f"{k} {v*1000:.1f}us" for k, v in msb.items()) +
              f" | tw vs eager {msb['eager']/msb['tw']:.3f}x vs compile {msb['compile']/msb['tw']:.3f}x",
              flush=True)
        for k, v in msb.items():
            rows.append((M, N, K, "fwd+bwd", k, v))
with open(sys.argv[1], "w", newline="") as f:
    wr = csv.writer(f); wr.writerow(["M", "N", "K", "what", "provider", "median_ms"]); wr.writerows(rows)
