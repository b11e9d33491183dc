"""``tilewright`` command line: info | bench | build-check."""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import sys

BENCH_OPS = {"gemm": "tilewright.bench.gemm", "rms_norm_linear": "tilewright.bench.rms_norm_linear",
             "attention": "tilewright.bench.attention"}


def _bench(args) -> int:
    import pandas as pd

    from .bench.common import environment, on_gpu, results_dir

    ops = list(BENCH_OPS) if args.op == "all" else [args.op]
    suite = args.suite or ("default" if on_gpu() else "tiny")
    env = environment()
    if not on_gpu():
        print("No usable GPU (or TRITON_INTERPRET=1): running the Triton interpreter on the tiny suite. "
              "These numbers check that everything runs; they are NOT performance numbers.")
    print(f"tilewright bench: {', '.join(ops)} | suite {suite} | " +
          ", ".join(f"{k}={v}" for k, v in env.items() if k != "date"))
    out_dir = results_dir(args.out)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    frames = []
    for op in ops:
        try:
            module = importlib.import_module(BENCH_OPS[op])
        except ModuleNotFoundError as e:
            print(f"[{op}] benchmark not available: {e}")
            continue
        print(f"== {op} ==")
        df = module.run(suite, progress=lambda line: print("  " + line, flush=True))
        path = out_dir / f"{op}_{suite}_{stamp}.csv"
        df.to_csv(path, index=False)
        (out_dir / f"{op}_{suite}_{stamp}.env.json").write_text(json.dumps(env, indent=1))
        print(f"  wrote {path}")
        if hasattr(module, "summarize"):
            print(module.summarize(df).to_string(index=False))
        frames.append(df)
    if frames:
        df = pd.concat(frames)
        table = df[df.provider.str.startswith("tilewright")][["op", "case", "provider", "median_ms", "tflops",
                                                              "peer", "speedup"]]
        print("\n== speedup of tilewright vs the peer measured in the same run (>1: faster) ==")
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return 0


def _info(args) -> int:
    import torch
    import triton

    print(f"tilewright {__import__('tilewright').__version__} | torch {torch.__version__} | triton {triton.__version__}")
    if torch.cuda.is_available():
        cap = torch.cuda.get_device_capability()
        print(f"GPU: {torch.cuda.get_device_name()} (sm_{cap[0]}{cap[1]}), "
              f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs")
        device = "cuda"
    else:
        print("GPU: none (CPU only" + (", Triton interpreter on)" if os.environ.get("TRITON_INTERPRET") == "1" else ")"))
        device = "cpu"
    print(f"Triton autotune cache: {os.environ.get('TRITON_CACHE_DIR', os.path.expanduser('~/.triton/cache'))}")
    from . import router

    a = torch.empty(256, 256, device=device, dtype=torch.bfloat16)
    for op in router.PREFERENCE:
        try:
            print(router.explain(op, a, a))
        except ValueError as e:
            print(f"{op}: {e}")
    return 0


def _build_check(args) -> int:
    try:
        module = importlib.import_module("tilewright.cuda_fallback.build_check")
    except ModuleNotFoundError:
        print("build-check: no CUDA sources in this build")
        return 1
    return module.main_build_check(args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tilewright`` console script."""
    parser = argparse.ArgumentParser(prog="tilewright", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("bench", help="side-by-side benchmark of tilewright vs its peers (cuBLAS, cuDNN, SDPA...)")
    p.add_argument("--op", choices=[*BENCH_OPS, "all"], default="gemm")
    p.add_argument("--suite", default=None, help="shape suite (default on GPU: 'default'; on CPU: 'tiny')")
    p.add_argument("--out", default=None, help="root folder for perf/results/<card>/ (default: current directory)")
    p.set_defaults(fn=_bench)
    p = sub.add_parser("info", help="device, versions, and which backend the router picks per op")
    p.set_defaults(fn=_info)
    p = sub.add_parser("build-check", help="compile every CUDA kernel for an arch and check its SASS")
    p.add_argument("--arch", default="sm_90a", choices=["sm_90a", "sm_100a", "sm_120a"])
    p.set_defaults(fn=_build_check)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
