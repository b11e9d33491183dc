"""rms_norm_linear forward: the two-pass path (default where the router picks the CUDA kernel) vs the fused CUDA
kernel (TILEWRIGHT_RMS_TWO_PASS=0) vs torch eager F.rms_norm + F.linear vs torch.compile of the pair vs the bare
cuBLAS GEMM, bf16, CUDA-graph timed, interleaved, cold L2 (H100). Also fwd+bwd for the default vs eager."""
import os, sys, csv, torch, torch.nn.functional as F
import tilewright
from tilewright.bench.common import graph_ms_alternating, environment
print(environment(), flush=True)
EPS = 1e-6
rows = []
pair = lambda x, g, w: F.linear(F.rms_norm(x, (x.shape[-1],), g, EPS), w)
pair_c = torch.compile(pair)
def tw(mode):
    def f(x, g, w):
        if mode is None:
            os.environ.pop("TILEWRIGHT_RMS_TWO_PASS", None)
        else:
            os.environ["TILEWRIGHT_RMS_TWO_PASS"] = mode
        return tilewright.rms_norm_linear(x, g, w, eps=EPS)
    return f
for M, N, K in ((8192, 4096, 4096), (8192, 6144, 4096), (3000, 5120, 5120), (2048, 14336, 4096), (128, 4096, 4096),
                (16384, 3072, 2048), (16384, 11264, 2048), (512, 3072, 2048)):
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
    ref = F.linear(F.rms_norm(x.double(), (K,), g.double(), EPS), w.double())
    errs = {}
    for name, f in (("two_pass", tw(None)), ("fused", tw("0")), ("eager", pair)):
        errs[name] = ((f(x, g, w).double() - ref).abs().max() / ref.abs().max()).item()
    provs = {"two_pass": tw(None), "fused": tw("0"), "eager": pair, "compile": pair_c, "bare_gemm": lambda x, g, w: F.linear(x, w)}
    with torch.no_grad():
        ms = graph_ms_alternating([lambda f=f: f(x, g, w) for f in provs.values()])
    os.environ.pop("TILEWRIGHT_RMS_TWO_PASS", None)
    d = dict(zip(provs, ms))
    print(f"{M}x{N}x{K}: " + "  ".join(f"{k} {v*1000:.1f}us" for k, v in d.items()) +
          f" | two_pass/bare {d['two_pass']/d['bare_gemm']:.3f} fused/bare {d['fused']/d['bare_gemm']:.3f} eager/bare {d['eager']/d['bare_gemm']:.3f}"
          f" | vs eager {d['eager']/d['two_pass']:.3f}x vs compile {d['compile']/d['two_pass']:.3f}x | relerr " +
          " ".join(f"{k} {v:.2e}" for k, v in errs.items()), flush=True)
    for k, v in d.items():
        rows.append((M, N, K, "fwd", k, v))
with open(sys.argv[1], "w", newline="") as f:
    wr = csv.writer(f); wr.writerow(["M", "N", "K", "what", "provider", "median_ms"]); wr.writerows(rows)
