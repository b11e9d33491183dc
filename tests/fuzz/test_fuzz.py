"""Fuzz tiers: random shapes, dtypes, layouts, epilogues, gradients, NaN/Inf and invalid inputs against torch.

The generator, the oracle and the numerics / error rules are in fuzz_cases.py (its docstring states them).

CPU tier (``interpreter``, runs in CI): CPU_CASES seeded cases per op family under TRITON_INTERPRET=1, one test per
case so a failure names its seed and prints a one-line repro; small shapes (the interpreter's 64x64x32 GEMM tile and
64-row attention blocks with tails), float16/float32 (the interpreter computes bf16 dots wrongly).

GPU tier (``gpu``): the same generator with GPU shapes (0, 1, primes, 128/256 tile multiples +- 1, multi-wave), bf16 /
fp16 / fp32, every case run once per backend in --fuzz-backends (default triton, cuda, auto); a forced backend that
cannot run the inputs raises a ValueError that names it: counted as "declined". One test per family; it writes the
--fuzz-report JSON and fails listing every failure's repro. TILEWRIGHT_AUTOTUNE=0 is set here, before tilewright
launches anything, so a random shape uses the shape-based default config instead of a minutes-long tuning run.
Example (8 shards on one GPU host, 4 families x 1500 cases x 3 backends = 18,000 case runs):

    for i in $(seq 0 7); do python -m pytest tests/fuzz -m gpu -q --fuzz-cases 1500 --fuzz-shard $i/8 \\
        --fuzz-report perf/results/<card>/fuzz/shard{shard}.json & done; wait
"""
from __future__ import annotations

import collections
import json
import os
import time

import pytest
import torch

os.environ.setdefault("TILEWRIGHT_AUTOTUNE", "0")

import fuzz_cases as fc  # noqa: E402  (tests/fuzz is on sys.path: pytest's rootdir-relative import of this dir)

# CPU tier size: 650 cases took 95 s on the shared 2-core dev box (pytest tests/fuzz, TRITON_INTERPRET=1)
CPU_CASES = {"gemm": 200, "rms_norm_linear": 160, "attention": 140, "scaled_mm": 150}


@pytest.mark.interpreter
@pytest.mark.parametrize("family,seed", [(f, s) for f, n in CPU_CASES.items() for s in range(n)],
                         ids=lambda v: str(v))
def test_fuzz_cpu(family, seed):
    case = fc.generate(family, seed, "cpu")
    outcome = fc.run_case(case)  # raises FuzzFailure (an AssertionError) with the repro
    assert outcome in ("pass", "declined", "raised_ok")


def _shard(config):
    i, n = (int(x) for x in config.getoption("--fuzz-shard").split("/"))
    assert 0 <= i < n, "--fuzz-shard i/n needs 0 <= i < n"
    return i, n


def _dtype_of(case):
    return case["dtype"] if case["family"] != "scaled_mm" else f"{case['dtype']}->{case['opts']['out_dtype']}"


@pytest.mark.gpu
@pytest.mark.parametrize("family", fc.FAMILIES)
def test_fuzz_gpu(family, request):
    """GPU tier: cases of ``family`` with every backend of --fuzz-backends forced in turn, until --fuzz-cases cases
    or --fuzz-seconds (per family) have run. Each new shape / layout / epilogue combination compiles a kernel
    specialization (Triton) or a cubin (CUDA), so the run is compile-bound; the report is rewritten every few cases
    so a run cut short still counts what it did."""
    cfg = request.config
    n_cases = cfg.getoption("--fuzz-cases") or 1500
    budget = cfg.getoption("--fuzz-seconds")
    seed0 = cfg.getoption("--fuzz-seed")
    shard, n_shards = _shard(cfg)
    backends = [None if b == "auto" else b for b in cfg.getoption("--fuzz-backends").split(",")]
    counts = collections.Counter()
    failures = []
    t0 = time.time()
    report = cfg.getoption("--fuzz-report")
    cases_run = 0

    def write_report():
        if not report:
            return
        path = report.replace("{shard}", str(shard))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "families": {}}
        data["families"][family] = {
            "cases": cases_run, "seed": seed0, "shard": f"{shard}/{n_shards}", "seconds": round(time.time() - t0, 1),
            "backends": [b or "auto" for b in backends],
            "counts": [dict(zip(("family", "backend", "dtype", "outcome", "n"), (*k, v)))
                       for k, v in sorted(counts.items(), key=lambda kv: str(kv[0]))],
            "failures": failures}
        with open(path + ".tmp", "w") as f:
            json.dump(data, f, indent=1)
        os.replace(path + ".tmp", path)

    for idx in range(n_cases):
        if idx % n_shards != shard:
            continue
        if budget and time.time() - t0 > budget:
            break
        case = fc.generate(family, seed0 + idx, "gpu")
        for backend in backends:
            if case.get("invalid") == "backend_name":
                backend = case["backend"]  # the case's own bad backend string is the point
            key = (family, backend or "auto", _dtype_of(case))
            try:
                counts[key + (fc.run_case(case, "cuda", backend),)] += 1
            except fc.FuzzFailure as e:
                counts[key + ("fail",)] += 1
                failures.append(str(e))
            except Exception as e:  # noqa: BLE001 - a crash of the harness itself is a failure too, with repro
                counts[key + ("crash",)] += 1
                failures.append(f"[{family} seed={case['seed']} backend={backend}] harness crash "
                                f"{type(e).__name__}: {e}\n{fc.repro(dict(case, backend=backend))}")
            torch.cuda.synchronize()
        cases_run += 1
        if cases_run % 10 == 0:
            write_report()
    write_report()
    ran = sum(counts.values())
    assert ran > 0, "no case ran"
    assert not failures, f"{len(failures)} of {ran} case runs failed:\n" + "\n".join(failures[:30])
