"""Device driver for the mma.sync GEMM (gemm_sm120.cu) built for the device's own arch (sm_90 on H100/H200):
build, numerics (suite incl. tails, layouts, dtypes, epilogues, tile orders), randomized stress, benchmark beside
cuBLAS and the sm_90a WGMMA kernel. Reuses the helpers of gpu_cuda_gemm.py. Results go to $OUT.

    python scripts/gpu_sm120_gemm.py build|smoke|numerics|stress|bench [--seconds S]
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import math
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import gpu_cuda_gemm as base  # noqa: E402  (also puts src/ on sys.path)
from tilewright.cuda_fallback.runtime import build  # noqa: E402
from tilewright.cuda_fallback import gemm_sm90 as cg  # noqa: E402
from tilewright.cuda_fallback import gemm_sm120 as mg  # noqa: E402

DEV = base.DEV
log = base.log
LAYOUTS = [(False, True), (False, False), (True, True), (True, False)]  # (A M-major, B N-major)


def builds_needed():
    out = set()
    for name in mg.VARIANTS:
        for a_mn, b_mn in LAYOUTS:
            out.add((name, a_mn, b_mn, False, 0, 0, 0))
            out.add((name, a_mn, b_mn, False, 2, 1, 1))
        out.add((name, False, True, True, 2, 1, 1))  # self-check build for fp16
    for codes in base.EPI_CODES.values():
        out.add((mg.DEFAULT_VARIANT, False, True, False, *codes))
        out.add((mg.DEFAULT_VARIANT, False, False, True, *codes))
    return sorted(out)


def phase_build(args):
    t0 = time.time()
    arch = mg.device_arch(0)

    def one(bd):
        return build.compile_source(mg.SOURCE, arch, mg.VARIANTS[bd[0]].defines(*bd[1:])).cached

    bs = builds_needed()
    with cf.ThreadPoolExecutor(args.threads or os.cpu_count() or 4) as ex:
        new = sum(not c for c in ex.map(one, bs))
    log(f"{len(bs)} builds for {arch} ({new} compiled) in {time.time() - t0:.1f}s; toolchain {build.toolchain()}")
    from tilewright.cuda_fallback import build_check

    b = build.compile_source(mg.SOURCE, arch, mg.VARIANTS[mg.DEFAULT_VARIANT].defines(False, True, False))
    info = build_check.parse_ptxas(b.log)
    text = build_check.sass(b.cubin) or ""
    log(f"{arch} default build: regs {info['regs']} spills {info['spills']} stack {info['stack']} "
        f"HMMA {text.count('HMMA')} LDSM {text.count('LDSM')} UTMALDG {text.count('UTMALDG')}")


def run_case(M, N, K, dtype, variant, a_mn, b_mn, epi, order="grouped", group=8):
    return base.run_case(M, N, K, dtype, variant, a_mn, b_mn, epi, order, group, launch=mg.launch_mma_gemm,
                         constraints=mg.constraints)


def phase_smoke(args):
    for v in mg.VARIANTS:
        for (M, N, K) in ((256, 256, 256), (300, 264, 200)):
            t0 = time.time()
            ok, e, et, fin = run_case(M, N, K, torch.bfloat16, v, False, True, base.EPILOGUES[8])
            torch.cuda.synchronize()
            log(f"smoke {v} ({M},{N},{K}) ok={ok} err={e:.2e} torch_err={et:.2e} finite={fin} {time.time() - t0:.2f}s")
            if not ok:
                sys.exit(1)
    ok, msg = mg.ready(torch.empty(4096, 4096, device=DEV, dtype=torch.bfloat16),
                       torch.empty(4096, 4096, device=DEV, dtype=torch.bfloat16))
    log(f"ready() self-check: {ok} {msg}")


def phase_numerics(args):
    shapes = [(1, 8, 8), (5, 136, 1), (64, 64, 64), (127, 136, 72), (300, 264, 200), (513, 776, 1000),
              (1000, 4096, 120), (2048, 2048, 2048), (5000, 1032, 333), (129, 264, 4100)]
    rows, fails = [], 0
    t0 = time.time()
    cases = []
    for v in mg.VARIANTS:
        for a_mn, b_mn in LAYOUTS:
            for epi in (base.EPILOGUES[0], base.EPILOGUES[8]):
                cases.append((v, a_mn, b_mn, torch.bfloat16, epi))
        cases.append((v, False, True, torch.float16, base.EPILOGUES[8]))
    for epi in base.EPILOGUES:
        cases.append((mg.DEFAULT_VARIANT, False, True, torch.bfloat16, epi))
        cases.append((mg.DEFAULT_VARIANT, False, False, torch.float16, epi))
    for (v, a_mn, b_mn, dt, epi) in cases:
        for (M, N, K) in shapes:
            r = run_case(M, N, K, dt, v, a_mn, b_mn, epi)
            if r is None:
                continue
            ok, e, et, fin = r
            rows.append(dict(variant=v, a_mn=a_mn, b_mn=b_mn, dtype=str(dt)[6:], M=M, N=N, K=K, epilogue=epi[0],
                             order="grouped8", err=f"{e:.3e}", torch_err=f"{et:.3e}", finite=fin, ok=ok))
            fails += not ok
            if not ok and fails <= 30:
                log("FAIL", rows[-1])
    for order in ("row_major", "grouped", "morton", "hilbert"):
        for group in (1, 4, 8, 16):
            for (M, N, K) in ((2048, 2048, 256), (1000, 3000, 128)):
                ok, e, et, fin = run_case(M, N, K, torch.bfloat16, mg.DEFAULT_VARIANT, False, True,
                                          base.EPILOGUES[1], order, group)
                rows.append(dict(variant=mg.DEFAULT_VARIANT, a_mn=False, b_mn=True, dtype="bfloat16", M=M, N=N,
                                 K=K, epilogue="bias", order=f"{order}{group}", err=f"{e:.3e}", torch_err=f"{et:.3e}",
                                 finite=fin, ok=ok))
                fails += not ok
                if not ok:
                    log("FAIL", rows[-1])
    torch.cuda.synchronize()
    base.write_csv("sm120_numerics.csv", rows)
    log(f"numerics: {len(rows) - fails}/{len(rows)} ok in {time.time() - t0:.1f}s")


def phase_stress(args):
    rng = random.Random(0)
    t0 = time.time()
    n = bad = 0
    while n < 10000 and time.time() - t0 < args.seconds:
        v = rng.choice(list(mg.VARIANTS))
        a_mn, b_mn = rng.choice(LAYOUTS)
        M, N, K, order, group = base.random_problem(rng, a_mn, b_mn)
        epi = rng.choice([base.EPILOGUES[0], base.EPILOGUES[8]])
        r = run_case(M, N, K, torch.bfloat16, v, a_mn, b_mn, epi, order, group)
        if r is None:
            continue
        n += 1
        if not r[0]:
            bad += 1
            if bad <= 20:
                log("STRESS FAIL", v, a_mn, b_mn, M, N, K, order, group, epi[0], r)
    torch.cuda.synchronize()
    log(f"stress: {n} randomized launches in {time.time() - t0:.1f}s, {bad} wrong")


def phase_bench(args):
    dtype = torch.bfloat16
    card = torch.cuda.get_device_name()
    log("device:", card, "torch", torch.__version__, "arch", mg.device_arch(0))
    rows = []
    mma_provs = [(v, "grouped", 8) for v in mg.VARIANTS] + [(mg.DEFAULT_VARIANT, o, 8) for o in
                                                            ("morton", "hilbert", "row_major")]
    for tag, M, N, K in base.SUITE:
        a, b = base.make_inputs(M, N, K, dtype, False, True)
        out = torch.empty(M, N, device=DEV, dtype=dtype)
        flops = 2 * M * N * K
        ref = (a @ b).float()
        provs = [("cublas", lambda: torch.matmul(a, b, out=out)),
                 (f"wgmma-{cg.pick_variant(M, N, K).name}", lambda: cg.launch_cuda_gemm(a, b, out))]
        for v, order, group in mma_provs:
            provs.append((f"mma-{v}-{order}{group}",
                          (lambda v=v, order=order, group=group:
                           mg.launch_mma_gemm(a, b, out, variant=v, tile_order=order, group=group))))
        for prov, fn in provs:
            try:
                fn()
                err = ((out.float() - ref).norm() / ref.norm()).item()
                t = base.bench_ms(fn)
            except Exception as e:  # noqa: BLE001
                log("bench error", tag, prov, type(e).__name__, str(e)[:200])
                continue
            rows.append(dict(card=card, case=tag, M=M, N=N, K=K, provider=prov, ms=f"{t:.5f}",
                             tflops=f"{flops / t / 1e9:.1f}", err=f"{err:.1e}"))
        rs = [r for r in rows if r["case"] == tag]
        cub = float(next(r["ms"] for r in rs if r["provider"] == "cublas"))
        wg = next((r for r in rs if r["provider"].startswith("wgmma")), None)
        mm = min((r for r in rs if r["provider"].startswith("mma")), key=lambda r: float(r["ms"]))
        log(f"{tag:13s} cublas {flops / cub / 1e9:6.0f} TF | wgmma {wg['tflops'] if wg else '-':>6s} TF | "
            f"mma best {mm['provider']:28s} {mm['tflops']:>6s} TF x{cub / float(mm['ms']):.3f} cuBLAS")
    base.write_csv("sm120_bench.csv", rows)
    geo = []
    for tag, *_ in base.SUITE:
        if tag in base.LARGE:
            rs = [r for r in rows if r["case"] == tag]
            cub = float(next(r["ms"] for r in rs if r["provider"] == "cublas"))
            mm = min(float(r["ms"]) for r in rs if r["provider"].startswith("mma-" + mg.DEFAULT_VARIANT))
            geo.append(cub / mm)
    if geo:
        log(f"mma {mg.DEFAULT_VARIANT} (best order) geomean x cuBLAS, 8 large shapes: "
            f"{math.exp(sum(map(math.log, geo)) / len(geo)):.3f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["build", "smoke", "numerics", "stress", "bench"])
    p.add_argument("--seconds", type=float, default=40)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    globals()[f"phase_{a.phase}"](a)
