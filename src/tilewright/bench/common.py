"""Shared pieces of the side-by-side benchmarks: timing, environment facts, result files.

Every benchmark module (``tilewright.bench.<op>``) exposes ``run(suite: str, progress=print) -> pandas.DataFrame``
in the long format of :data:`COLUMNS`: one row per (case, provider), with the case's peer measured in the same run and
``speedup`` = peer time / this provider's time (> 1 means faster than the peer).
"""
from __future__ import annotations

import contextlib
import datetime
import os
import platform
import time
from pathlib import Path

import torch

from .._env import interpreting
COLUMNS = ["op", "case", "shape", "dtype", "provider", "median_ms", "tflops", "peer", "speedup"]
BENCH_EXTRA = "pip install 'tilewright[bench]'"


class MissingExtra(ImportError):
    """An optional dependency of the tools (bench, tune, report) is not installed; the message says how to get it."""


def require_pandas(user: str):
    """The pandas module, for ``user`` (a tool that names itself in the error).

    pandas is an optional extra: ``import tilewright`` and every kernel launch run without it, so the tools import it
    on first use through here, and a missing pandas is one :class:`MissingExtra` naming the extra instead of a bare
    ``No module named 'pandas'`` from deep inside a tool.
    """
    try:
        import pandas
    except ImportError as e:
        raise MissingExtra(f"{user} needs pandas, which is not installed: {BENCH_EXTRA}") from e
    return pandas


def on_gpu() -> bool:
    """True when benchmarks can time real kernels (CUDA present, interpreter off)."""
    return torch.cuda.is_available() and not interpreting()


def time_ms(fn, *, warmup_ms: float = 25, rep_ms: float = 100, cudagraph: bool = False, cpu_runs: int = 3,
            cpu_warm: bool = True) -> float:
    """Median time of ``fn()`` in milliseconds.

    GPU: ``triton.testing.do_bench`` (CUDA events, L2 flushed between runs, median). With ``cudagraph=True`` the
    calls are captured in a CUDA graph and the replays timed (``do_bench_cudagraph``): for microsecond kernels this
    measures the GPU work rather than Python launch overhead - use it for every provider of a case, never for one.
    CPU: wall clock median of ``cpu_runs`` runs after one untimed call (``cpu_warm=False``: none, the caller has just
    run ``fn``) - interpreter numbers say nothing about performance and are labelled so (a benchmark whose interpreted
    calls take seconds may ask for a single run).
    """
    if on_gpu():
        import triton

        if cudagraph:
            return float(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median"))
        return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    if cpu_warm:
        fn()
    times = []
    for _ in range(max(1, cpu_runs)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def time_ms_alternating(fns, *, rounds: int = 5, warmup_ms: float = 5, rep_ms: float = 20) -> list[float]:
    """:func:`time_ms` of each of ``fns`` (the providers of one comparison) in ``rounds`` rotated rounds - round r
    times every provider once for ``rep_ms``, starting at provider r (mod the count) - and each provider's time the
    median of its rounds' medians. Why: timed one after another (100 ms each), two providers running the same kernel
    measured 8% apart in one attention row (H200, session 35), the clocks drifting with the heavy rows before them;
    interleaved, a drift falls on every provider alike. For calls that cannot be captured in a CUDA graph (autograd's
    backward, compiled callables' first calls); :func:`graph_ms_alternating` where they can. Each of ``fns`` must
    have run once already (compiled, autotuned). CPU: one run each (interpreter times say nothing about speed)."""
    if not on_gpu():
        return [time_ms(fn, cpu_runs=1, cpu_warm=False) for fn in fns]
    n = len(fns)
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        for j in range(n):
            i = (r + j) % n
            times[i].append(time_ms(fns[i], warmup_ms=warmup_ms, rep_ms=rep_ms))
    return [sorted(t)[len(t) // 2] for t in times]


def graph_ms(fn, *, flush_mb: int = 256, calls: int = 20, replays: int = 15) -> float:
    """GPU time of ``fn()`` in milliseconds with a cold L2 and no host in the way: ``calls`` x (L2 flush, fn) captured
    in one CUDA graph, minus the same graph of flushes alone, per call, median of ``replays`` paired replays.

    Why: decode-sized kernels run for 5-50 us, less than their host-side launch path, so :func:`time_ms` (events
    around each eager call) times the host; ``do_bench_cudagraph`` removes the host but keeps the L2 warm between
    calls, so a KV cache smaller than the L2 (50 MB on H100) reads at cache speed. Engines replay decode steps from
    CUDA graphs, each step's cache read cold: this measures that. ``fn`` must be capturable (no host sync).
    CPU: :func:`time_ms`."""
    return graph_ms_alternating([fn], flush_mb=flush_mb, calls=calls, replays=replays)[0]


def graph_ms_alternating(fns, *, flush_mb: int = 256, calls: int = 20, replays: int = 15) -> list[float]:
    """:func:`graph_ms` of each of ``fns`` (the providers of one comparison), their replays interleaved: round r
    replays the flush-only graph and every provider's graph once, and each provider's time is the median over rounds
    of (its graph - that round's flush graph) / ``calls``; round r starts at provider r (mod the count). The lent
    GPUs' clocks drift after heavy rows (one provider timed 9% slow right after a 2.7 ms-a-call row, then the others
    at their usual speed); interleaved, a drift affects every provider of a row alike."""
    if not on_gpu():
        return [time_ms(fn, cpu_runs=1) for fn in fns]
    flush = torch.empty(flush_mb << 20, dtype=torch.int8, device="cuda")
    for fn in fns:
        fn()  # compile, allocate
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graphs = []
    with torch.cuda.stream(stream):
        for fn in (None, *fns):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                for _ in range(calls):
                    flush.zero_()
                    if fn is not None:
                        fn()
            graphs.append(g)
    torch.cuda.synchronize()
    diffs: list[list[float]] = [[] for _ in fns]
    n = len(fns)
    for r in range(replays):
        t = [0.0] * (n + 1)
        # each round starts at another provider: at ~1,300 TF/s (FP8) a graph inherited the power-limited clocks of
        # the fastest provider before it and timed 15% slower than the same kernel elsewhere in the order; rotated,
        # every provider follows every other one across the rounds and the median sees each position
        for i in (0, *((r + j) % n + 1 for j in range(n))):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[i].replay()
            end.record()
            end.synchronize()
            t[i] = start.elapsed_time(end)
        for i in range(n):
            diffs[i].append((t[i + 1] - t[0]) / calls)
    return [sorted(d)[len(d) // 2] for d in diffs]


def loop_ms(fn, *, warmup_ms: float = 25, rep_ms: float = 100, repeats: int = 7) -> float:
    """Steady-state time per call of ``fn()`` called back to back, in milliseconds: what a training or inference loop
    sees. Each of ``repeats`` runs queues n calls and synchronizes once; the median of the runs' wall time / n.

    Why not :func:`time_ms` for whole models: ``do_bench`` flushes L2 with a large memset before every call and times
    between events, so the host enqueues the next call while the GPU clears the cache - launch overhead shorter than
    the flush never shows. A model whose step is host-bound (small batches) measured faster that way than any loop
    can run it. Here a step costs max(host time, GPU time), as it does in a loop. CPU: :func:`time_ms`, one run.
    """
    return loop_ms_alternating([fn], warmup_ms=warmup_ms, rep_ms=rep_ms, repeats=repeats)[0]


def loop_ms_alternating(fns, *, warmup_ms: float = 25, rep_ms: float = 100, repeats: int = 7) -> list[float]:
    """:func:`loop_ms` of each of ``fns`` (the providers of one comparison), their runs interleaved: run r of every
    function, then run r + 1. The lent hosts' CPU speed drifts by 30% and more within a call, and a host-bound step
    (a small batch) moves with it; timed one provider after another, a ratio compared two speeds of the machine."""
    if not on_gpu():
        return [time_ms(fn, cpu_runs=1, cpu_warm=False) for fn in fns]
    import torch

    counts = []
    for fn in fns:
        t0 = time.perf_counter()
        calls = 0
        while calls < 3 or (time.perf_counter() - t0) * 1e3 < warmup_ms:
            fn()
            calls += 1
            torch.cuda.synchronize()
        one = (time.perf_counter() - t0) / calls
        counts.append(max(1, min(10_000, round(rep_ms / 1e3 / repeats / max(one, 1e-6)))))
    runs: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, n, out in zip(fns, counts, runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            out.append((time.perf_counter() - t0) / n * 1e3)
    return [sorted(r)[len(r) // 2] for r in runs]


def card_name() -> str:
    """Short, path-safe name of the card ("h100", "h200", ...) or "cpu-interpreter"."""
    if not on_gpu():
        return "cpu-interpreter"
    name = torch.cuda.get_device_name().lower()
    for tag in ("h200", "h100", "b200", "a100", "l40s", "rtx"):
        if tag in name:
            return tag
    return name.replace(" ", "-")


def environment() -> dict:
    """Versions and card facts recorded next to every result file."""
    import triton

    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
           "card": card_name()}
    if on_gpu():
        props = torch.cuda.get_device_properties(0)
        env.update(device=torch.cuda.get_device_name(), sms=props.multi_processor_count,
                   cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    return env


def results_dir(root: str | os.PathLike | None = None) -> Path:
    """``perf/results/<card>/`` under ``root`` (default: the current directory)."""
    path = Path(root or ".") / "perf" / "results" / card_name()
    path.mkdir(parents=True, exist_ok=True)
    return path


SDPA_BACKENDS = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient")  # the benches' provider names for SDPA's backends


def sdpa_on(provider: str):
    """``F.scaled_dot_product_attention`` pinned to one backend (``provider``: one of :data:`SDPA_BACKENDS`), called
    with SDPA's own arguments; a backend that declines the call raises."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
               "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}[provider]

    def run(*args, **kwargs):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(*args, **kwargs)
    return run


def with_environment(df, env: dict):
    """``df`` with the run's card and versions (:func:`environment`) as columns: every result row names its card."""
    for key in ("card", "torch", "triton", "cudnn"):
        if key in env:
            df[key] = env[key]
    return df


def suite_main(run, user: str) -> None:
    """``python -m tilewright.bench.<op> [suite] [csv]``: run a suite, print the long-format rows (``run(suite,
    csv_path=...)`` writes the CSV)."""
    import sys

    suite = sys.argv[1] if len(sys.argv) > 1 else "default"
    df = run(suite, csv_path=sys.argv[2] if len(sys.argv) > 2 else None)
    require_pandas(user).set_option("display.width", 200)
    print(df.to_string(index=False))


def add_speedups(df, peer_by_case: dict[str, str]):
    """Fill the ``peer`` and ``speedup`` columns: peer's median time / provider's median time, per case."""
    df = df.copy()
    df["peer"] = df["case"].map(peer_by_case)
    peer_ms = {(r.case, r.provider): r.median_ms for r in df.itertuples()}
    df["speedup"] = [peer_ms.get((r.case, r.peer), float("nan")) / r.median_ms for r in df.itertuples()]
    return df


@contextlib.contextmanager
def compile_only(threads: int = 16):
    """Inside: every autotuned Triton launch compiles all its pruned configs, in parallel threads, without running.

    The autotuner otherwise compiles its ~24 configs one by one while benchmarking; doing the compiles up front in a
    thread pool (Triton's AsyncCompileMode; the MLIR passes and ptxas release the GIL) cuts the first-call cost of a
    sweep several-fold. Outputs written inside the block are garbage.
    """
    from concurrent.futures import ThreadPoolExecutor

    from triton.runtime._async_compile import AsyncCompileMode
    from triton.runtime.autotuner import Autotuner

    original = Autotuner.run

    def run(self, *args, **kwargs):
        grid = kwargs.pop("grid")
        kwargs.pop("warmup", None)
        self.warmup(*args, grid=grid, **kwargs)

    Autotuner.run = run
    try:
        with ThreadPoolExecutor(threads) as pool, AsyncCompileMode(pool):
            yield
    finally:
        Autotuner.run = original
