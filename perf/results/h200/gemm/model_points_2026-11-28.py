"""The model bench's large GEMMs on this card (issue 14: the Llama B8 step's GEMMs ran 5.66 ms against compile's
cuBLAS 5.52 on an H200 with the router's H100 points): per layout - NT the forward's linear (x @ W^T), NN the input
gradient (dY @ W), TN the weight gradient (dY^T @ X) - tilewright's own kernels (TILEWRIGHT_CUBLAS=0 read per call),
the router's pick and cuBLAS, CUDA-graph timed, cold L2, interleaved; then linear + residual (fused, router) against
F.linear + add. Writes CSV to argv[1]; the ratio column feeds cublas_routes' H200 block."""
import os, sys, csv, torch, torch.nn.functional as F, triton
import tilewright
from tilewright.bench.common import graph_ms_alternating

ROWS = 16384  # B 8 x S 2048
LLAMA = [(3072, 2048), (2048, 2048), (11264, 2048), (2048, 5632)]  # (out, in) of qkv, o, gate_up, down
VIT = [(3072, 1024), (1024, 1024), (4096, 1024), (1024, 4096), (1024, 768)]  # qkv, proj, fc1, fc2, patch embed
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)


def own(fn):
    def g():
        os.environ["TILEWRIGHT_CUBLAS"] = "0"
        try:
            return fn()
        finally:
            del os.environ["TILEWRIGHT_CUBLAS"]
    return g


rows = []
for out_f, in_f in LLAMA + VIT:
    for lay in ("NT", "NN", "TN"):
        if lay == "NT":  # y = x W^T: (ROWS, in) x (in, out), W stored (out, in)
            M, N, K = ROWS, out_f, in_f
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            b = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16().t()
        elif lay == "NN":  # dX = dY W: (ROWS, out) x (out, in)
            M, N, K = ROWS, in_f, out_f
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            b = (torch.randn(K, N, device="cuda") / K ** 0.5).bfloat16()
        else:  # dW = dY^T X: (out, ROWS) x (ROWS, in), dY stored (ROWS, out)
            M, N, K = out_f, in_f, ROWS
            a = torch.randn(K, M, device="cuda", dtype=torch.bfloat16).t()
            b = (torch.randn(K, N, device="cuda") / K ** 0.5).bfloat16()
        fns = [lambda: torch.mm(a, b), own(lambda: tilewright.matmul(a, b)), lambda: tilewright.matmul(a, b)]
        with torch.no_grad():
            ref = torch.mm(a.float(), b.float())
            for f in fns[1:]:
                err = ((f().float() - ref).norm() / ref.norm()).item()
                assert err < 1e-2, (lay, M, N, K, err)
            t = graph_ms_alternating(fns, replays=11)
        r = dict(layout=lay, M=M, N=N, K=K, cublas_us=t[0] * 1e3, own_us=t[1] * 1e3, router_us=t[2] * 1e3,
                 own_ratio=t[0] / t[1], router_ratio=t[0] / t[2], kind="plain")
        rows.append(r)
        print(f"{lay} {M}x{N}x{K}: cublas {r['cublas_us']:.1f} own {r['own_us']:.1f} ({r['own_ratio']:.3f}) router "
              f"{r['router_us']:.1f} ({r['router_ratio']:.3f})", flush=True)
# residual epilogues (o / down projections, ViT proj / fc2): fused against F.linear + add
for out_f, in_f in [(2048, 2048), (2048, 5632), (1024, 1024), (1024, 4096)]:
    x = torch.randn(ROWS, in_f, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(out_f, in_f, device="cuda") / in_f ** 0.5).bfloat16()
    res = torch.randn(ROWS, out_f, device="cuda", dtype=torch.bfloat16)
    fns = [lambda: F.linear(x, w) + res, own(lambda: tilewright.linear(x, w, residual=res)),
           lambda: tilewright.linear(x, w, residual=res)]
    with torch.no_grad():
        t = graph_ms_alternating(fns, replays=11)
    r = dict(layout="NT+res", M=ROWS, N=out_f, K=in_f, cublas_us=t[0] * 1e3, own_us=t[1] * 1e3, router_us=t[2] * 1e3,
             own_ratio=t[0] / t[1], router_ratio=t[0] / t[2], kind="residual")
    rows.append(r)
    print(f"NT+res {ROWS}x{out_f}x{in_f}: torch {r['cublas_us']:.1f} own {r['own_us']:.1f} ({r['own_ratio']:.3f}) "
          f"router {r['router_us']:.1f} ({r['router_ratio']:.3f})", flush=True)
with open(sys.argv[1], "w", newline="") as f:
    w_ = csv.DictWriter(f, fieldnames=list(rows[0])); w_.writeheader(); w_.writerows(rows)
