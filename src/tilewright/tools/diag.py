"""``tilewright diag --what ...``: device diagnostics and kernel-level measurements that are not the side-by-side
benchmark of ``tilewright bench`` (which times the ops against their peers on the suites).

    host             per-call host time of each op path (async launches) beside its GPU time, + cProfile top lines
    layers           host time of each layer of the GEMM launch path (router, launch, op) on a small problem
    autotune         the Triton GEMM autotuner's timing of every config on the cases that benched slow
    triton-configs   explicit Triton GEMM configs on chosen shapes, TMA loads on and off, beside cuBLAS
    gemm-sm90        every sm_90a CUDA GEMM variant x tile order vs cuBLAS / Triton, fused epilogues vs unfused
    gemm-sm120       the mma.sync GEMM (built for this device's arch) per variant / tile order vs cuBLAS and WGMMA
    rmsnorm-sm90     the sm_90a CUDA RMSNorm-GEMM variants vs cuBLAS GEMM, eager unfused and the Triton fused kernel
    attention-sm90   the sm_90a attention forward variants vs the Triton forward, cuDNN and FA2 (SDPA backends)
    attention-profile  torch.profiler table of 10 forward + backward steps of the attention op
    launch           a few launches of one CUDA kernel (--kernel, --variants, --shape): a target for Nsight Compute,
                     e.g. ``ncu --kernel-name tw_gemm_sm90 --launch-skip 2 --launch-count 1 tilewright diag --what
                     launch --kernel gemm_sm90 --variants pp128x128s5``

Correctness lives in the GPU test tier (tests/*_gpu.py, tests/cuda/*_gpu.py); the numbers here are for reading, and
each kernel-level measurement also prints the relative error of what it timed so a broken build cannot look fast.
Needs a CUDA device; ``--out DIR`` also writes the rows as ``DIR/diag_<what>.csv``.
"""
from __future__ import annotations

import csv
import cProfile
import io
import math
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

WHAT = ("host", "layers", "autotune", "triton-configs", "gemm-sm90", "gemm-sm120", "rmsnorm-sm90", "attention-sm90",
        "attention-profile", "launch")
KERNELS = ("gemm_sm90", "gemm_sm120", "rmsnorm_sm90")
DEV = "cuda"
# (tag, M, N, K): square, Llama-3 8B / 70B projections at 8k tokens, decode, odd
GEMM_SUITE = [("sq4k", 4096, 4096, 4096), ("sq8k", 8192, 8192, 8192), ("l3-8b-qkv", 8192, 6144, 4096),
              ("l3-8b-o", 8192, 4096, 4096), ("l3-8b-gateup", 8192, 28672, 4096), ("l3-8b-down", 8192, 4096, 14336),
              ("l3-70b-qkv", 8192, 10240, 8192), ("l3-70b-down", 8192, 8192, 28672), ("decode16", 16, 4096, 4096),
              ("decode128", 128, 4096, 4096), ("odd", 3000, 5000, 4000)]
LARGE = {t for t, *_ in GEMM_SUITE if t not in ("decode16", "decode128", "odd")}  # the geomeans' 8 shapes
# (B, Hq, Hkv, S, D) of the attention forward comparison
ATTN_SUITE = [(4, 16, 16, 512, 64), (2, 8, 8, 8192, 64), (8, 16, 16, 2048, 128), (4, 32, 32, 4096, 128),
              (2, 16, 16, 8192, 128), (1, 16, 16, 16384, 128), (4, 32, 8, 4096, 128), (4, 16, 16, 4096, 256)]


def variants_of(what: str, kernel: str | None = None) -> dict:
    """The variant table a ``--variants`` list is checked against for this ``--what`` (empty: the option is unused)."""
    name = kernel if what == "launch" else {"gemm-sm90": "gemm_sm90", "gemm-sm120": "gemm_sm120",
                                             "rmsnorm-sm90": "rmsnorm_sm90", "attention-sm90": "attention"}.get(what)
    if name == "gemm_sm90":
        from ..cuda_fallback import gemm_sm90 as m
    elif name == "gemm_sm120":
        from ..cuda_fallback import gemm_sm120 as m
    elif name == "rmsnorm_sm90":
        from ..cuda_fallback import rmsnorm_gemm_sm90 as m
    elif name == "attention":
        from ..cuda_fallback import attention_sm90 as m
    else:
        return {}
    return dict(m.VARIANTS)


def _geo(xs) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def _rel(out, ref) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


def _ab(M, N, K, dtype=torch.bfloat16):
    a = torch.randn(M, K, device=DEV, dtype=dtype)
    b = (torch.randn(K, N, device=DEV) / math.sqrt(K)).to(dtype)
    return a, b


def _try(rows, row, fn, timer, ref=None, out=None):
    """Time ``fn`` into ``row`` (ms, error against ``ref`` when given) and append it; one provider failing is printed
    and skipped so it does not lose the others."""
    try:
        fn()
        if ref is not None:
            row["err"] = f"{_rel(out, ref):.1e}"
        row["ms"] = timer(fn)
    except Exception as e:  # noqa: BLE001
        print(f"  {row.get('case', '')} {row.get('provider', '')}: {type(e).__name__}: {str(e)[:160]}", flush=True)
        return None
    rows.append(row)
    return row["ms"]


def _events_ms(fn, reps: int = 20, inner: int = 3) -> float:
    """Median ms per call over ``reps`` CUDA-event samples of ``inner`` back-to-back calls (host launch cost of small
    problems overlaps the previous call), after 3 warm-up calls."""
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / inner)
    return statistics.median(ts)


# ------------------------------------------------------------------------------------------------ host cost
def _op_cases(M, N, K):
    import tilewright

    a, b = _ab(M, N, K)
    bias = torch.randn(N, device=DEV, dtype=torch.bfloat16)
    r = torch.randn(M, N, device=DEV, dtype=torch.bfloat16)
    cases = {"gemm": lambda: tilewright.matmul(a, b), "bias": lambda: tilewright.matmul(a, b, bias=bias),
             "residual": lambda: tilewright.matmul(a, b, residual=r), "cublas": lambda: a @ b}
    if M % 1024 == 0:
        x = a.view(M // 1024, 1024, K)
        pos = torch.randn(1024, N, device=DEV, dtype=torch.bfloat16)
        cases["pos_embed"] = lambda: tilewright.matmul(x, b, residual=pos)
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device=DEV)
    cases["fp8"] = lambda: tilewright.scaled_mm(a8, b8, one, one)
    cases["scaled_mm_cublaslt"] = lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)
    g = torch.ones(K, device=DEV, dtype=torch.bfloat16)
    cases["rms_norm_linear"] = lambda: tilewright.rms_norm_linear(a, g, b.t())
    return cases


def _per_call_us(fn, n=300) -> tuple[float, float]:
    """(host us per call with asynchronous launches - bench/host.host_us, the host benchmark's own measure - and wall
    us per call of ``n`` calls including the final synchronisation)."""
    from ..bench.host import host_us

    host = host_us(fn, calls=n, runs=5)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return host, (time.perf_counter() - t0) / n * 1e6


def profile_calls(name, fn, calls=300) -> None:
    """Print cProfile's top lines by own time over ``calls`` calls of ``fn`` (after one warm-up call), headed
    ``===== cProfile <name>``: where an op's host time goes (``tilewright diag --what host`` and the host scripts
    under perf/results)."""
    fn()
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    print(f"\n===== cProfile {name} ({calls} calls, by own time)")
    print("\n".join(ln[:170] for ln in s.getvalue().splitlines()[4:34]), flush=True)


def diag_host(args, rows):
    """Host vs GPU time per call: do_bench flushes L2 with a ~0.1 ms memset between calls, so host time per call above
    that shows up in benchmark numbers; this separates the two (4096^3), then profiles each case of
    ``tilewright bench --op host`` (bench/host.py)."""
    from ..bench.common import time_ms

    for name, fn in _op_cases(4096, 4096, 4096).items():
        host, wall = _per_call_us(fn, 200)
        gpu = time_ms(fn) * 1e3
        try:
            graph = time_ms(fn, cudagraph=True) * 1e3
        except Exception as e:  # noqa: BLE001
            print(f"  {name}: graph timing failed: {type(e).__name__}: {str(e)[:120]}")
            graph = float("nan")
        rows.append(dict(case=name, host_us=host, wall_us=wall, do_bench_us=gpu, graph_us=graph))
        print(f"{name:<20} host {host:8.1f} us/call | wall {wall:8.1f} us/call | do_bench {gpu:8.1f} us | "
              f"graph {graph:8.1f} us", flush=True)
    from ..bench import host as host_bench

    # the host benchmark's cases (issue-sized problems whose kernels outlast their launch), profiled one by one
    suite = host_bench.SUITES["default"]
    for name, (ours, _torch_peer) in host_bench.cases(suite["gemm"], suite["attention"], DEV, torch.bfloat16).items():
        profile_calls(name, ours)


def diag_layers(args, rows):
    """Host cost of each layer of the GEMM launch path on 512^3 (tuning sweeps are left out unless TILEWRIGHT_AUTOTUNE=full)."""
    import tilewright
    from .. import router
    from ..autotune.space import default_gemm_config
    from ..triton_kernels import gemm as tg

    M = N = K = 512
    a, b = _ab(M, N, K)
    r = torch.randn(M, N, device=DEV, dtype=torch.bfloat16)
    out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
    cfg = default_gemm_config(M, N, K)
    layers = {
        "torch a @ b": lambda: a @ b,
        "router.decide auto": lambda: router.decide("gemm", a, b, None, None),
        "router.decide triton": lambda: router.decide("gemm", a, b, None, None, backend="triton"),
        "router.decide auto +res": lambda: router.decide("gemm", a, b, None, r),
        "launch_gemm(config=)": lambda: tg.launch_gemm(a, b, out, config=cfg),
        "launch_gemm": lambda: tg.launch_gemm(a, b, out),
        "matmul triton": lambda: tilewright.matmul(a, b, backend="triton"),
        "matmul cuda": lambda: tilewright.matmul(a, b, backend="cuda"),
        "matmul auto": lambda: tilewright.matmul(a, b),
        "matmul triton +res": lambda: tilewright.matmul(a, b, residual=r, backend="triton"),
    }
    if torch.cuda.get_device_capability()[0] == 9:
        from ..cuda_fallback import gemm_sm90 as cg

        layers["launch_cuda_gemm"] = lambda: cg.launch_cuda_gemm(a, b, out)
    for name, fn in layers.items():
        try:
            host, _ = _per_call_us(fn)
        except Exception as e:  # noqa: BLE001
            print(f"{name:<34} failed: {type(e).__name__}: {str(e)[:150]}", flush=True)
            continue
        rows.append(dict(case=name, host_us=host))
        print(f"{name:<34} {host:8.1f} us/call", flush=True)
    for name in ("matmul triton", "matmul cuda", "matmul triton +res"):
        try:
            profile_calls(name, layers[name])
        except Exception as e:  # noqa: BLE001
            print(f"{name}: {type(e).__name__}: {str(e)[:150]}")


def diag_autotune(args, rows):
    """The autotuner's per-config timings on the cases that benched slow, and decode128's default config beside
    alternatives (CUDA-graph timing: microsecond kernels)."""
    from ..autotune.space import _config
    from ..bench.common import time_ms
    from ..triton_kernels import gemm as tg

    for tag, (M, N, K), case in (("sq4k", (4096, 4096, 4096), "pos_embed"), ("sq4k", (4096, 4096, 4096), "fp8"),
                                  ("odd", (3000, 5000, 4000), "residual"), ("odd", (3000, 5000, 4000), "gemm"),
                                  ("l3-8b-o", (8192, 4096, 4096), "pos_embed")):
        fn = _op_cases(M, N, K)[case]
        fn()
        torch.cuda.synchronize()
        timings = getattr(tg.gemm_kernel, "configs_timings", None) or {}
        print(f"\n== {tag}/{case}: best {getattr(tg.gemm_kernel, 'best_config', None)} | bench "
              f"{time_ms(fn) * 1e3:.1f} us | graph {time_ms(fn, cudagraph=True) * 1e3:.1f} us")
        for cfg, t in sorted(timings.items(), key=lambda kv: kv[1][0] if isinstance(kv[1], (list, tuple)) else kv[1]):
            print(f"   {t}  {cfg}")
            rows.append(dict(case=f"{tag}/{case}", config=str(cfg), ms=t[0] if isinstance(t, (list, tuple)) else t))
    M, N, K = 128, 4096, 4096
    a, b = _ab(M, N, K)
    out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
    print(f"\n== decode128 cublas graph {time_ms(lambda: a @ b, cudagraph=True) * 1e3:.1f} us")
    for bm, bn, bk, w, s, pers, tma in ((64, 64, 128, 4, 4, True, False), (64, 64, 128, 4, 4, False, False),
                                        (64, 64, 128, 4, 3, False, False), (64, 64, 256, 4, 3, False, False),
                                        (64, 32, 256, 4, 4, False, False), (128, 64, 128, 8, 4, False, False),
                                        (64, 64, 128, 4, 4, False, True), (32, 64, 256, 4, 4, False, False)):
        cfg = _config(bm, bn, bk, w, s, persistent=pers, tma=tma)

        def fn(cfg=cfg):
            return tg.launch_gemm(a, b, out, config=cfg)
        fn()
        g, d = time_ms(fn, cudagraph=True) * 1e3, time_ms(fn) * 1e3
        rows.append(dict(case="decode128", config=str(cfg), graph_us=g, do_bench_us=d))
        print(f"   {bm}x{bn}x{bk} w{w} s{s} persistent={pers} tma={tma}: graph {g:.1f} us | do_bench {d:.1f} us")


def diag_triton_configs(args, rows):
    """Explicit Triton GEMM configs beside cuBLAS; each with descriptor loads allowed and forced off (pointer loads),
    so the two load paths of one tile shape compare directly. M <= 256: CUDA-graph timing."""
    from ..autotune.space import _config
    from ..bench.common import time_ms
    from ..triton_kernels import gemm as tg

    def cfg(bm, bn, bk, w, s, persistent=True, flatten=False):
        split = 4 if bm * bn > 128 * 128 else 2 if bn >= 128 else 1
        return _config(bm, bn, bk, w, s, split=split, persistent=persistent, flatten=flatten)

    def run(M, N, K, configs, tma_options=(True, False), b_kmajor=False):
        a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
        b = (torch.randn(N, K, device=DEV, dtype=torch.bfloat16).t() if b_kmajor
             else torch.randn(K, N, device=DEV, dtype=torch.bfloat16))
        ref = a @ b
        graph = M <= 256
        t_ref = time_ms(lambda: a @ b, cudagraph=graph)
        case = f"{M}x{N}x{K}{'/b-kmajor' if b_kmajor else ''}"
        print(f"--- {case}: cublas {t_ref * 1e3:.1f} us ({2 * M * N * K / t_ref / 1e9:.0f} TF)", flush=True)
        for c in configs:
            for tma in tma_options:
                out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
                row = dict(case=case, provider=f"tma={int(tma)} {c.all_kwargs()}")
                t = _try(rows, row, lambda: tg.launch_gemm(a, b, out, use_tma=tma, config=c),
                         lambda f: time_ms(f, cudagraph=graph), ref, out)
                if t is not None:
                    print(f"  {row['provider']:<160} {t * 1e3:8.1f} us  x{t_ref / t:5.3f}  err {row['err']}",
                          flush=True)

    big = [cfg(128, 256, 64, 8, 3), cfg(128, 256, 64, 8, 3, flatten=True), cfg(128, 128, 64, 8, 4),
           cfg(128, 128, 64, 8, 4, persistent=False), cfg(256, 128, 64, 8, 3),
           cfg(128, 256, 64, 8, 3, persistent=False), cfg(128, 128, 64, 4, 4), cfg(128, 256, 64, 8, 4)]
    run(3000, 5000, 4000, big)
    run(3072, 5120, 4096, big[:4], tma_options=(True,))
    run(3000, 5000, 4000, big[:4], tma_options=(True,), b_kmajor=True)
    small = [cfg(16, 64, 128, 4, 4), cfg(16, 32, 256, 4, 4), cfg(16, 32, 256, 4, 6), cfg(16, 16, 256, 4, 4),
             cfg(16, 32, 128, 4, 8), cfg(16, 64, 256, 4, 3, persistent=False), cfg(16, 32, 512, 4, 3),
             cfg(16, 32, 256, 2, 4), cfg(16, 16, 512, 2, 4)]
    run(16, 4096, 4096, small)
    run(16, 4096, 4096, small[:5], tma_options=(True,), b_kmajor=True)
    mid = [cfg(64, 64, 128, 4, 4), cfg(64, 128, 64, 4, 4), cfg(32, 64, 128, 4, 4), cfg(64, 32, 256, 4, 4),
           cfg(128, 64, 64, 4, 4), cfg(64, 64, 256, 4, 3), cfg(128, 32, 128, 4, 4)]
    run(128, 4096, 4096, mid)


# ------------------------------------------------------------------------------------------------ CUDA kernels
def _suite(args):
    return [s for s in GEMM_SUITE if not args.cases or s[0] in args.cases]


def diag_gemm_sm90(args, rows):
    """Per suite shape: cuBLAS, the Triton kernel's untuned default config, the op on each backend, every variant x
    tile order (best printed); on sq4k / l3-8b-o / odd the fused epilogues beside cuBLAS + separate ops."""
    import tilewright
    from .. import router
    from ..autotune.space import default_gemm_config
    from ..bench.common import time_ms
    from ..cuda_fallback import gemm_sm90 as cg
    from ..triton_kernels.gemm import launch_gemm

    names = args.variants or list(cg.VARIANTS)
    orders = [("grouped", 8)] if args.quick else [("grouped", 8), ("hilbert", 8), ("grouped", 16)]
    geo = {n: [] for n in names}
    for tag, M, N, K in _suite(args):
        a, b = _ab(M, N, K)
        out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
        ref = (a @ b).float()
        fl = 2 * M * N * K
        base = dict(case=tag, M=M, N=N, K=K)
        t_cublas = time_ms(lambda: torch.matmul(a, b, out=out))
        rows.append(dict(base, provider="cublas", ms=t_cublas))
        cfg = default_gemm_config(M, N, K)
        _try(rows, dict(base, provider="triton-default-config"), lambda: launch_gemm(a, b, out, config=cfg), time_ms,
             ref, out)
        _try(rows, dict(base, provider="cuda-auto"), lambda: cg.launch_cuda_gemm(a, b, out), time_ms, ref, out)
        for backend in ("cuda", "triton"):  # the op path: router, checks, allocation on top of the kernel
            _try(rows, dict(base, provider=f"op-{backend}"),
                 lambda backend=backend: tilewright.matmul(a, b, backend=backend), time_ms)
        if tag in ("sq4k", "l3-8b-o", "odd"):
            bias = torch.randn(N, device=DEV, dtype=torch.bfloat16)
            res = torch.randn(M, N, device=DEV, dtype=torch.bfloat16)
            pe = torch.randn(M // 8, N, device=DEV, dtype=torch.bfloat16)
            pe3 = pe.unsqueeze(0).expand(8, M // 8, N)
            for prov, fn in (("addmm", lambda: torch.addmm(bias, a, b)),
                             ("cuda-bias", lambda: cg.launch_cuda_gemm(a, b, out, bias=bias)),
                             ("cublas+add", lambda: torch.matmul(a, b) + res),
                             ("cuda-residual", lambda: cg.launch_cuda_gemm(a, b, out, residual=res.reshape(1, M, N))),
                             ("cublas+pos", lambda: torch.matmul(a, b).view(8, M // 8, N) + pe),
                             ("cuda-pos", lambda: cg.launch_cuda_gemm(a, b, out, residual=pe3)),
                             ("cublas+bias+gelu+add", lambda: torch.nn.functional.gelu(torch.addmm(bias, a, b)) + res),
                             ("cuda-bias-gelu-res", lambda: cg.launch_cuda_gemm(
                                 a, b, out, bias=bias, activation="gelu", residual=res.reshape(1, M, N)))):
                _try(rows, dict(base, case=tag + "/epi", provider=prov), fn, time_ms)
        best = None
        for name in names:
            for order, group in orders:
                def fn(name=name, order=order, group=group):
                    return cg.launch_cuda_gemm(a, b, out, variant=name, tile_order=order, group=group)
                t = _try(rows, dict(base, provider=f"cuda-{name}-{order}{group}"), fn, time_ms, ref, out)
                if t is not None and (best is None or t < best[1]):
                    best = (f"cuda-{name}-{order}{group}", t)
            vt = [r["ms"] for r in rows if r["case"] == tag and r["provider"].startswith(f"cuda-{name}-")]
            if vt and tag in LARGE:
                geo[name].append(t_cublas / min(vt))
        choice = router.decide("gemm", a, b, None, None).backend
        line = f"{tag:13s} cublas {fl / t_cublas / 1e9:6.0f} TF"
        if best:
            line += f"  best {best[0]:32s} {fl / best[1] / 1e9:6.0f} TF  x{t_cublas / best[1]:.3f}"
        print(line + f"  router: {choice}", flush=True)
    print("geomean x cuBLAS (time ratio) over the large shapes: " +
          "  ".join(f"{n}={_geo(g):.3f}" for n, g in geo.items() if g))


def diag_gemm_sm120(args, rows):
    """The mma.sync GEMM built for this device's arch, every variant (grouped8) and the default's other tile orders,
    beside cuBLAS and (on sm_90) the WGMMA kernel's pick."""
    from ..bench.common import time_ms
    from ..cuda_fallback import gemm_sm120 as mg

    hopper = torch.cuda.get_device_capability()[0] == 9
    names = args.variants or list(mg.VARIANTS)
    provs = [(v, "grouped", 8) for v in names] + [(mg.DEFAULT_VARIANT, o, 8) for o in ("morton", "hilbert",
                                                                                        "row_major")]
    print(f"arch {mg.device_arch(0)}")
    geo = []
    for tag, M, N, K in _suite(args):
        a, b = _ab(M, N, K)
        out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
        ref = (a @ b).float()
        base = dict(case=tag, M=M, N=N, K=K)
        t_cublas = time_ms(lambda: torch.matmul(a, b, out=out))
        rows.append(dict(base, provider="cublas", ms=t_cublas))
        if hopper:
            from ..cuda_fallback import gemm_sm90 as cg

            _try(rows, dict(base, provider=f"wgmma-{cg.pick_variant(M, N, K).name}"),
                 lambda: cg.launch_cuda_gemm(a, b, out), time_ms, ref, out)
        best = None
        for v, order, group in provs:
            def fn(v=v, order=order, group=group):
                return mg.launch_mma_gemm(a, b, out, variant=v, tile_order=order, group=group)
            t = _try(rows, dict(base, provider=f"mma-{v}-{order}{group}"), fn, time_ms, ref, out)
            if t is not None and (best is None or t < best[1]):
                best = (f"mma-{v}-{order}{group}", t)
        if best:
            print(f"{tag:13s} cublas {2 * M * N * K / t_cublas / 1e9:6.0f} TF | mma best {best[0]:28s} "
                  f"{2 * M * N * K / best[1] / 1e9:6.0f} TF x{t_cublas / best[1]:.3f} cuBLAS", flush=True)
            if tag in LARGE:
                geo.append(t_cublas / best[1])
    print(f"mma best geomean x cuBLAS over the large shapes: {_geo(geo):.3f}")


def diag_rmsnorm_sm90(args, rows):
    """RMSNorm-GEMM providers on the large shapes, interleaved in 3 rounds against clock drift, CUDA-event medians;
    the plain sm_90 GEMM of the default tile is the floor the fused kernel's unchanged mainloop can reach."""
    import torch.nn.functional as F

    from ..cuda_fallback import gemm_sm90 as cg
    from ..cuda_fallback import rmsnorm_gemm_sm90 as rg
    from ..triton_kernels.rmsnorm_gemm import launch_rmsnorm_gemm

    eps = 1e-6
    # the register-A builds beside the -xf (transform-warp) ones measured on H200
    names = args.variants or ["coop128x256s3-xf", "pp64x256s4-xf", "coop128x256s3", "coop128x256s3-sb"]

    def timed(fn, reps):
        for _ in range(3):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for s, e in zip(starts, ends):
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    geo: dict[str, list] = {}
    for tag, M, N, K in [s for s in _suite(args) if s[0] in LARGE]:
        x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
        g = (1 + 0.5 * torch.randn(K, device=DEV)).to(torch.bfloat16)
        w = (torch.randn(N, K, device=DEV) / math.sqrt(K)).to(torch.bfloat16)
        y = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
        rstd = torch.empty(M, device=DEV)
        wt = w.t()
        fns = {"cublas_gemm": lambda: torch.mm(x, wt, out=y),
               "eager_unfused": lambda: F.linear(F.rms_norm(x, (K,), g, eps), w),
               "triton_fused": lambda: launch_rmsnorm_gemm(x, g, wt, y, rstd, eps)}
        for v in names:
            fns[f"cuda_{v}"] = (lambda v=v: rg.launch_cuda_rmsnorm_gemm(x, g, wt, y, rstd, eps, variant=v))
        fns["cuda_plain_gemm"] = lambda: cg.launch_cuda_gemm(x, wt, y, variant=rg.DEFAULT_VARIANT.split("-")[0])
        reps = max(10, min(200, int(60 / (2.0 * M * N * K / 7e11))))  # ~60 ms of GEMM per provider
        times = {k: [] for k in fns}
        for _ in range(3):
            for k, fn in fns.items():
                try:
                    times[k].append(timed(fn, reps))
                except Exception as e:  # noqa: BLE001
                    print(f"{tag} {k}: {type(e).__name__}: {str(e)[:200]}")
                    times[k].append(float("nan"))
        base = statistics.median(times["cublas_gemm"])
        for k, ts in times.items():
            ms = statistics.median(ts)
            rows.append(dict(case=tag, M=M, N=N, K=K, provider=k, ms=ms, vs_cublas=ms / base))
            geo.setdefault(k, []).append(ms / base)
        print(f"{tag:>13} " + " ".join(f"{k}={statistics.median(v):.3f}ms({statistics.median(v) / base:.3f}x)"
                                       for k, v in times.items()), flush=True)
    print("geomean time / cuBLAS GEMM: " + " ".join(f"{k}={_geo(v):.3f}" for k, v in sorted(geo.items())))


def diag_attention_sm90(args, rows):
    """Forward TFLOP/s of each CUDA variant, the Triton forward, cuDNN and FA2 (SDPA backends), CUDA-event medians."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..cuda_fallback import attention_sm90 as ca
    from ..triton_kernels.attention import attention_forward

    names = args.variants or [None]  # None: each head dim's default variant (attention_sm90.pick_variant)
    vs_cudnn, vs_triton = [], []

    def sdpa(backend, q, k, v, causal):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                    enable_gqa=q.shape[1] != k.shape[1])
    for B, Hq, Hkv, S, D in ATTN_SUITE:
        q = torch.randn(B, Hq, S, D, device=DEV, dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hkv, S, D, device=DEV, dtype=torch.bfloat16) for _ in range(2))
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], device=DEV)
        for causal in (False, True):
            fl = 4.0 * B * Hq * S * S * D * (0.5 if causal else 1.0)
            case = f"{B}x{Hq}/{Hkv}x{S}x{D}|{'causal' if causal else 'full'}"
            provs = {f"cuda-{n or 'default'}": (lambda n=n: ca.launch_attention(q, k, v, out, lse, causal, None, n))
                     for n in names}
            provs["triton"] = lambda: attention_forward(q, k, v, out, lse, causal, 1.0 / math.sqrt(D))
            provs["sdpa-cudnn"] = lambda: sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
            provs["sdpa-flash"] = lambda: sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, causal)
            res = {}
            for p, fn in provs.items():
                t = _try(rows, dict(case=case, provider=p), fn, _events_ms)
                if t is not None:
                    res[p] = t
                    rows[-1]["tflops"] = fl / t / 1e9
            first = f"cuda-{names[0] or 'default'}"
            if first in res:
                if "sdpa-cudnn" in res and D == 128 and S >= 2048:
                    vs_cudnn.append(res["sdpa-cudnn"] / res[first])
                if "triton" in res:
                    vs_triton.append(res["triton"] / res[first])
            print(f"{case:28s} TFLOP/s " + "  ".join(f"{p}={fl / t / 1e9:6.1f}" for p, t in res.items()), flush=True)
    print(f"cuda-{names[0] or 'default'}: vs cuDNN geomean (hdim 128, S >= 2048) {_geo(vs_cudnn):.3f}x; "
          f"vs Triton forward min "
          f"{min(vs_triton, default=float('nan')):.3f}x geomean {_geo(vs_triton):.3f}x over {len(vs_triton)} rows")


def diag_attention_profile(args, rows):
    """Where the time of a small attention training step goes (forward + backward of the op, 10 steps)."""
    import tilewright
    from torch.profiler import ProfilerActivity, profile

    q = torch.randn(4, 16, 512, 64, device=DEV, dtype=torch.bfloat16, requires_grad=True)

    def step():
        o = tilewright.flash_attention(q, q, q)
        torch.autograd.grad(o, q, torch.ones_like(o))
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=50))


def diag_launch(args, rows):
    """Five launches of one kernel on one shape (bf16), then its relative error against cuBLAS."""
    M, N, K = args.shape or (8192, 8192, 8192)
    variant = args.variants[0] if args.variants else None
    a, b = _ab(M, N, K)
    if args.kernel == "rmsnorm_sm90":  # B K-major, as weight.t() (the kernel's only B layout)
        b = b.t().contiguous().t()
    out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
    if args.kernel == "gemm_sm90":
        from ..cuda_fallback import gemm_sm90 as cg

        def fn():
            return cg.launch_cuda_gemm(a, b, out, variant=variant, tile_order=args.order, group=args.group)
        ref = a @ b
    elif args.kernel == "gemm_sm120":
        from ..cuda_fallback import gemm_sm120 as mg

        def fn():
            return mg.launch_mma_gemm(a, b, out, variant=variant, tile_order=args.order, group=args.group)
        ref = a @ b
    else:
        from ..cuda_fallback import rmsnorm_gemm_sm90 as rg

        g = torch.ones(K, device=DEV, dtype=torch.bfloat16)
        rstd = torch.empty(M, device=DEV)

        def fn():
            return rg.launch_cuda_rmsnorm_gemm(a, g, b, out, rstd, 1e-6, variant=variant, tile_order=args.order,
                                               group=args.group)
        ref = torch.nn.functional.rms_norm(a, (K,), g, 1e-6) @ b
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    err = _rel(out, ref)
    rows.append(dict(kernel=args.kernel, variant=variant or "default", M=M, N=N, K=K, err=err))
    print(f"launch {args.kernel} {variant or 'default'} {M}x{N}x{K}: 5 launches, rel err {err:.2e}")


def run(args) -> int:
    """Run ``args.what`` (arguments already checked by the CLI); 1 when there is no CUDA device to measure on."""
    from ..bench.common import on_gpu

    if not on_gpu():
        print(f"tilewright diag: error: --what {args.what} needs a CUDA device (and TRITON_INTERPRET unset)",
              file=sys.stderr)
        return 1
    rows: list[dict] = []
    print(f"device: {torch.cuda.get_device_name()} | torch {torch.__version__} | "
          f"TILEWRIGHT_AUTOTUNE={os.environ.get('TILEWRIGHT_AUTOTUNE', '(unset)')}", flush=True)
    globals()["diag_" + args.what.replace("-", "_")](args, rows)
    for r in rows:
        if "ms" in r and "M" in r and "tflops" not in r:
            r["tflops"] = 2.0 * r["M"] * r["N"] * r["K"] / r["ms"] / 1e9
    if args.out and rows:
        path = Path(args.out) / f"diag_{args.what}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(dict.fromkeys(k for r in rows for k in r))
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {path}")
    return 0
