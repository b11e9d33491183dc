"""Device-machine driver for the sm_90a flash-attention forward (cuda_fallback/attention_sm90.cu).

One subcommand per phase so gpu_attention_sm90.sh can run each under its own timeout (a hung kernel must not eat the
lease). Every phase ends with one ``RESULT ...`` line that the shell script collects into the summary.

    python scripts/gpu_attention_sm90.py build                  compile every variant x head dim x causal (x fp16)
    python scripts/gpu_attention_sm90.py numerics a b c c64      simplest -> full; "PASS <v>" lines name what works
    python scripts/gpu_attention_sm90.py grad <v>                CUDA forward + Triton backward vs fp64 and SDPA
    python scripts/gpu_attention_sm90.py stress <v> [n]          n (10000) randomized small launches, all checked
    python scripts/gpu_attention_sm90.py sanitize <v>            one small problem per head dim (compute-sanitizer)
    python scripts/gpu_attention_sm90.py bench <v> [<v2> ...]    CUDA events median vs Triton, cuDNN, FA2 (SDPA)

Numerics rule: the kernel's relative (Frobenius) error against an fp64 reference must be <= 2x the error of torch's
SDPA in the same dtype on the same inputs (floor 1e-5: SDPA is exact on a 1-key problem); LSE within 5e-3 of the fp64 LSE; no NaN anywhere.
"""
from __future__ import annotations

import concurrent.futures as cf
import csv
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from tilewright.cuda_fallback import attention_sm90 as ca  # noqa: E402
from tilewright.cuda_fallback import build_check  # noqa: E402
from tilewright.cuda_fallback.runtime import build  # noqa: E402
from tilewright.reference import attention_reference  # noqa: E402

OUT = os.environ.get("OUT", "out")
os.makedirs(OUT, exist_ok=True)
DEV = "cuda"
bf16, f16 = torch.bfloat16, torch.float16


def log(*a):
    print(*a, flush=True)


def make(B, Hq, Hkv, Sq, Skv, D, dtype, seed=0, layout="bhsd"):
    """q, k, v on the GPU; layout "bshd" stores (B, S, H, D) and returns the (B, H, S, D) transposed views."""
    g = torch.Generator(device="cpu").manual_seed(seed)

    def t(H, S):
        if layout == "bshd":
            return torch.randn(B, S, H, D, generator=g).to(DEV, dtype).transpose(1, 2)
        return torch.randn(B, H, S, D, generator=g).to(DEV, dtype)
    return t(Hq, Sq), t(Hkv, Skv), t(Hkv, Skv)


def rel(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])


# ------------------------------------------------------------------------------------------------ build
def all_builds():
    out = []
    for name in ca.VARIANTS:
        for D in ca.HEAD_DIMS:
            for causal in (False, True):
                out.append((name, D, causal, False))
    for D in ca.HEAD_DIMS:
        for causal in (False, True):
            out.append((ca.DEFAULT_VARIANT, D, causal, True))
    for name in ca.VARIANTS:  # the stress phase's fp16 launches (hdim 128) with whichever variant passed
        if name != ca.DEFAULT_VARIANT:
            out += [(name, 128, False, True), (name, 128, True, True)]
    return out


def cmd_build(_args):
    t0 = time.time()
    builds = all_builds()

    def one(b):
        name, D, causal, fp16 = b
        v = ca.VARIANTS[name]
        return b, build.compile_source(ca.SOURCE, "sm_90a", v.defines(D, causal, fp16))

    bad = 0
    with cf.ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as ex:
        futs = [ex.submit(one, b) for b in builds]
        for f in futs:
            try:
                (name, D, causal, fp16), bld = f.result()
            except Exception as e:  # noqa: BLE001
                bad += 1
                log(f"COMPILE FAIL {e}")
                continue
            info = build_check.parse_ptxas(bld.log)
            warn = [ln.strip() for ln in bld.log.splitlines() if build_check.PERF_WARNINGS.search(ln)]
            if info["spills"] or warn:
                bad += 1
            log(f"{name:7s} hdim{D:<3d} {'causal' if causal else 'full  '} {'fp16' if fp16 else 'bf16'} "
                f"regs={info['regs']} spills={info['spills']} {'WARN ' + warn[0][:100] if warn else ''}")
    log(f"RESULT build: {len(builds) - bad}/{len(builds)} ok in {time.time() - t0:.1f}s")
    return 1 if bad else 0


# ------------------------------------------------------------------------------------------------ numerics
# (B, Hq, Hkv, Sq, Skv, D, causal, dtype, layout), simplest first: one block, ragged tails, GQA, Sq != Skv both
# ways, every head dim, fp16, strided (B, S, H, D) storage, many key blocks (ring wrap-around).
CASES = [
    (1, 2, 2, 128, 128, 128, False, bf16, "bhsd"),
    (1, 2, 2, 128, 128, 128, True, bf16, "bhsd"),
    (1, 2, 2, 1, 1, 128, False, bf16, "bhsd"),
    (2, 4, 2, 300, 300, 128, False, bf16, "bhsd"),
    (2, 4, 2, 300, 300, 128, True, bf16, "bhsd"),
    (1, 2, 1, 77, 333, 64, False, bf16, "bhsd"),
    (1, 2, 1, 333, 77, 64, True, bf16, "bhsd"),
    (1, 4, 4, 1000, 1000, 64, True, bf16, "bhsd"),
    (1, 2, 2, 257, 257, 256, False, bf16, "bhsd"),
    (1, 2, 2, 257, 190, 256, True, bf16, "bhsd"),
    (2, 8, 2, 1024, 1024, 128, True, bf16, "bhsd"),
    (1, 4, 2, 300, 300, 128, True, f16, "bhsd"),
    (2, 4, 4, 200, 200, 128, False, bf16, "bshd"),
    (1, 2, 2, 4096, 4096, 128, True, bf16, "bhsd"),
    (1, 2, 2, 2048, 2048, 128, False, bf16, "bhsd"),
]


def check_case(var, case, seed=0):
    B, Hq, Hkv, Sq, Skv, D, causal, dtype, layout = case
    q, k, v = make(B, Hq, Hkv, Sq, Skv, D, dtype, seed, layout)
    out = torch.full_like(q, float("nan"))  # keeps q's layout, like the op
    lse = torch.full((B, Hq, Sq), float("nan"), device=DEV)
    ca.launch_attention(q, k, v, out, lse, causal, None, var)
    ro, rl = attention_reference(q.double(), k.double(), v.double(), causal)
    torch.cuda.synchronize()
    e = rel(out, ro)
    es = rel(sdpa(q, k, v, causal), ro)
    el = (lse.double() - rl).abs().max().item()
    nan = bool(torch.isnan(out).any() or torch.isnan(lse).any())
    ok = (not nan) and math.isfinite(e) and e <= max(2 * es, 1e-5) and el <= 5e-3  # floor: SDPA can be exact
    return ok, e, es, el, nan, (out.double() - ro).abs().max().item()


def cmd_numerics(args):
    names = args or list(ca.VARIANTS)
    path = os.path.join(OUT, "attn_numerics.csv")
    new = not os.path.exists(path)
    passed = []
    with open(path, "a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(["variant", "case", "rel_err", "sdpa_rel_err", "lse_max_err", "max_abs_err", "nan", "ok"])
        for name in names:
            var = ca.VARIANTS[name]
            log(f"--- variant {name} ({var})")
            fails = 0
            for case in CASES:
                tag = "x".join(map(str, case[:6])) + f"|{'causal' if case[6] else 'full'}|{str(case[7])[6:]}|{case[8]}"
                log(f"  start {tag}")  # a hang shows which case
                try:
                    ok, e, es, el, nan, mx = check_case(var, case)
                except Exception as ex:  # noqa: BLE001
                    log(f"  ERROR {tag}: {type(ex).__name__}: {ex}")
                    w.writerow([name, tag, "", "", "", "", "", "ERROR"])
                    fails += 1
                    if "illegal" in str(ex).lower() or "launch failure" in str(ex).lower():
                        break  # the context is dead after a device fault
                    continue
                fails += not ok
                w.writerow([name, tag, f"{e:.3e}", f"{es:.3e}", f"{el:.3e}", f"{mx:.3e}", int(nan), int(ok)])
                fh.flush()
                log(f"  {'ok  ' if ok else 'FAIL'} {tag}: rel {e:.2e} (sdpa {es:.2e}) lse {el:.1e} max|d| {mx:.1e}"
                    f"{' NaN' if nan else ''}")
            log(f"{'PASS' if fails == 0 else 'FAILED'} {name} ({len(CASES) - fails}/{len(CASES)})")
            if fails == 0:
                passed.append(name)
    log(f"RESULT numerics: passed [{' '.join(passed)}] of [{' '.join(names)}]")
    return 0 if len(passed) == len(names) else 1


# ------------------------------------------------------------------------------------------------ gradient
def cmd_grad(args):
    import tilewright

    os.environ["TILEWRIGHT_CUDA_ATTN_VARIANT"] = args[0]
    worst, bad = 0.0, 0
    # two cases: every new (head dim, causal) costs Triton compiles of the backward (fresh device, no cache)
    for (B, Hq, Hkv, S, D, causal) in ((2, 4, 2, 300, 128, True), (1, 2, 1, 257, 64, False)):
        q, k, v = make(B, Hq, Hkv, S, S, D, bf16, seed=3)
        g = torch.Generator(device="cpu").manual_seed(4)
        dout = torch.randn(q.shape, generator=g).to(DEV, bf16)
        dl = torch.randn(q.shape[:3], generator=g).to(DEV)

        def grads(fn, with_lse):
            qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
            out, lse = fn(qq, kk, vv)
            loss = (out.double() * dout.double()).sum()
            if with_lse:
                loss = loss + (lse.double() * dl.double()).sum()
            return torch.autograd.grad(loss, (qq, kk, vv))

        def ours(backend):
            return lambda a, b, c: tilewright.flash_attention(a, b, c, causal=causal, return_lse=True,
                                                              backend=backend)

        ref64 = lambda a, b, c: attention_reference(a.double(), b.double(), c.double(), causal)  # noqa: E731
        sd = lambda a, b, c: (sdpa(a, b, c, causal), torch.zeros(a.shape[:3], device=DEV))  # noqa: E731
        for with_lse in (False, True):
            r = grads(ref64, with_lse)
            c = grads(ours("cuda"), with_lse)
            peer = grads(ours("triton"), with_lse) if with_lse else grads(sd, False)
            for name, gc, gp, gr in zip(("dq", "dk", "dv"), c, peer, r):
                ec, ep = rel(gc, gr), rel(gp, gr)
                ok = math.isfinite(ec) and ec <= 2 * ep + 1e-6
                bad += not ok
                worst = max(worst, ec / max(ep, 1e-12))
                log(f"  {'ok  ' if ok else 'FAIL'} B{B} H{Hq}/{Hkv} S{S} D{D} {'causal' if causal else 'full'} "
                    f"{'+lse ' if with_lse else ''}{name}: cuda-fwd {ec:.2e} vs "
                    f"{'triton-fwd' if with_lse else 'sdpa'} {ep:.2e}")
    log(f"RESULT grad ({args[0]}): {'ok' if bad == 0 else f'{bad} FAIL'}; worst error ratio vs peer {worst:.2f}")
    return 1 if bad else 0


# ------------------------------------------------------------------------------------------------ stress
def cmd_stress(args):
    var = ca.VARIANTS[args[0]]
    n = int(args[1]) if len(args) > 1 else 10000
    rng = random.Random(1234)
    t0 = time.time()
    errs, shapes, fails = [], [], []

    def flush():
        torch.cuda.synchronize()
        for (e, el), sh in zip(errs, shapes):
            e, el = e.item(), el.item()
            if not (math.isfinite(e) and math.isfinite(el)) or e > 2e-2 or el > 1e-2:
                fails.append((sh, e, el))
        errs.clear()
        shapes.clear()

    for i in range(n):
        D = rng.choice((64, 128, 128, 256))
        Hkv = rng.choice((1, 2))
        sh = (rng.choice((1, 2)), Hkv * rng.choice((1, 2, 3)), Hkv, rng.randint(1, 300), rng.randint(1, 300), D,
              rng.random() < 0.5, f16 if D == 128 and rng.random() < 0.25 else bf16)
        B, Hq, Hkv, Sq, Skv, D, causal, dtype = sh
        q = torch.randn(B, Hq, Sq, D, device=DEV, dtype=dtype)
        k = torch.randn(B, Hkv, Skv, D, device=DEV, dtype=dtype)
        v = torch.randn(B, Hkv, Skv, D, device=DEV, dtype=dtype)
        out = torch.empty_like(q)
        lse = torch.empty(B, Hq, Sq, device=DEV)
        ca.launch_attention(q, k, v, out, lse, causal, None, var)
        ro, rl = attention_reference(q.float(), k.float(), v.float(), causal)
        errs.append(((out.float() - ro).norm() / ro.norm().clamp_min(1e-12), (lse - rl).abs().max()))
        shapes.append(sh)
        if len(errs) == 500:
            flush()
            log(f"  {i + 1} launches, {len(fails)} failures, {time.time() - t0:.1f}s")
    flush()
    # 10,000 back-to-back launches of one prepared problem: no state may survive a launch (mbarriers, named barriers)
    q, k, v = make(2, 4, 2, 300, 300, 128, bf16, seed=9)
    out0, lse0 = ca.cuda_attention(q, k, v, True, None, var)
    out, lse = torch.empty_like(out0), torch.empty_like(lse0)
    for _ in range(n):
        ca.launch_attention(q, k, v, out, lse, True, None, var)
    torch.cuda.synchronize()
    same = torch.equal(out, out0) and torch.equal(lse, lse0)
    for f in fails[:10]:
        log(f"  FAIL {f}")
    log(f"RESULT stress ({var.name}): {n} random launches, {len(fails)} failures; {n} repeated launches "
        f"{'bitwise identical' if same else 'DIFFER'}; {time.time() - t0:.1f}s")
    return 0 if not fails and same else 1


# ------------------------------------------------------------------------------------------------ sanitize
def cmd_sanitize(args):
    var = ca.VARIANTS[args[0]]
    for D, causal in ((128, True), (64, False), (256, True)):
        q, k, v = make(1, 4, 2, 130, 200, D, bf16, seed=5)
        ca.cuda_attention(q, k, v, causal, None, var)
    torch.cuda.synchronize()
    log(f"RESULT sanitize ({var.name}): ran hdim 128/64/256, Sq 130, Skv 200, GQA")
    return 0


# ------------------------------------------------------------------------------------------------ bench
SUITE = [(4, 16, 16, 512, 64), (2, 8, 8, 8192, 64), (8, 16, 16, 2048, 128), (4, 32, 32, 4096, 128),
         (2, 16, 16, 8192, 128), (1, 16, 16, 16384, 128), (4, 32, 8, 4096, 128), (4, 16, 16, 4096, 256)]


def time_events(fn, reps: int, inner: int = 3) -> float:
    """Median milliseconds per call of ``fn`` over ``reps`` samples, each sample ``inner`` back-to-back calls
    bracketed by CUDA events (so host launch overhead of small problems overlaps the previous call), after 3
    warm-up calls."""
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
    return sorted(ts)[len(ts) // 2]


def _warm_triton(job):
    B, Hq, Hkv, S, D, causal = job
    from tilewright.triton_kernels import attention as A

    q, k, v = make(B, Hq, Hkv, S, S, D, bf16)
    return A.warmup("fwd", q, k, v, causal)


def cmd_bench(args):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tilewright.triton_kernels.attention import attention_forward

    names = args or [ca.DEFAULT_VARIANT]
    reps = int(os.environ.get("BENCH_REPS", "20"))
    jobs = [(*s, c) for s in SUITE for c in (False, True)]
    t0 = time.time()
    try:  # compile the Triton forward for every case in parallel processes (this process then only runs them)
        import multiprocessing as mp
        with cf.ProcessPoolExecutor(max_workers=16, mp_context=mp.get_context("spawn")) as ex:
            list(ex.map(_warm_triton, jobs))
    except Exception as e:  # noqa: BLE001
        log(f"triton precompile failed ({type(e).__name__}: {e}); compiling inline")
    log(f"triton precompiled in {time.time() - t0:.1f}s (TILEWRIGHT_AUTOTUNE={os.environ.get('TILEWRIGHT_AUTOTUNE')})")

    def sdpa_with(backend):
        def fn(q, k, v, causal):
            with sdpa_kernel(backend):
                return sdpa(q, k, v, causal)
        return fn

    def triton_fwd(q, k, v, causal):
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], device=DEV)
        return lambda: attention_forward(q, k, v, out, lse, causal, 1.0 / math.sqrt(q.shape[-1]))

    rows = []
    path = os.path.join(OUT, "attn_bench.csv")
    ratios_cudnn, ratios_triton = [], []
    for B, Hq, Hkv, S, D in SUITE:
        q, k, v = make(B, Hq, Hkv, S, S, D, bf16)
        for causal in (False, True):
            fl = 4.0 * B * Hq * S * S * D * (0.5 if causal else 1.0)
            case = f"{B}x{Hq}/{Hkv}x{S}x{D}|{'causal' if causal else 'full'}"
            res = {}
            provs = {f"cuda-{n}": None for n in names}
            provs.update({"triton": None, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
                          "sdpa-flash": SDPBackend.FLASH_ATTENTION})
            for p, backend in provs.items():
                try:
                    if p.startswith("cuda-"):
                        out = torch.empty_like(q)
                        lse = torch.empty(q.shape[:3], device=DEV)
                        var = ca.VARIANTS[p[5:]]
                        fn = (lambda var=var, out=out, lse=lse:  # noqa: E731
                              ca.launch_attention(q, k, v, out, lse, causal, None, var))
                    elif p == "triton":
                        fn = triton_fwd(q, k, v, causal)
                    else:
                        f = sdpa_with(backend)
                        fn = (lambda f=f: f(q, k, v, causal))  # noqa: E731
                    ms = time_events(fn, reps)
                except Exception as e:  # noqa: BLE001
                    log(f"  {case} {p}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
                    continue
                res[p] = ms
                rows.append(dict(case=case, provider=p, median_ms=ms, tflops=fl / ms / 1e9))
            best = f"cuda-{names[0]}"
            line = "  ".join(f"{p}={fl / ms / 1e9:6.1f}" for p, ms in res.items())
            if best in res:
                if "sdpa-cudnn" in res and D == 128 and S >= 2048:
                    ratios_cudnn.append(res["sdpa-cudnn"] / res[best])
                if "triton" in res:
                    ratios_triton.append(res["triton"] / res[best])
            log(f"{case:28s} TFLOP/s {line}")
            with open(path, "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=["case", "provider", "median_ms", "tflops"])
                w.writeheader()
                w.writerows(rows)
        del q, k, v
        torch.cuda.empty_cache()

    def geo(x):
        return math.exp(sum(map(math.log, x)) / len(x)) if x else float("nan")

    log(f"RESULT bench (cuda-{names[0]}): vs cuDNN geomean (hdim 128, S >= 2048) {geo(ratios_cudnn):.3f}x; "
        f"vs Triton fwd min {min(ratios_triton, default=float('nan')):.3f}x geomean {geo(ratios_triton):.3f}x "
        f"over {len(ratios_triton)} rows")
    return 0


def main() -> int:
    cmd, args = sys.argv[1], sys.argv[2:]
    torch.cuda.init()
    return {"build": cmd_build, "numerics": cmd_numerics, "grad": cmd_grad, "stress": cmd_stress,
            "sanitize": cmd_sanitize, "bench": cmd_bench}[cmd](args)


if __name__ == "__main__":
    sys.exit(main())
