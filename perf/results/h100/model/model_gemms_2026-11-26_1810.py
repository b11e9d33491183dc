"""Every GEMM a tilewright Llama / ViT prefill fwd+bwd step launches, with its layout, timed per backend beside cuBLAS
on the same views: the router's pick (through plain_gemm, as the backward calls it), Triton with its table config,
the CUDA kernel, and a sweep of every Triton candidate on the real layout.
Usage: python scratch/model_gemms.py OUTDIR [sweep]"""
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import sys
import time

import torch
import triton.testing

OUTDIR = sys.argv[1]
SWEEP = len(sys.argv) > 2 and sys.argv[2] == "sweep"


def make(shape, a_t, b_t, dtype=torch.bfloat16, dev="cuda"):
    M, N, K = shape
    a = torch.randn(K, M, device=dev, dtype=dtype).t() if a_t else torch.randn(M, K, device=dev, dtype=dtype)
    b = (torch.randn(N, K, device=dev, dtype=dtype).t() if b_t else torch.randn(K, N, device=dev, dtype=dtype)) / K ** .5
    return a, b, torch.empty(M, N, device=dev, dtype=dtype)


def _pre(task):
    shape, a_t, b_t, slot, n = task
    from tilewright.tools.tuner import _triton_candidates
    a, b, out = make(shape, a_t, b_t)
    ok = 0
    for c in _triton_candidates(a, b, out, None)[slot::n]:
        try:
            c.run(); ok += 1
        except Exception:
            pass
    return ok


def capture():
    from tilewright.bench import model
    import tilewright.triton_kernels.gemm as tg
    from tilewright.cuda_fallback import gemm_sm90 as cg
    calls = []
    orig_t, orig_c = tg.launch_gemm, cg.FAMILY.launch

    def lay(t):
        return "T" if (t.stride(0) == 1 and t.shape[1] > 1) else "N"

    def rec(kind, orig):
        def f(a, b, out, **kw):
            calls.append(dict(block=cur[0], via=kind, M=a.shape[0], N=b.shape[1], K=a.shape[1], a=lay(a), b=lay(b),
                              extra=",".join(k for k in ("bias", "residual", "preact", "norm")
                                             if kw.get(k) is not None) + (f",act{kw.get('activation')}"
                                                                         if kw.get("activation") else "")))
            return orig(a, b, out, **kw)
        return f
    tg.launch_gemm = rec("triton", orig_t)
    cg.FAMILY.launch = rec("cuda", orig_c)
    cur = [None]
    try:
        for case in model.SUITES["default"]:
            if case.size != "prefill":
                continue
            cur[0] = case.block
            _, ours = model.build_blocks(case, "cuda", torch.bfloat16)
            x = model.make_input(case, "cuda", torch.bfloat16)
            ours(x).sum().backward()
            torch.cuda.synchronize()
            del ours, x
    finally:
        tg.launch_gemm, cg.FAMILY.launch = orig_t, orig_c
    return calls


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=40)


def main():
    os.makedirs(OUTDIR, exist_ok=True)
    from tilewright.ops.gemm import plain_gemm
    from tilewright.triton_kernels.gemm import launch_gemm
    from tilewright.cuda_fallback import gemm_sm90 as cg
    from tilewright.tools.tuner import _triton_candidates
    from tilewright import router
    calls = capture()
    print(f"captured {len(calls)} GEMM launches (rmsnorm-GEMM forwards not included)")
    for c in calls:
        print("  ", c)
    uniq, count = {}, {}
    for c in calls:
        key = (c["M"], c["N"], c["K"], c["a"], c["b"])
        uniq.setdefault(key, c)
        count[key] = count.get(key, 0) + 1
    if SWEEP:
        tasks = [((M, N, K), a == "T", b == "T", s, 14) for (M, N, K, a, b) in uniq for s in range(14)]
        t0 = time.time()
        with cf.ProcessPoolExecutor(14, mp_context=mp.get_context("spawn")) as pool:
            n = sum(pool.map(_pre, tasks))
        print(f"precompiled {n} in {time.time() - t0:.0f}s", flush=True)
    rows = []
    for (M, N, K, la, lb), c in uniq.items():
        a, b, out = make((M, N, K), la == "T", lb == "T")
        fl = 2 * M * N * K / 1e9
        r = dict(block=c["block"], shape=f"{M}x{N}x{K}", layout=la + lb, calls=count[(M, N, K, la, lb)],
                 seen_via=c["via"], extra=c["extra"])
        r["cublas_ms"] = bench(lambda: torch.mm(a, b))
        r["router"] = router.decide("gemm", a, b, None, None).backend
        with torch.no_grad():
            r["router_ms"] = bench(lambda: plain_gemm(a, b, a.dtype, None))
        r["triton_table_ms"] = bench(lambda: launch_gemm(a, b, out))
        ok, _ = cg.constraints(a, b)
        r["cuda_ms"] = bench(lambda: cg.launch_cuda_gemm(a, b, out)) if ok else float("nan")
        if SWEEP:
            best, name = float("inf"), ""
            for cand in _triton_candidates(a, b, out, None):
                try:
                    ms = triton.testing.do_bench(cand.run, warmup=5, rep=20)
                except Exception:
                    continue
                if ms < best:
                    best, name = ms, cand.name
            r["triton_best_ms"], r["triton_best"] = best, name
            r["triton_best_cfg"] = json.dumps(next(x.config for x in _triton_candidates(a, b, out, None)
                                                   if x.name == name)) if name else ""
        for k in [k for k in r if k.endswith("_ms")]:
            r[k.replace("_ms", "_vs_cublas")] = r["cublas_ms"] / r[k] if r[k] == r[k] else float("nan")
        r["cublas_tflops"] = fl / r["cublas_ms"]
        rows.append(r)
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "triton_best_cfg"},
              flush=True)
        del a, b, out
        torch.cuda.empty_cache()
    import pandas as pd
    df = pd.DataFrame(rows)
    df.to_csv(os.path.join(OUTDIR, "model_gemms.csv"), index=False)
    cols = [c for c in df.columns if c.endswith("_ms")]
    print(df.groupby("block")[cols].sum())


if __name__ == "__main__":
    main()
