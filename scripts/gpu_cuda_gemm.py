"""Device-machine driver for the sm_90a CUDA GEMM: build, numerics, stress, benchmark vs cuBLAS (and Triton), ncu.

Each phase is a subcommand so gpu_cuda_gemm.sh can run it under its own timeout (a hang in one phase must not eat
the whole lease). Results go to $OUT (default ./out): <phase>.csv / .log; the benchmark prints a compact table last.

    python scripts/gpu_cuda_gemm.py build|numerics|stress|bench|router [--quick]
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import csv
import math
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from tilewright.cuda_fallback import build_check  # noqa: E402
from tilewright.cuda_fallback.runtime import build  # noqa: E402
from tilewright.cuda_fallback import gemm_sm90 as cg  # noqa: E402

OUT = os.environ.get("OUT", "out")
os.makedirs(OUT, exist_ok=True)
DEV = "cuda"

SUITE = [("sq4k", 4096, 4096, 4096), ("sq8k", 8192, 8192, 8192), ("l3-8b-qkv", 8192, 6144, 4096),
         ("l3-8b-o", 8192, 4096, 4096), ("l3-8b-gateup", 8192, 28672, 4096), ("l3-8b-down", 8192, 4096, 14336),
         ("l3-70b-qkv", 8192, 10240, 8192), ("l3-70b-down", 8192, 8192, 28672), ("decode16", 16, 4096, 4096),
         ("decode128", 128, 4096, 4096), ("odd", 3000, 5000, 4000)]
LARGE = {"sq4k", "sq8k", "l3-8b-qkv", "l3-8b-o", "l3-8b-gateup", "l3-8b-down", "l3-70b-qkv", "l3-70b-down"}


def log(*a):
    print(*a, flush=True)


def all_builds(fp16=True):
    """(variant, a_mn, b_mn, fp16) for every build the numerics/bench phases use."""
    out = [(name, False, True, False) for name in cg.VARIANTS]
    for name in (cg.DEFAULT_VARIANT, "coop128x256s3"):
        out += [(name, True, True, False), (name, False, False, False), (name, True, False, False)]
        if fp16:
            out += [(name, False, True, True), (name, False, False, True)]
    return out


EPI_CODES = {"none": (0, 0, 0), "bias": (0, 1, 0), "bias_relu": (1, 1, 0), "bias_gelu": (2, 1, 0),
             "bias_gelu_tanh": (3, 1, 0), "bias_silu": (4, 1, 0), "residual": (0, 0, 1), "pos_embed": (0, 1, 1),
             "bias_gelu_res": (2, 1, 1), "row_res": (4, 0, 1)}


def epilogues_for(b):
    """All epilogues on the main build (default variant, bf16, A K-major, B N-major); two elsewhere."""
    if b == (cg.DEFAULT_VARIANT, False, True, False):
        return EPILOGUES
    return [EPILOGUES[0], EPILOGUES[8]]


def needed_builds():
    out = set()
    for b in all_builds():
        for epi in epilogues_for(b):
            out.add((*b, *EPI_CODES[epi[0]]))
    for name in cg.VARIANTS:  # router self-check epilogue
        out.add((name, False, True, False, 2, 1, 1))
    # tests/cuda/test_gemm_sm90_gpu.py
    for name in cg.VARIANTS:
        for a_mn in (False, True):
            for b_mn in (False, True):
                for fp16 in (False, True):
                    out.add((name, a_mn, b_mn, fp16, 2, 1, 1))
                out.add((name, a_mn, b_mn, False, 0, 0, 0))
    for name in (cg.DEFAULT_VARIANT, cg.SMALL_M_VARIANT):
        for codes in EPI_CODES.values():
            out.add((name, False, True, False, *codes))
        out.add((name, True, True, False, 0, 0, 0))
    out.add((cg.DEFAULT_VARIANT, False, False, False, 2, 1, 0))
    out.add((cg.DEFAULT_VARIANT, False, True, False, 1, 1, 1))
    return sorted(out)


def compile_all(threads):
    t0 = time.time()
    builds = needed_builds()

    def one(b):
        v = cg.VARIANTS[b[0]]
        r = build.compile_source(cg.SOURCE, "sm_90a", v.defines(*b[1:]))
        return b, r.cached

    with cf.ThreadPoolExecutor(threads) as ex:
        n_new = sum(not cached for _, cached in ex.map(one, builds))
    log(f"{len(builds)} builds ({n_new} compiled) in {time.time() - t0:.1f}s; toolchain {build.toolchain()}")


def phase_build(args):
    compile_all(args.threads or os.cpu_count() or 4)
    rows, ok = build_check.build_check("sm_90a")
    log(build_check.format_table(rows))
    log("build-check", "ok" if ok else "FAILED")


# ----------------------------------------------------------------------------------------------- numerics
def make_inputs(M, N, K, dtype, a_mn, b_mn, gen_scale=1.0):
    a = torch.randn(M, K, device=DEV, dtype=torch.float32).to(dtype)
    b = (torch.randn(K, N, device=DEV, dtype=torch.float32) / math.sqrt(max(K, 1))).to(dtype)
    if a_mn:
        a = a.t().contiguous().t()
    if not b_mn:
        b = b.t().contiguous().t()
    return a, b


def reference(a, b, bias, res2d, act, dt):
    """(fp64 reference, torch's unfused result in dt) for the same inputs."""
    from tilewright.reference import gemm_reference

    r64 = gemm_reference(a.double(), b.double(), None if bias is None else bias.double(),
                         None if res2d is None else res2d.double(), act)
    return r64, gemm_reference(a, b, bias, res2d, act, dt)


EPILOGUES = [("none", False, None, None), ("bias", True, None, None), ("bias_relu", True, "relu", None),
             ("bias_gelu", True, "gelu", None), ("bias_gelu_tanh", True, "gelu_tanh", None),
             ("bias_silu", True, "silu", None), ("residual", False, None, "full"),
             ("pos_embed", True, None, "pos"), ("bias_gelu_res", True, "gelu", "full"), ("row_res", False, "silu",
                                                                                         "row")]


def run_case(M, N, K, dtype, variant, a_mn, b_mn, epi, order="grouped", group=8, launch=None, constraints=None):
    """(ok, err, torch_err, finite), or None when the layout cannot take TMA (the router would not route it).

    ``launch`` / ``constraints``: another CUDA GEMM family's (default: the sm_90a kernel's); gpu_sm120_gemm.py
    passes the mma.sync kernel's."""
    launch = launch or cg.launch_cuda_gemm
    constraints = constraints or cg.constraints
    name, has_bias, act, res_kind = epi
    a, b = make_inputs(M, N, K, dtype, a_mn, b_mn)
    if not constraints(a, b)[0]:
        return None
    bias = torch.randn(N, device=DEV, dtype=dtype) if has_bias else None
    res3 = res2d = None
    if res_kind == "full":
        res2d = torch.randn(M, N, device=DEV, dtype=dtype)
        res3 = res2d.reshape(1, M, N)
    elif res_kind == "pos":  # a (B, S, K) batch with a (S, N) pos_embed: P = S, outer stride 0
        S = next((s for s in (7, 5, 3, 2) if M % s == 0), 1)
        pe = torch.randn(S, N, device=DEV, dtype=dtype)
        res3 = pe.unsqueeze(0).expand(M // S, S, N)
        res2d = res3.reshape(M, N)
    elif res_kind == "row":
        row = torch.randn(N, device=DEV, dtype=dtype)
        res3 = row.expand(1, M, N)
        res2d = row.expand(M, N)
    out = torch.full((M, N), float("nan"), device=DEV, dtype=dtype)
    launch(a, b, out, bias=bias, residual=res3, activation=act, variant=variant, tile_order=order, group=group)
    r64, t = reference(a, b, bias, res2d, act, dtype)
    den = r64.norm().item() or 1.0
    e_ours = (out.double() - r64).norm().item() / den
    e_torch = (t.double() - r64).norm().item() / den
    finite = bool(torch.isfinite(out).all())
    ok = finite and e_ours <= 2 * e_torch + 1e-5
    return ok, e_ours, e_torch, finite


def write_csv(name, rows, fieldnames=None):
    """``rows`` (dicts) to $OUT/``name``; the columns are the first row's keys unless given."""
    with open(os.path.join(OUT, name), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fieldnames or list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def phase_numerics(args):
    shapes = [(1, 8, 8), (5, 136, 1), (64, 64, 64), (127, 136, 72), (300, 264, 200), (513, 776, 1000),
              (1000, 4096, 120), (2048, 2048, 2048), (5000, 1032, 333), (129, 264, 4100)]
    if args.quick:
        shapes = shapes[:6]
    rows, fails = [], 0
    t0 = time.time()
    for (variant, a_mn, b_mn, fp16) in all_builds():
        dtype = torch.float16 if fp16 else torch.bfloat16
        for (M, N, K) in shapes:
            for epi in epilogues_for((variant, a_mn, b_mn, fp16)):
                r = run_case(M, N, K, dtype, variant, a_mn, b_mn, epi)
                if r is None:
                    continue
                ok, e, et, fin = r
                rows.append(dict(variant=variant, a_mn=a_mn, b_mn=b_mn, dtype=str(dtype)[6:], M=M, N=N, K=K,
                                 epilogue=epi[0], err=f"{e:.3e}", torch_err=f"{et:.3e}", finite=fin, ok=ok))
                if not ok:
                    fails += 1
                    if fails <= 30:
                        log("FAIL", rows[-1])
    # tile orders on the default variant
    for order in ("row_major", "grouped", "morton", "hilbert"):
        for group in (1, 4, 8, 16):
            for (M, N, K) in ((2048, 2048, 256), (1000, 3000, 128)):
                ok, e, et, fin = run_case(M, N, K, torch.bfloat16, cg.DEFAULT_VARIANT, False, True, EPILOGUES[1],
                                          order, group)
                rows.append(dict(variant=f"{cg.DEFAULT_VARIANT}/{order}{group}", a_mn=False, b_mn=True,
                                 dtype="bfloat16", M=M, N=N, K=K, epilogue="bias", err=f"{e:.3e}",
                                 torch_err=f"{et:.3e}", finite=fin, ok=ok))
                fails += not ok
                if not ok:
                    log("FAIL", rows[-1])
    torch.cuda.synchronize()
    write_csv("numerics.csv", rows)
    log(f"numerics: {len(rows) - fails}/{len(rows)} ok in {time.time() - t0:.1f}s")


def phase_smoke(args):
    """One small case per variant family, each synchronised: a hang or a wrong answer here stops the run early."""
    for variant in (cg.DEFAULT_VARIANT, "coop128x256s3", "pp64x256s4"):
        for (M, N, K) in ((256, 256, 256), (300, 264, 200)):
            t0 = time.time()
            ok, e, et, fin = run_case(M, N, K, torch.bfloat16, variant, False, True, EPILOGUES[8])
            torch.cuda.synchronize()
            log(f"smoke {variant} ({M},{N},{K}) ok={ok} err={e:.2e} torch_err={et:.2e} finite={fin} "
                f"{time.time() - t0:.2f}s")
            if not ok:
                sys.exit(1)


def random_problem(rng, a_mn, b_mn):
    """One stress launch's (M, N, K, tile order, group) from ``rng``: M-major A / N-major B dims rounded to 8
    elements (16-byte TMA strides)."""
    M = rng.choice([rng.randint(1, 300), rng.randint(1, 3000)])
    if a_mn:
        M = 8 * -(-M // 8)
    N = 8 * rng.randint(1, 300)
    K = rng.randint(1, 1500)
    if not (a_mn and b_mn):
        K = 8 * -(-K // 8)
    order = rng.choice(list(cg.TILE_ORDERS))
    group = rng.choice([1, 2, 4, 8, 16])
    return M, N, K, order, group


def phase_stress(args):
    """Many launches over random shapes, variants, layouts, tile orders and epilogues, each checked."""
    rng = random.Random(0)
    builds = all_builds(fp16=True)
    n_target = 10000 if not args.quick else 1000
    t0 = time.time()
    n = bad = 0
    while n < n_target and time.time() - t0 < args.seconds:
        variant, a_mn, b_mn, fp16 = rng.choice(builds)
        dtype = torch.float16 if fp16 else torch.bfloat16
        M, N, K, order, group = random_problem(rng, a_mn, b_mn)
        epi = rng.choice(epilogues_for((variant, a_mn, b_mn, fp16)))
        r = run_case(M, N, K, dtype, variant, a_mn, b_mn, epi, order, group)
        if r is None:
            continue
        ok, e, et, fin = r
        n += 1
        if not ok:
            bad += 1
            if bad <= 20:
                log("STRESS FAIL", variant, a_mn, b_mn, fp16, M, N, K, order, group, epi[0], e, et, fin)
    torch.cuda.synchronize()
    log(f"stress: {n} randomized launches in {time.time() - t0:.1f}s, {bad} wrong")


# ----------------------------------------------------------------------------------------------- bench
def bench_ms(fn):
    import triton

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def triton_fn(a, b, out):
    """The Triton kernel with its shape-based default config (untuned; tuned numbers live in the lead's bench)."""
    try:
        from tilewright.autotune.space import default_gemm_config
        from tilewright.triton_kernels.gemm import launch_gemm

        cfg = default_gemm_config(a.shape[0], b.shape[1], a.shape[1])
        f = lambda: launch_gemm(a, b, out, config=cfg)  # noqa: E731
        f()
        return f
    except Exception as e:  # noqa: BLE001
        log("triton column unavailable:", type(e).__name__, str(e)[:200])
        return None


def phase_bench(args):
    dtype = torch.bfloat16
    names = args.variants.split(",") if args.variants else list(cg.VARIANTS)
    orders = [("grouped", 8), ("hilbert", 8), ("grouped", 16)] if not args.quick else [("grouped", 8)]
    rows = []
    card = torch.cuda.get_device_name()
    log("device:", card, "torch", torch.__version__)
    use_triton = not args.no_triton
    for tag, M, N, K in SUITE:
        a, b = make_inputs(M, N, K, dtype, False, True)
        out = torch.empty(M, N, device=DEV, dtype=dtype)
        flops = 2 * M * N * K
        t_cublas = bench_ms(lambda: torch.matmul(a, b, out=out))
        rows.append(dict(case=tag, M=M, N=N, K=K, provider="cublas", ms=t_cublas, tflops=flops / t_cublas / 1e9))
        if use_triton:
            f = triton_fn(a, b, torch.empty_like(out))
            if f is not None:
                t = bench_ms(f)
                rows.append(dict(case=tag, M=M, N=N, K=K, provider="triton-128x256", ms=t, tflops=flops / t / 1e9))
            else:
                use_triton = False
        ref = (a @ b).float()
        import tilewright

        for prov, fn in (("cuda-auto", lambda: cg.launch_cuda_gemm(a, b, out)),
                         ("op-cuda", lambda: tilewright.matmul(a, b, backend="cuda")),
                         ("op-triton", lambda: tilewright.matmul(a, b, backend="triton"))):
            try:
                fn()
                t = bench_ms(fn)
                rows.append(dict(case=tag, M=M, N=N, K=K, provider=prov, ms=t, tflops=flops / t / 1e9))
            except Exception as e:  # noqa: BLE001
                log("bench error", tag, prov, type(e).__name__, str(e)[:200])
        if tag in ("sq4k", "l3-8b-o", "odd"):
            bias = torch.randn(N, device=DEV, dtype=dtype)
            res = torch.randn(M, N, device=DEV, dtype=dtype)
            pe = torch.randn(M // 8, N, device=DEV, dtype=dtype)
            pe3 = pe.unsqueeze(0).expand(8, M // 8, N)
            epi = (("addmm", lambda: torch.addmm(bias, a, b)),
                   ("cuda-bias", lambda: cg.launch_cuda_gemm(a, b, out, bias=bias)),
                   ("cublas+add", lambda: torch.matmul(a, b) + res),
                   ("cuda-residual", lambda: cg.launch_cuda_gemm(a, b, out, residual=res.reshape(1, M, N))),
                   ("cublas+pos", lambda: (torch.matmul(a, b).view(8, M // 8, N) + pe)),
                   ("cuda-pos", lambda: cg.launch_cuda_gemm(a, b, out, residual=pe3)),
                   ("cublas+bias+gelu+add", lambda: torch.nn.functional.gelu(torch.addmm(bias, a, b)) + res),
                   ("cuda-bias-gelu-res", lambda: cg.launch_cuda_gemm(a, b, out, bias=bias, activation="gelu",
                                                                       residual=res.reshape(1, M, N))))
            for prov, fn in epi:
                try:
                    fn()
                    t = bench_ms(fn)
                    rows.append(dict(case=tag + "/epi", M=M, N=N, K=K, provider=prov, ms=t, tflops=flops / t / 1e9))
                except Exception as e:  # noqa: BLE001
                    log("bench error", tag, prov, type(e).__name__, str(e)[:200])
        for name in names:
            for order, group in orders:
                try:
                    fn = lambda: cg.launch_cuda_gemm(a, b, out, variant=name, tile_order=order, group=group)  # noqa
                    fn()
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    t = bench_ms(fn)
                except Exception as e:  # noqa: BLE001
                    log("bench error", tag, name, order, e)
                    continue
                rows.append(dict(case=tag, M=M, N=N, K=K, provider=f"cuda-{name}-{order}{group}", ms=t,
                                 tflops=flops / t / 1e9, err=f"{err:.1e}"))
        from tilewright import router as _router

        choice = _router.decide("gemm", a, b, None, None).backend
        rows.append(dict(case=tag, M=M, N=N, K=K, provider=f"router-default={choice}", ms=float("nan"),
                         tflops=float("nan")))
        best = min((r for r in rows if r["case"] == tag and r["provider"].startswith("cuda")), key=lambda r: r["ms"])
        log(f"{tag:13s} cublas {flops / t_cublas / 1e9:6.0f} TF  best {best['provider']:32s} "
            f"{best['tflops']:6.0f} TF  x{t_cublas / best['ms']:.3f}  router: {choice}")
    write_csv("bench.csv", rows, ["case", "M", "N", "K", "provider", "ms", "tflops", "err"])
    # compact table: per case, cuBLAS, Triton, each variant's best order, ratio vs cuBLAS
    log("\n=== " + card + " (bf16, do_bench median; ratio = cuBLAS time / provider time)")
    hdr = f"{'case':13s} {'cublas':>7s} {'triton':>7s} " + " ".join(f"{n:>14s}" for n in names)
    log(hdr)
    geo = {n: [] for n in names}
    for tag, *_ in SUITE:
        rs = [r for r in rows if r["case"] == tag]
        cub = next(r for r in rs if r["provider"] == "cublas")
        tri = next((r for r in rs if r["provider"].startswith("triton")), None)
        cells = []
        for n in names:
            vr = [r for r in rs if r["provider"].startswith(f"cuda-{n}-")]
            if not vr:
                cells.append(f"{'-':>14s}")
                continue
            bst = min(vr, key=lambda r: r["ms"])
            ratio = cub["ms"] / bst["ms"]
            if tag in LARGE:
                geo[n].append(ratio)
            cells.append(f"{bst['tflops']:6.0f} x{ratio:5.3f}")
        log(f"{tag:13s} {cub['tflops']:7.0f} {(tri['tflops'] if tri else float('nan')):7.0f} " + " ".join(cells))
    log("geomean x cuBLAS over the 8 large shapes: " + "  ".join(
        f"{n}={math.exp(sum(map(math.log, g)) / len(g)):.3f}" for n, g in geo.items() if g))
    log(f"\n{'case':13s} {'cublas':>7s} {'cuda-auto':>14s} {'op-cuda':>14s} {'op-triton':>14s}  router")
    auto = []
    for tag, *_ in SUITE:
        rs = {r["provider"]: r for r in rows if r["case"] == tag}
        cub = rs["cublas"]
        cells = []
        for prov in ("cuda-auto", "op-cuda", "op-triton"):
            r = rs.get(prov)
            cells.append(f"{r['tflops']:6.0f} x{cub['ms'] / r['ms']:5.3f}" if r else f"{'-':>14s}")
        if tag in LARGE and "cuda-auto" in rs:
            auto.append(cub["ms"] / rs["cuda-auto"]["ms"])
        choice = next((p for p in rs if p.startswith("router-default=")), "?")
        log(f"{tag:13s} {cub['tflops']:7.0f} " + " ".join(cells) + "  " + choice.split("=")[-1])
    if auto:
        log(f"cuda-auto geomean x cuBLAS over the 8 large shapes: {math.exp(sum(map(math.log, auto)) / len(auto)):.3f}")
    log("\nepilogues (ms; fused CUDA vs cuBLAS + separate ops):")
    for tag in ("sq4k", "l3-8b-o", "odd"):
        rs = {r["provider"]: r["ms"] for r in rows if r["case"] == tag + "/epi"}
        pairs = (("addmm", "cuda-bias"), ("cublas+add", "cuda-residual"), ("cublas+pos", "cuda-pos"),
                 ("cublas+bias+gelu+add", "cuda-bias-gelu-res"))
        log(f"{tag:9s} " + "  ".join(f"{c}: {rs.get(c, float('nan')):.3f} vs {p} {rs.get(p, float('nan')):.3f} "
                                     f"(x{rs.get(p, float('nan')) / rs.get(c, float('nan')):.2f})" for p, c in pairs))


def phase_one(args):
    """A few launches of one variant on one shape (for ncu: profile one of them)."""
    M, N, K = map(int, args.shape.split(","))
    a, b = make_inputs(M, N, K, torch.bfloat16, False, True)
    out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
    for _ in range(5):
        cg.launch_cuda_gemm(a, b, out, variant=args.variants or cg.DEFAULT_VARIANT, tile_order=args.order,
                            group=args.group)
    torch.cuda.synchronize()
    ref = (a @ b).float()
    log(f"one {args.variants} {M}x{N}x{K} rel err {((out.float() - ref).norm() / ref.norm()).item():.2e}")


def phase_router(args):
    """The op-level path: tilewright.matmul picks cuda where preferred, self-check runs once, numbers match."""
    import warnings

    import tilewright
    from tilewright import router

    a = torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16) / 64
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log(router.explain("gemm", a, w, None, None))
        y = tilewright.matmul(a, w, backend="cuda")
        lin = tilewright.linear(a, w, torch.randn(4096, device=DEV, dtype=torch.bfloat16), activation="gelu")
        log(router.explain("gemm", a[:16], w, None, None))
        log(router.explain("gemm", a[:, :4095], w[:4095], None, None))
    for c in caught:
        log("warning:", c.message)
    err = ((y.float() - (a @ w).float()).norm() / (a @ w).float().norm()).item()
    log(f"router matmul(backend=cuda) rel err {err:.2e}; linear+gelu ok={bool(torch.isfinite(lin).all())}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["build", "smoke", "numerics", "stress", "bench", "router", "one"])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--variants", default="")
    p.add_argument("--no-triton", action="store_true")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--shape", default="8192,8192,8192")
    p.add_argument("--order", default="grouped")
    p.add_argument("--group", type=int, default=8)
    a = p.parse_args()
    globals()[f"phase_{a.phase}"](a)
