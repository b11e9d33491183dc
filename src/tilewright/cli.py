"""``tilewright`` command line: info | bench | tune | report | build-check | diag."""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import sys
import time
from pathlib import Path

BENCH_OPS = {"gemm": "tilewright.bench.gemm", "rms_norm_linear": "tilewright.bench.rms_norm_linear",
             "attention": "tilewright.bench.attention", "decode": "tilewright.bench.decode",
             "varlen": "tilewright.bench.varlen",
             "model": "tilewright.bench.model",
             "host": "tilewright.bench.host", "first_call": "tilewright.bench.first_call"}


# `bench --op all` must finish within 10 minutes on an H100/H200 (fresh caches): the RMSNorm suite leaves out its
# torch.compile columns (a static-shape compile per shape and direction) and times the backward on two shapes; the
# standalone `bench --op rms_norm_linear` runs all of it. The model bench (whole Llama / ViT blocks) leaves out
# torch.compile(mode="max-autotune-no-cudagraphs"), whose GEMM autotuning alone takes minutes; its target share is
# under 3 minutes, not yet measured on a GPU (the README's 552 s all-ops run predates it, so the total needs
# re-measuring against the 10 minutes).
ALL_OPS_ARGS = {"rms_norm_linear": {"with_compile": False, "backward": ("sq4k", "l3-8b-qkv")},
                "model": {"max_autotune": False}}


def _run_bench_op(op: str, suite: str, all_ops: bool = False):
    """Run one op's benchmark; (module, DataFrame) or (None, None) when it is unavailable."""
    try:
        module = importlib.import_module(BENCH_OPS[op])
    except ModuleNotFoundError as e:
        print(f"[{op}] benchmark not available: {e}")
        return None, None
    print(f"== {op} ==")
    t0 = time.perf_counter()
    extra = ALL_OPS_ARGS.get(op, {}) if all_ops else {}
    return module, module.run(suite, progress=lambda line: print(f"  [{time.perf_counter() - t0:5.0f}s] {line}",
                                                                   flush=True), **extra)


def _out_dir_problem(path) -> str | None:
    """Why ``path`` cannot be made into an output folder (a file in the way, not writable), or None; creates nothing,
    so a verb can refuse a bad ``--out`` before it spends minutes measuring."""
    path = Path(path).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def _bench_suites(ops) -> list[str]:
    """The suites every op in ``ops`` has (``--op all`` runs one suite name across them)."""
    names = None
    for op in ops:
        try:
            module = importlib.import_module(BENCH_OPS[op])
        except ModuleNotFoundError:
            continue  # reported as "not available" when the run reaches it
        names = set(module.SUITES) if names is None else names & set(module.SUITES)
    return sorted(names or ())


def _bench(args) -> int:
    from .bench.common import environment, on_gpu, require_pandas, results_dir

    pd = require_pandas("tilewright bench")
    ops = list(BENCH_OPS) if args.op == "all" else [args.op]
    suite = args.suite or ("default" if on_gpu() else "tiny")
    valid = _bench_suites(ops)
    if suite not in valid:
        print(f"tilewright bench: error: --suite {suite!r}: expected one of {', '.join(valid)} "
              f"(the suites of --op {args.op})", file=sys.stderr)
        return 2
    out_root = Path(args.out or ".") / "perf" / "results"
    problem = _out_dir_problem(out_root)
    if problem:
        print(f"tilewright bench: error: --out {args.out or '.'}: cannot write results there ({problem})",
              file=sys.stderr)
        return 2
    env = environment()
    if not on_gpu():
        print("No usable GPU (or TRITON_INTERPRET=1): running the Triton interpreter on the tiny suite. "
              "These numbers check that everything runs; they are NOT performance numbers.")
    print(f"tilewright bench: {', '.join(ops)} | suite {suite} | " +
          ", ".join(f"{k}={v}" for k, v in env.items() if k != "date"))
    out_dir = results_dir(args.out)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    frames, failed = [], []
    for op in ops:
        if args.op == "all":
            try:  # one op failing must not lose the others' results
                module, df = _run_bench_op(op, suite, all_ops=True)
            except Exception as e:  # noqa: BLE001
                print(f"[{op}] FAILED: {type(e).__name__}: {e}")
                failed.append(op)
                continue
        else:
            module, df = _run_bench_op(op, suite)
        if df is None:
            continue
        if args.op == "all":  # each op's rows as soon as they exist: a run cut short keeps what it measured
            part = out_dir / datetime.date.today().isoformat() / f"partial_{op}.csv"
            part.parent.mkdir(parents=True, exist_ok=True)
            df.to_csv(part, index=False)
        else:
            path = out_dir / f"{op}_{suite}_{stamp}.csv"
            df.to_csv(path, index=False)
            (out_dir / f"{op}_{suite}_{stamp}.env.json").write_text(json.dumps(env, indent=1))
            print(f"  wrote {path}")
        if hasattr(module, "summarize"):
            print(module.summarize(df).to_string(index=False))
        frames.append(df)
    if not frames:
        return 1
    df = pd.concat(frames, ignore_index=True)
    if args.op == "all":
        from .tools.report import ratio_table, write_bench_report

        day_dir = out_dir / datetime.date.today().isoformat()
        paths = write_bench_report(df, {**env, "suite": suite}, day_dir, plots=not args.no_plots)
        for op in ops:  # the full report now holds them
            (day_dir / f"partial_{op}.csv").unlink(missing_ok=True)
        print(f"\nwrote {day_dir}/: " + ", ".join(sorted(p.name for p in paths.values())))
        print("\n== tilewright vs the peer measured in the same run: speedup = peer time / ours (>1: faster) ==")
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            print(ratio_table(df).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        if not on_gpu():
            print("(Triton interpreter on CPU: these ratios are NOT performance numbers.)")
        if failed:
            print(f"FAILED ops: {', '.join(failed)}")
        return 1 if failed else 0
    table = df[df.provider.str.startswith("tilewright")][["op", "case", "provider", "median_ms", "tflops",
                                                          "peer", "speedup"]]
    print("\n== speedup of tilewright vs the peer measured in the same run (>1: faster) ==")
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return 0


def _info(args) -> int:
    import torch
    import triton

    version = __import__("tilewright").__version__
    print(f"tilewright {version} | torch {torch.__version__} | triton {triton.__version__}")
    if torch.cuda.is_available():
        cap = torch.cuda.get_device_capability()
        print(f"GPU: {torch.cuda.get_device_name()} (sm_{cap[0]}{cap[1]}), "
              f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs")
        device = "cuda"
    else:
        interp = os.environ.get("TRITON_INTERPRET") == "1"
        print("GPU: none (CPU only" + (", Triton interpreter on)" if interp else ")"))
        device = "cpu"
    print(f"Triton autotune cache: {os.environ.get('TRITON_CACHE_DIR', os.path.expanduser('~/.triton/cache'))}")
    from . import _native, router

    _native.load(block=True)
    print(f"Replay key in C: {_native.status()}")

    a = torch.empty(256, 256, device=device, dtype=torch.bfloat16)
    for op in router.PREFERENCE:
        try:
            print(router.explain(op, a, a))
        except ValueError as e:
            print(f"{op}: {e}")
    _info_cache(torch.device(device))
    _info_router_per_shape(torch.device(device))
    return 0


def _info_cache(device) -> None:
    """What the tilewright autotune cache holds for this device and software stack."""
    from .autotune import cache

    entries = cache.entries(device)
    others = cache.other_devices(device)
    print(f"\nAutotune cache: {cache.cache_path()} | this device: {cache.device_key(device)}")
    if not entries:
        print("  no tuned shapes for this device (run `tilewright tune --op gemm`)")
    for key, rec in sorted(entries.items()):
        parts = []
        for backend, best in sorted((rec.get("backends") or {}).items()):
            mark = "*" if backend == rec.get("winner") else " "
            parts.append(f"{mark}{backend} {best.get('name')} {best.get('median_ms', float('nan')):.4g} ms")
        peer = f" | {rec.get('peer')} {rec['peer_ms']:.4g} ms" if rec.get("peer_ms") else ""
        print(f"  {key}: " + " | ".join(parts) + peer)
    if others:
        print("  other devices / versions in the file (ignored here): " +
              ", ".join(f"{k} ({n} shapes)" for k, n in others.items()))


def _info_router_per_shape(device) -> None:
    """The router's pick and reasons for every GEMM suite shape, next to the tuned winner when there is one."""
    import torch

    from . import router
    from .autotune import cache
    from .bench.common import on_gpu
    from .bench.gemm import SUITES

    suite = "default" if on_gpu() else "tiny"
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16
    print(f"\nRouter pick per GEMM suite shape ('{suite}', {str(dtype).replace('torch.', '')}, a @ b row-major):")
    for tag, (M, N, K) in SUITES[suite].items():
        a = torch.empty(M, K, device=device, dtype=dtype)
        b = torch.empty(K, N, device=device, dtype=dtype)
        try:
            d = router.decide("gemm", a, b)
            why = "; ".join(d.reasons)
            choice = d.backend
        except ValueError as e:
            choice, why = "error", str(e)
        rec = cache.lookup("gemm", device, dtype, M, N, K)
        tuned = f" [tuned winner: {rec['winner']} {rec['backends'][rec['winner']].get('name')}]" if rec else ""
        print(f"  {tag:<13} {M}x{N}x{K}: {choice}{tuned}\n      {why}")
        del a, b


def _parse_shape(text: str) -> tuple[int, int, int]:
    """argparse type for ``M,N,K``."""
    parts = text.replace("x", ",").split(",")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) <= 0:
        raise argparse.ArgumentTypeError(f"expected M,N,K (three positive integers, e.g. 4096,4096,4096), got {text!r}")
    return shape


def _positive_int(text: str) -> int:
    """argparse type for a count >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


TUNE_OPS = ("gemm",)
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _gpu_list(spec: str | None) -> list[str]:
    """``--gpus``: None (the current device), "all", a count ("2": the first two) or indices ("0,2"; "1,": GPU 1)."""
    if spec is None:
        return []
    import torch

    from .tools.tuner import TuneError

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise TuneError(f"--gpus {spec}: no CUDA device here")
    if spec == "all":
        return [f"cuda:{i}" for i in range(count)]
    try:  # a count ("2": the first two), or indices with a comma ("0,2"; one GPU alone: "1,")
        picks = list(range(int(spec))) if "," not in spec else [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise TuneError(f"--gpus {spec}: expected 'all', a count or comma-separated indices") from None
    if spec.strip() == "0":
        raise TuneError("--gpus 0: a count of GPUs must be at least 1 (GPU 0 alone: --gpus 0, - or leave --gpus out "
                        "to tune on the current device)")
    if not picks or any(not 0 <= i < count for i in picks) or len(set(picks)) != len(picks):
        raise TuneError(f"--gpus {spec}: this machine has {count} CUDA device(s) (indices 0-{count - 1}), each once")
    return [f"cuda:{i}" for i in picks]


def _tune(args) -> int:
    import torch

    from .bench.common import card_name, on_gpu, require_pandas

    pd = require_pandas("tilewright tune")
    from .tools import tuner
    from .tools.report import winners, write_report
    from .bench.gemm import SUITES

    if args.op not in TUNE_OPS:
        print(f"tilewright tune: error: --op {args.op}: tuning is implemented for {', '.join(TUNE_OPS)} only so far "
              f"(the {args.op} kernel tunes itself on first use through triton.autotune)", file=sys.stderr)
        return 2
    if args.merge:
        from .autotune import cache

        try:
            added, replaced = cache.merge(args.merge)
        except ValueError as e:
            print(f"tilewright tune: error: --merge {e}", file=sys.stderr)
            return 2
        print(f"merged {args.merge} into {cache.cache_path()}: {added} entries added, {replaced} replaced by later "
              "tunes")
        return 0
    if args.shapes:
        shapes = args.shapes
    else:
        suite = args.suite or ("default" if on_gpu() else "tiny")
        shapes = list(SUITES[suite].values())
    dtype = getattr(torch, _DTYPES[args.dtype]) if args.dtype else None
    out = args.out or os.path.join("perf", "tune", card_name(), datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    problem = None if args.no_report else _out_dir_problem(out)
    if problem:
        print(f"tilewright tune: error: --out {out}: cannot write the report there ({problem})", file=sys.stderr)
        return 2
    try:
        jobs = args.jobs
        if jobs is None:
            jobs = min(max((os.cpu_count() or 1) - 2, 1), 16) if on_gpu() else 0
        if jobs < 0:
            raise tuner.TuneError(f"--jobs {jobs}: expected 0 or a positive number of processes")
        devices = _gpu_list(args.gpus)
        kw = dict(dtype=dtype, backends=args.backend, reuse=not args.force, max_configs=args.max_configs)
        if len(devices) > 1:
            print(f"tuning on {len(devices)} GPUs ({', '.join(devices)}): one process each, shapes dealt by their "
                  "sweep time")
            if args.jobs is None:  # the machine's cores dealt to the GPUs' compile workers, up to 16 each
                per_device = min(max((os.cpu_count() or 1) // len(devices) - 1, 1), 16)
            else:  # an explicit --jobs is the total
                per_device = max(jobs // len(devices), 1) if jobs else 0
            sweep = tuner.tune_gemm_multi(shapes, devices, jobs=per_device, **kw)
        else:
            sweep = tuner.tune_gemm(shapes, device=devices[0] if devices else None, jobs=jobs, **kw)
    except tuner.TuneError as e:
        print(f"tilewright tune: error: {e}", file=sys.stderr)
        return 2
    if not on_gpu():
        print("No usable GPU: the sweep ran on the Triton interpreter; its times are NOT performance numbers.")
    if sweep.df.empty:
        print("nothing tuned (every shape was in the cache)")
        return 2 if args.export_table and _export_table(args.export_table, {"sweep": "earlier tunes"}) else 0
    with pd.option_context("display.width", 200, "display.max_colwidth", 60):
        print(winners(sweep.df)[["shape", "winner", "winner_config", "winner_ms", "winner_tflops", "vs_peer"]]
              .to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    from .autotune import cache

    print(f"stored winners in {cache.cache_path()}")
    if args.export_table and _export_table(args.export_table, {"sweep": out}):
        return 2
    if not args.no_report:
        try:
            paths = write_report(sweep, out, plots=not args.no_plots)
        except OSError as e:
            print(f"tilewright tune: error: --out {out}: cannot write the report ({e}); the winners are stored "
                  "in the cache all the same", file=sys.stderr)
            return 1
        print(f"report: {paths['report_html']} (+ sweep.csv, winners.csv, report.md"
              f"{', plots/' if any(k.startswith('plot_') for k in paths) else ''})")
    return 0


def _export_table(path: str, source: dict) -> int:
    """Write this card's config table (``autotune/tables.py``) from the tuning cache; commit it as
    ``src/tilewright/autotune/tables/<card slug>.json`` to ship it."""
    import json

    from .autotune import tables
    from .bench.common import on_gpu

    if not on_gpu():
        print(f"tilewright tune: error: --export-table {path}: a config table is measured on a GPU (this run used the "
              "interpreter)", file=sys.stderr)
        return 2
    table = tables.export(source=source)
    why = tables.problem(table)
    if why or not table["entries"]:
        print(f"tilewright tune: error: --export-table {path}: nothing usable to export ({why or 'no entries'})",
              file=sys.stderr)
        return 2
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(table, f, indent=1)
    except OSError as e:
        print(f"tilewright tune: error: --export-table {path}: cannot write it ({e})", file=sys.stderr)
        return 2
    print(f"config table for {table['card']}: {len(table['entries'])} entries -> {path} "
          f"(ship it as src/tilewright/autotune/tables/{tables.card_slug(table['card'])}.json)")
    return 0


def _report(args) -> int:
    from .tools.report import render

    if args.out and (problem := _out_dir_problem(args.out)):
        print(f"tilewright report: error: --out {args.out}: cannot write the report there ({problem})",
              file=sys.stderr)
        return 2
    try:
        paths = render(args.path, args.out, plots=not args.no_plots)
    except (FileNotFoundError, ValueError) as e:
        print(f"tilewright report: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # reading a file it may not open, or writing next to an input in a read-only folder
        print(f"tilewright report: error: {e.filename or args.path}: {e.strerror or e}", file=sys.stderr)
        return 1
    for name, path in sorted(paths.items()):
        print(f"  {name}: {path}")
    return 0


def _build_check(args) -> int:
    try:
        module = importlib.import_module("tilewright.cuda_fallback.build_check")
    except ModuleNotFoundError:
        print("build-check: no CUDA sources in this build")
        return 1
    return module.main_build_check(args)


def _diag(args) -> int:
    from .tools import diag

    def fail(message: str) -> int:
        print(f"tilewright diag: error: {message}", file=sys.stderr)
        return 2
    try:
        table = diag.variants_of(args.what, args.kernel)
    except ImportError as e:  # a build without the CUDA sources
        return fail(f"--what {args.what}: {e}")
    names = [v for v in (args.variants or "").split(",") if v]
    if names and not table:
        return fail(f"--variants: --what {args.what} takes no variants (gemm-sm90, gemm-sm120, rmsnorm-sm90, "
                    "attention-sm90 and launch do)")
    unknown = [v for v in names if v not in table]
    if unknown:
        return fail(f"--variants {','.join(unknown)}: expected names from {', '.join(table)}")
    args.variants = names
    tags = [t for t, *_ in diag.GEMM_SUITE]
    args.cases = [c for c in (args.cases or "").split(",") if c]
    if [c for c in args.cases if c not in tags]:
        return fail(f"--cases {','.join(c for c in args.cases if c not in tags)}: expected tags from "
                    f"{', '.join(tags)}")
    if args.out and (problem := _out_dir_problem(args.out)):
        return fail(f"--out {args.out}: cannot write results there ({problem})")
    return diag.run(args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tilewright`` console script."""
    parser = argparse.ArgumentParser(prog="tilewright", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("bench", help="side-by-side benchmark of tilewright vs its peers (cuBLAS, cuDNN, SDPA...)")
    p.add_argument("--op", choices=[*BENCH_OPS, "all"], default="gemm")
    p.add_argument("--suite", default=None, help="shape suite (default on GPU: 'default'; on CPU: 'tiny')")
    p.add_argument("--out", default=None, help="root folder for perf/results/<card>/ (default: current directory)")
    p.add_argument("--no-plots", action="store_true", help="--op all: skip the PNG plots")
    p.set_defaults(fn=_bench)
    from .bench.gemm import SUITES as GEMM_SUITES

    p = sub.add_parser("tune", help="sweep every eligible backend's configs, store the winners in the autotune cache, "
                                    "write a report")
    p.add_argument("--op", default="gemm", choices=[*BENCH_OPS], help="op to tune (gemm so far)")
    shapes = p.add_mutually_exclusive_group()
    shapes.add_argument("--shapes", nargs="+", type=_parse_shape, metavar="M,N,K", help="problem shapes")
    shapes.add_argument("--suite", choices=sorted(GEMM_SUITES),
                        help="the benchmark suite's shapes (default on GPU: 'default'; on CPU: 'tiny')")
    p.add_argument("--backend", nargs="+", choices=["triton", "cuda"],
                   help="backends to sweep (default: every one that can run here)")
    p.add_argument("--dtype", choices=sorted(_DTYPES), help="default: bf16 on GPU, fp16 on the interpreter")
    p.add_argument("--force", action="store_true", help="re-tune shapes already in the cache")
    p.add_argument("--max-configs", type=_positive_int, default=None, metavar="N", help="at most N configs per backend")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="processes that compile the Triton configs ahead of their timing, shape by shape while "
                        "earlier shapes are timed (default on a GPU: CPU "
                        "cores - 2, at most 16; with --gpus, up to 16 per GPU from the machine's cores; an explicit "
                        "N is the total; 0: compile each config when the sweep reaches it)")
    p.add_argument("--out", default=None, help="report folder (default: perf/tune/<card>/<timestamp>)")
    p.add_argument("--no-report", action="store_true", help="only update the cache")
    p.add_argument("--no-plots", action="store_true", help="report without PNG plots")
    p.add_argument("--export-table", default=None, metavar="FILE",
                   help="also write this card's shipped-config table from the cache (every entry tuned here)")
    p.add_argument("--gpus", default=None, metavar="all|N|I,J",
                   help="spread the sweep over several GPUs of this machine (one process each; same card model "
                        "for one merged result): 'all', a count (the first N) or indices ('0,2'; one alone: '1,')")
    p.add_argument("--merge", default=None, metavar="CACHE_FILE",
                   help="merge another machine's autotune.json into this cache (newer tunes win per entry) and exit")
    p.set_defaults(fn=_tune)
    p = sub.add_parser("report", help="re-render a saved tune sweep or bench results (CSV, markdown, HTML, PNG)")
    p.add_argument("path", help="a tune report folder / sweep.csv, or a bench results folder / CSV")
    p.add_argument("--out", default=None, help="output folder (default: next to the input)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(fn=_report)
    p = sub.add_parser("info", help="device, versions, autotune cache contents, and the router's pick per op and "
                                    "per suite shape")
    p.set_defaults(fn=_info)
    p = sub.add_parser("build-check", help="compile every CUDA kernel for an arch and check its SASS")
    p.add_argument("--arch", default="sm_90a", choices=["sm_90a", "sm_100a", "sm_120a"])
    p.add_argument("--kernel", action="append", metavar="SOURCE",
                   help="check only this kernel source, e.g. attention_bwd_sm90.cu (repeatable; default: all)")
    p.set_defaults(fn=_build_check)
    from .tools.diag import KERNELS, WHAT

    p = sub.add_parser("diag", help="device diagnostics: host cost per call, per-variant kernel timings beside "
                                    "cuBLAS / cuDNN, autotuner timings, launches for Nsight Compute")
    p.add_argument("--what", required=True, choices=WHAT, help="which diagnostic (see tilewright/tools/diag.py)")
    p.add_argument("--variants", default=None, metavar="V1,V2", help="kernel variants to time or launch")
    p.add_argument("--cases", default=None, metavar="TAG,...", help="GEMM suite shapes to run (default: all)")
    p.add_argument("--kernel", choices=KERNELS, default="gemm_sm90", help="--what launch: the kernel")
    p.add_argument("--shape", type=_parse_shape, default=None, metavar="M,N,K", help="--what launch: the problem")
    p.add_argument("--order", choices=["row_major", "grouped", "morton", "hilbert"], default="grouped",
                   help="--what launch: tile order")
    p.add_argument("--group", type=_positive_int, default=8, help="--what launch: tile-order group size")
    p.add_argument("--quick", action="store_true", help="gemm-sm90: one tile order per variant")
    p.add_argument("--out", default=None, help="also write the rows to OUT/diag_<what>.csv")
    p.set_defaults(fn=_diag)
    args = parser.parse_args(argv)
    from .bench.common import MissingExtra

    try:
        return args.fn(args)
    except MissingExtra as e:  # pandas not installed: one line saying which extra to install, not a traceback
        print(f"tilewright {args.cmd}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
