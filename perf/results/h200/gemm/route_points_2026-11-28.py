"""Router pick vs cuBLAS on decode / small / held-out shapes (NT = linear, NN = matmul), same run: tilewright's own
kernels (TILEWRIGHT_CUBLAS=0 read per call), the router's default pick, cuBLAS. Writes CSV to argv[1]."""
import os, sys, csv, torch, torch.nn.functional as F, triton
import tilewright
from tilewright.bench.common import graph_ms_alternating
SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (16, 14336, 4096), (32, 4096, 4096), (64, 4096, 4096), (64, 6144, 4096),
          (128, 4096, 4096), (128, 14336, 4096), (128, 4096, 14336), (128, 3000, 1536), (256, 4096, 4096),
          (256, 5120, 1536), (96, 2560, 5120), (1000, 3000, 1536), (1100, 5000, 3000), (700, 2816, 1792),
          (1500, 1000, 4000), (3000, 5000, 4000)]
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
rows = []
def own(fn):
    def g():
        os.environ["TILEWRIGHT_CUBLAS"] = "0"
        try:
            return fn()
        finally:
            del os.environ["TILEWRIGHT_CUBLAS"]
    return g
for lay in ("NT", "NN"):
    for M, N, K in SHAPES:
        if lay == "NN" and M not in (16, 128, 1000, 1100, 700):
            continue
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
        b = w.t().contiguous()
        if lay == "NT":
            fns = [lambda: F.linear(x, w), own(lambda: tilewright.linear(x, w)), lambda: tilewright.linear(x, w)]
        else:
            fns = [lambda: x @ b, own(lambda: tilewright.matmul(x, b)), lambda: tilewright.matmul(x, b)]
        with torch.no_grad():
            t = graph_ms_alternating(fns, replays=11)
        r = dict(layout=lay, M=M, N=N, K=K, cublas_us=t[0] * 1e3, own_us=t[1] * 1e3, router_us=t[2] * 1e3,
                 own_ratio=t[0] / t[1], router_ratio=t[0] / t[2])
        rows.append(r)
        print(f"{lay} {M}x{N}x{K}: cublas {r['cublas_us']:.1f} own {r['own_us']:.1f} ({r['own_ratio']:.3f}) router "
              f"{r['router_us']:.1f} ({r['router_ratio']:.3f})", flush=True)
with open(sys.argv[1], "w", newline="") as f:
    w_ = csv.DictWriter(f, fieldnames=list(rows[0])); w_.writeheader(); w_.writerows(rows)
