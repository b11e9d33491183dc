"""Focused GEMM experiments on the device: explicit configs on chosen shapes, timed beside cuBLAS.

Each config runs with descriptor loads allowed (tma=1) and forced off (tma=0: pointer loads and stores), so the
two load paths of one tile shape are compared directly.

Usage: PYTHONPATH=src python scripts/gemm_experiments.py   (prints one line per (shape, config))
"""
import itertools

import torch
import triton

from tilewright.triton_kernels import gemm as tg


def cfg(bm, bn, bk, w, s, order=1, split=None, persistent=True, flatten=False):
    split = split or (4 if bm * bn > 128 * 128 else 2 if bn >= 128 else 1)
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP": 8, "TILE_ORDER": order,
                          "EPI_SPLIT": split, "TMA_LOADS": True, "PERSISTENT": persistent, "FLATTEN": flatten},
                         num_warps=w, num_stages=s)


def bench(M, N, K, configs, tma_options=(True, False), b_kmajor=False):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t() if b_kmajor
         else torch.randn(K, N, device="cuda", dtype=torch.bfloat16))
    ref = a @ b
    t_ref = triton.testing.do_bench(lambda: a @ b, return_mode="median")
    graph = M <= 256
    if graph:
        t_ref = triton.testing.do_bench_cudagraph(lambda: a @ b, return_mode="median")
    print(f"--- {M}x{N}x{K} b_kmajor={b_kmajor}: cublas {t_ref*1e3:.1f} us ({2*M*N*K/t_ref/1e9:.0f} TF)", flush=True)
    for c, tma in itertools.product(configs, tma_options):
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        fn = lambda: tg.launch_gemm(a, b, out, use_tma=tma, config=c)
        try:
            fn()
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            t = (triton.testing.do_bench_cudagraph(fn, return_mode="median") if graph
                 else triton.testing.do_bench(fn, return_mode="median"))
            print(f"  tma={int(tma)} {str(c.all_kwargs()):<150} {t*1e3:8.1f} us  x{t_ref/t:5.3f}  err {err:.1e}",
                  flush=True)
        except Exception as e:
            print(f"  tma={int(tma)} {c}: {type(e).__name__} {str(e)[:100]}", flush=True)


big = [cfg(128, 256, 64, 8, 3), cfg(128, 256, 64, 8, 3, flatten=True), cfg(128, 128, 64, 8, 4),
       cfg(128, 128, 64, 8, 4, persistent=False), cfg(256, 128, 64, 8, 3), cfg(128, 256, 64, 8, 3, persistent=False),
       cfg(128, 128, 64, 4, 4), cfg(128, 256, 64, 8, 4)]
bench(3000, 5000, 4000, big)
bench(3072, 5120, 4096, big[:4], tma_options=(True,))
bench(3000, 5000, 4000, big[:4], tma_options=(True,), b_kmajor=True)
small = [cfg(16, 64, 128, 4, 4), cfg(16, 32, 256, 4, 4), cfg(16, 32, 256, 4, 6), cfg(16, 16, 256, 4, 4),
         cfg(16, 32, 128, 4, 8), cfg(16, 64, 256, 4, 3, persistent=False), cfg(16, 32, 512, 4, 3),
         cfg(16, 32, 256, 2, 4), cfg(16, 16, 512, 2, 4)]
bench(16, 4096, 4096, small)
bench(16, 4096, 4096, small[:5], tma_options=(True,), b_kmajor=True)
mid = [cfg(64, 64, 128, 4, 4), cfg(64, 128, 64, 4, 4), cfg(32, 64, 128, 4, 4), cfg(64, 32, 256, 4, 4),
       cfg(128, 64, 64, 4, 4), cfg(64, 64, 256, 4, 3), cfg(128, 32, 128, 4, 4)]
bench(128, 4096, 4096, mid)
