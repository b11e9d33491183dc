"""Decode GEMM sweep: the Triton GEMM kernel over deep-pipeline small tiles and split-K at M 16 / 64 / 128, vs cuBLAS,
same run (graph_ms_alternating, L2 flushed). Phase 1 compiles in worker processes, phase 2 times in this one."""
import itertools, os, sys, time, multiprocessing as mp
import torch, torch.nn.functional as F, triton
SHAPES = [(16, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096), (128, 14336, 4096), (128, 4096, 14336),
          (16, 14336, 4096), (64, 6144, 4096), (1, 4096, 4096), (128, 3000, 1536)]

def configs_for(M):
    from tilewright.autotune.space import _config
    out = []
    bms = {1: (16,), 16: (16,), 64: (64, 32), 128: (128, 64)}[M]
    for bm, bn, bk, st, sk, tma in itertools.product(bms, (32, 64, 128), (128, 256), (4, 6, 8), (1, 2, 4), (False, True)):
        if bk == 256 and bn == 128 and bm >= 64:
            continue
        ring = st * (bm * bk + bk * bn) * 2
        if ring + bm * bn * 2 > 220 * 1024:
            continue
        out.append(_config(bm, bn, bk, 4 if bm * bn <= 64 * 128 else 8, st, persistent=False, tma=tma, split_k=sk,
                           split=2 if bm * bn > 64 * 128 else 1))
    return out

def all_configs():
    seen, out = set(), []
    for M in sorted({s[0] for s in SHAPES}):
        for c in configs_for(M):
            k = (str(c.kwargs), c.num_warps, c.num_stages)
            if k not in seen:
                seen.add(k); out.append(c)
    return out

def compile_worker(args):
    idx, n = args
    from tilewright.triton_kernels import gemm as tg
    cfgs = all_configs()[idx::n]
    x = torch.randn(128, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(128, 4096, device="cuda", dtype=torch.bfloat16)
    ok = 0
    for c in cfgs:
        try:
            tg.launch_gemm(x, w.t(), out, config=c); ok += 1
        except Exception as e:
            pass
    torch.cuda.synchronize()
    return ok

if __name__ == "__main__":
    from tilewright.bench.common import graph_ms_alternating
    from tilewright.triton_kernels import gemm as tg
    import tilewright
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, len(all_configs()), "configs", flush=True)
    t0 = time.time()
    with mp.get_context("spawn").Pool(12) as pool:
        print("compiled", sum(pool.map(compile_worker, [(i, 12) for i in range(12)])), f"in {time.time() - t0:.0f}s", flush=True)
    src = torch.empty(256 << 20, dtype=torch.int8, device="cuda"); dst = torch.empty_like(src)
    tc = graph_ms_alternating([lambda: dst.copy_(src)], calls=5)[0]
    print(f"copy 256 MB: {tc*1e3:.0f}us = {2 * 256 * 1.048576e6 / (tc * 1e-3) / 1e9:.0f} GB/s read+write", flush=True)
    del src, dst
    rows = []
    for M, N, K in SHAPES:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        ref = F.linear(x, w).float()
        cands = []
        for c in configs_for(M):
            try:
                tg.launch_gemm(x, w.t(), out, config=c); torch.cuda.synchronize()
            except Exception:
                continue
            if (out.float() - ref).abs().max().item() > 0.05:
                print("  WRONG", c, flush=True); continue
            cands.append(c)
        fns = [lambda: F.linear(x, w), lambda: tilewright.linear(x, w)] + [lambda c=c: tg.launch_gemm(x, w.t(), out, config=c) for c in cands]
        with torch.no_grad():
            t = graph_ms_alternating(fns, replays=9)
        cub = t[0]
        order = sorted(range(2, len(t)), key=lambda i: t[i])
        gb = (N * K + M * K + M * N) * 2 / 1e9
        print(f"{M}x{N}x{K}: cublas {cub*1e3:.1f}us ({gb / (cub * 1e-3):.0f} GB/s)  router {t[1]*1e3:.1f}us  best "
              f"{t[order[0]]*1e3:.1f}us ({gb / (t[order[0]] * 1e-3):.0f} GB/s) cublas/best {cub / t[order[0]]:.3f}", flush=True)
        for i in order[:6]:
            c = cands[i - 2]
            print(f"   {t[i]*1e3:.1f}us {cub / t[i]:.3f} w{c.num_warps} s{c.num_stages} {c.kwargs}", flush=True)
