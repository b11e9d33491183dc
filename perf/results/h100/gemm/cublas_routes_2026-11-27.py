"""Plain GEMMs (no epilogue) of the model benches' forward and backward, plus suite-like shapes: the router's pick,
forced Triton, forced CUDA and cuBLAS (torch.mm) timed side by side (do_bench, L2 flushed), bf16."""
import csv, sys, time
import torch
import triton
import tilewright

out = sys.argv[1]
dev, dt = "cuda", torch.bfloat16
M = 16384
linears = {"llama": [(3072, 2048), (2048, 2048), (11264, 2048), (2048, 5632)],
           "vit": [(3072, 1024), (1024, 1024), (4096, 1024), (1024, 4096)]}
shapes = []  # (tag, M, N, K, a_transposed, b_transposed)
for model, ls in linears.items():
    for n_out, k_in in ls:
        shapes.append((f"{model}-fwd", M, n_out, k_in, False, True))     # x @ W^T
        shapes.append((f"{model}-dX", M, k_in, n_out, False, False))     # dY @ W
        shapes.append((f"{model}-dW", n_out, k_in, M, True, False))      # dY^T @ X
for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 4096, 4096), (16384, 2048, 2048), (1000, 3000, 1536),
                (2000, 6000, 3000), (1536, 1000, 3000), (3000, 1536, 1000), (1024, 1024, 16384), (768, 1024, 16384),
                (512, 2048, 2048), (2048, 512, 8192)):
    shapes.append(("suite", m, n, k, False, False))
    shapes.append(("suite-TN", m, n, k, True, False))


def mk(m, n, k, at, bt):
    a = torch.randn((k, m) if at else (m, k), device=dev, dtype=dt)
    b = torch.randn((n, k) if bt else (k, n), device=dev, dtype=dt) / k**0.5
    return (a.t() if at else a), (b.t() if bt else b)


def bench(fn):
    try:
        fn()
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn, warmup=25, rep=150, return_mode="median")
    except Exception as e:  # noqa: BLE001
        return float("nan")


rows = []
t0 = time.time()
for tag, m, n, k, at, bt in shapes:
    a, b = mk(m, n, k, at, bt)
    o = torch.empty(m, n, device=dev, dtype=dt)
    r = dict(tag=tag, M=m, N=n, K=k, layout=("T" if at else "N") + ("T" if bt else "N"))
    r["cublas"] = bench(lambda: torch.mm(a, b, out=o))
    r["router"] = bench(lambda: tilewright.matmul(a, b))
    r["triton"] = bench(lambda: tilewright.matmul(a, b, backend="triton"))
    r["cuda"] = bench(lambda: tilewright.matmul(a, b, backend="cuda"))
    r["picked"] = str(tilewright.router.decide("gemm", a, b, None, None).backend)
    best = min(x for x in (r["triton"], r["cuda"]) if x == x)
    r["best_ours_vs_cublas"] = r["cublas"] / best
    r["router_vs_cublas"] = r["cublas"] / r["router"]
    rows.append(r)
    print(f"[{time.time() - t0:5.0f}s] {tag:<10} {m}x{n}x{k} {r['layout']} cublas {r['cublas']:.4f} router({r['picked']}) "
          f"{r['router']:.4f} triton {r['triton']:.4f} cuda {r['cuda']:.4f} -> router/cublas {r['router_vs_cublas']:.3f} "
          f"best/cublas {r['best_ours_vs_cublas']:.3f}", flush=True)
with open(out, "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
