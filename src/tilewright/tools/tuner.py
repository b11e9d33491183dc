"""Sweep every eligible backend's GEMM configs for given shapes, keep the winners in the persistent cache.

For each shape the tuner builds the operands once, runs the peer (cuBLAS ``a @ b``; torch's CPU matmul off-GPU)
and then every candidate: the Triton configs of ``autotune/space.py`` that survive its pruning for the shape (run
through ``launch_gemm(config=...)``, so the autotuner itself is bypassed) and, where the router finds the "cuda"
backend eligible, each CUDA variant x tile order (``launch_cuda_gemm(variant=..., tile_order=...)``). Each
candidate's output is compared with the peer's before it is timed: a fast wrong config is recorded as ``wrong`` and
can never win. Timing goes through a pluggable ``timer(candidate, fn) -> ms`` (default: ``do_bench`` median, CUDA
graph replays for decode-sized M) so the CPU tests drive the whole pipeline with a deterministic fake timer.

The result is a :class:`tilewright.tools.report.Sweep` (one row per shape x backend x config) and, per shape, a
cache record (:mod:`tilewright.autotune.cache`) naming the fastest backend and each backend's best config.
"""
from __future__ import annotations

import datetime
import functools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import torch

from .._env import interpreting
from ..autotune import cache

if TYPE_CHECKING:  # (imported where used: report imports pandas, ~0.5 s of each precompile worker's start-up)
    from .report import Sweep

PEER_BACKEND = "peer"
TUNABLE_BACKENDS = ("triton", "cuda")
DECODE_MAX_M = 256  # time CUDA-graph replays below this M (microsecond kernels; as bench/gemm.py)
# ... and below this many FLOPs: a candidate's launch with an explicit config takes the kernel's full Python path
# (~60-100 us of host), so event timing of a loop of launches measured that, not the kernel - on an H200 every
# candidate of 512 x 2048 x 2048 timed 82-110 us (cuBLAS 12.6) and the M 512-1024 rows' winners were noise
# (perf/tune/h200/2026-11-28_1218/report.md).
GRAPH_MAX_FLOPS = 2.0 ** 36


def graph_timed(M: int, N: int, K: int) -> bool:
    """Whether the sweep times a shape's candidates as CUDA-graph replays (see :data:`GRAPH_MAX_FLOPS`)."""
    return M <= DECODE_MAX_M or 2.0 * M * N * K < GRAPH_MAX_FLOPS
MAX_REL_ERR = 1e-2


class TuneError(ValueError):
    """A request the tuner cannot serve (a forced backend that cannot run here, an empty shape list, ...)."""


@dataclass
class Candidate:
    """One thing to time: a backend's config for one shape, and the call that runs it."""

    backend: str
    name: str
    config: dict
    run: Callable[[], torch.Tensor]
    params: dict = field(default_factory=dict)  # report columns: block_m, block_n, tile_order, ...
    cudagraph: bool = False
    compile: Callable[[], object] | None = None  # compiles what ``run`` would run, launching nothing (precompile)


GRAPH_REP_MS = 15  # replay budget of a graph-timed candidate (see default_timer)


def default_timer(candidate: Candidate, fn: Callable[[], object]) -> float:
    """Median milliseconds of ``fn`` (``triton.testing.do_bench``, shortened; graph replays where flagged).

    Graph-timed candidates get a shorter budget: ``do_bench_cudagraph`` sizes its graph from five eager calls, which
    for these microsecond kernels time the host's launch path (~80 us), and then captures ``rep / that`` calls one by
    one through the same path - with 50 ms, ~600 captures and ten replays of them a candidate, ~0.2-0.4 s, so the two
    decode-sized shapes of the default suite took 27 of the 82 s of one GPU's sweeps. Ten replays of ~200 calls
    still average out the microsecond kernels' noise."""
    from ..bench.common import time_ms

    if candidate.cudagraph:
        return time_ms(fn, rep_ms=GRAPH_REP_MS, cudagraph=True)
    return time_ms(fn, warmup_ms=10, rep_ms=50)


# ------------------------------------------------------------------------------------------------ progress
class _PlainProgress:
    """One-line progress without tqdm: ``desc: done/total configs, ETA, best so far``; ``\\r`` on a terminal,
    a line every few seconds elsewhere (CI logs)."""

    def __init__(self, total: int, desc: str, stream=None):
        self.total, self.desc, self.done = total, desc, 0
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.t0 = self.last = time.monotonic()
        self.best = ""

    def update(self, n: int = 1, best: str | None = None) -> None:
        self.done += n
        if best:
            self.best = best
        now = time.monotonic()
        if self.tty or now - self.last >= 5 or self.done >= self.total:
            self.last = now
            self.stream.write(("\r" if self.tty else "") + self._line(now) + ("" if self.tty else "\n"))
            self.stream.flush()

    def _line(self, now: float) -> str:
        elapsed = now - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        eta_s = f"ETA {eta:4.0f}s" if math.isfinite(eta) else "ETA    ?"
        return f"{self.desc}: {self.done}/{self.total} configs, {eta_s}, best {self.best or '-'}"

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


class _TqdmProgress:
    def __init__(self, total: int, desc: str, stream=None):
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="cfg", file=stream or sys.stderr, leave=True)

    def update(self, n: int = 1, best: str | None = None) -> None:
        if best:
            self.bar.set_postfix_str(f"best {best}", refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


def make_progress(total: int, desc: str, stream=None, plain: bool | None = None):
    """A progress bar over ``total`` configs: tqdm when installed (and ``plain`` is not True), else a one-liner."""
    if not plain:
        try:
            import tqdm  # noqa: F401

            return _TqdmProgress(total, desc, stream)
        except ImportError:
            pass
    return _PlainProgress(total, desc, stream)


# ------------------------------------------------------------------------------------------------ candidates
def _triton_candidates(a, b, out, max_configs: int | None) -> list[Candidate]:
    from ..triton_kernels.gemm import launch_gemm, tma_compatible
    from ..triton_kernels.tile_order import TILE_ORDER_NAMES
    from .._env import SMEM_OPTIN_BYTES
    from ..autotune.space import gemm_configs, prune_gemm_configs

    M, K = a.shape
    N = b.shape[1]
    if a.is_cuda:
        props = torch.cuda.get_device_properties(a.device)
        major, smem = props.major, getattr(props, "shared_memory_per_block_optin", SMEM_OPTIN_BYTES)
    else:
        major, smem = 9, SMEM_OPTIN_BYTES  # the interpreter plays an sm_90, as launch_gemm does
    use_tma = major >= 9 and tma_compatible(a) and tma_compatible(b)
    tma_store = use_tma and tma_compatible(out)
    configs = prune_gemm_configs(gemm_configs(), M, N, K, a.element_size(), out.element_size(), tma_store,
                                 smem_limit=smem, use_tma=use_tma)
    if max_configs:
        configs = configs[:max_configs]
    found = []
    for cfg in configs:
        kw = dict(cfg.kwargs)
        order = TILE_ORDER_NAMES.get(kw["TILE_ORDER"], str(kw["TILE_ORDER"]))
        schedule = ("persistent+flatten" if kw["FLATTEN"] else "persistent") if kw["PERSISTENT"] else "per-tile"
        loads = "tma" if kw["TMA_LOADS"] and use_tma else "ptr"
        split_k = kw.get("SPLIT_K", 1)
        name = (f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} w{cfg.num_warps} s{cfg.num_stages} "
                f"{order}{kw['GROUP'] if order != 'row_major' else ''} {schedule} {loads}"
                + (f" splitk{split_k}" if split_k > 1 else ""))
        config = {**kw, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        params = dict(block_m=kw["BLOCK_M"], block_n=kw["BLOCK_N"], block_k=kw["BLOCK_K"], stages=cfg.num_stages,
                      warps=cfg.num_warps, tile_order=order, schedule=schedule, loads=loads, split_k=split_k)
        found.append(Candidate("triton", name, config, (lambda cfg=cfg: launch_gemm(a, b, out, config=cfg)),
                               params, compile=(lambda cfg=cfg: launch_gemm(a, b, out, config=cfg,
                                                                            compile_only=True))))
    return found


def _swept_cuda_variants(device) -> dict:
    """The sm_90a WGMMA kernel's variants a sweep times on ``device`` (``gemm_sm90.tuned_variants``: those a tuned
    launch may take); none off sm_90 (other families are not swept yet)."""
    from ..cuda_fallback import gemm_sm90 as cg

    if torch.cuda.get_device_capability(device)[0] != 9:
        return {}
    return cg.tuned_variants()


def _cuda_candidates(a, b, out, max_configs: int | None) -> list[Candidate]:
    from ..cuda_fallback import gemm_sm90 as cg

    found = []
    for vname, v in _swept_cuda_variants(a.device).items():
        for order in cg.TILE_ORDERS:
            group = 16
            config = {"variant": vname, "tile_order": order, "group": group}
            params = dict(block_m=v.bm, block_n=v.bn, block_k=64, stages=v.stages, warps=float("nan"),
                          tile_order=order, schedule="cooperative" if v.coop else "pingpong", loads="tma", split_k=1)
            run = (lambda v=v, order=order, group=group:
                   cg.launch_cuda_gemm(a, b, out, variant=v, tile_order=order, group=group))
            found.append(Candidate("cuda", f"{vname} {order}{group if order != 'row_major' else ''}", config, run,
                                   params))
    return found[:max_configs] if max_configs else found


def eligible_backends(a, b, requested=None) -> tuple[list[str], dict[str, str]]:
    """The tunable backends that can run GEMM on ``a``, ``b`` here (router's verdict), and the reason for each."""
    from .. import router

    names = list(requested) if requested else list(TUNABLE_BACKENDS)
    found, reasons = [], {}
    for name in names:
        if name not in TUNABLE_BACKENDS:
            raise TuneError(f"--backend {name!r}: not a tunable backend; choose from {', '.join(TUNABLE_BACKENDS)}")
        try:
            d = router.decide("gemm", a, b, backend=name)
            found.append(name)
            reasons[name] = d.reasons[-1]
        except ValueError as e:
            reasons[name] = str(e)
    return found, reasons


def _peer(a, b) -> Candidate:
    name = "cublas" if a.is_cuda else "torch_cpu"
    return Candidate(PEER_BACKEND, name, {"call": "a @ b"}, lambda: a @ b, {})


def _rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


# ------------------------------------------------------------------------------------------------ peak
def measured_peak(device, dtype, timer=None) -> float | None:
    """The card's dense peak for ``dtype``, measured once as cuBLAS on an 8192^3 GEMM and kept in the cache.

    None off-GPU (interpreter numbers are not performance)."""
    device = torch.device(device)
    if device.type != "cuda" or interpreting():
        return None
    known = cache.peak_tflops(device, dtype)
    if known:
        return known
    n = 8192
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    cand = Candidate(PEER_BACKEND, "peak", {}, functools.partial(torch.matmul, a, b))
    ms = (timer or default_timer)(cand, cand.run)
    peak = 2 * n ** 3 / ms / 1e9
    cache.store_many([], device, peak={str(dtype).replace("torch.", ""): peak})
    del a, b
    return peak


# ------------------------------------------------------------------------------------------------ sweep
def _winner_label(row) -> str:
    return f"{row['backend']} {row['config']} {row['median_ms']:.4g} ms ({row['tflops']:.4g} TF/s)"


def _checked_shapes(shapes) -> list[tuple[int, int, int]]:
    """``shapes`` as (M, N, K) tuples of ints, or :class:`TuneError` naming the first bad one (or an empty list)."""
    shapes = [tuple(int(x) for x in s) for s in shapes]
    if not shapes:
        raise TuneError("no shapes to tune")
    for s in shapes:
        if len(s) != 3 or min(s) <= 0:
            raise TuneError(f"shape {s}: expected (M, N, K) with three positive integers")
    return shapes


def _default_dtype(device: torch.device) -> torch.dtype:
    """The sweep's dtype when none is given: bf16 on a GPU, fp16 on the interpreter (its bf16 dot is wrong)."""
    return torch.bfloat16 if device.type == "cuda" else torch.float16


def tune_gemm(shapes, *, dtype=None, device=None, backends=None, timer=None, progress: bool = True,
              progress_stream=None, check: bool = True, max_configs: int | None = None, reuse: bool = True,
              store: bool = True, peak: float | None = None, log=print, jobs: int = 0, ready=None,
              finals: int | None = None) -> Sweep:
    """Tune GEMM for each ``(M, N, K)`` in ``shapes``; return the sweep and store each shape's winners in the cache.

    dtype: default bf16 on GPU, fp16 on CPU (the interpreter); backends: names to sweep (default: every eligible
    one; a named backend that cannot run here raises :class:`TuneError`); timer: ``timer(candidate, fn) -> ms``;
    check: run each candidate once and compare with the peer before timing (off only for fake-timer tests);
    max_configs: cap per backend (smoke runs); reuse: shapes already in the cache are reported and not re-tuned;
    peak: the card's peak TFLOP/s for the % of peak column (default: measured once per card, see
    :func:`measured_peak`); log: where one-line messages go; jobs: worker processes that compile the Triton
    candidates of every shape ahead of the sweep, shape by shape while earlier shapes are timed
    (:func:`precompile_triton`; 0: each compiles when the sweep reaches it); ready: ``{shape: event}`` set as a
    shape's candidates are compiled elsewhere (:func:`tune_gemm_multi`'s pool), waited for before that shape;
    finals: rounds of :func:`run_finals` per shape (default :data:`FINAL_ROUNDS` on a GPU, 0 on the interpreter,
    whose times say nothing). Each shape logs a line: its candidates, seconds swept, seconds it waited for its
    compiles, and the seconds since the tune started (where a tune's time goes).
    """
    shapes = _checked_shapes(shapes)
    gpu = torch.cuda.is_available() and not interpreting()
    device = torch.device(device or ("cuda" if gpu else "cpu"))
    dtype = dtype or _default_dtype(device)
    timer = timer or default_timer
    if finals is None:
        finals = FINAL_ROUNDS if device.type == "cuda" else 0
    t_start = time.monotonic()
    rows, records, cached = [], [], []
    ahead = builds = None
    todo = [s for s in shapes if not (reuse and cache.lookup("gemm", device, dtype, *s))]
    if jobs and todo and device.type == "cuda":  # (started first: the pool's start-up runs under the peak's timing)
        if backends is None or "cuda" in backends:
            builds = build_cuda_ahead(dtype, device, todo)
        if backends is None or "triton" in backends:
            ahead, ready = _precompile_ahead(todo, dtype, device, jobs, max_configs, log)
    if peak is None and timer is default_timer:
        peak = measured_peak(device, dtype)
    for M, N, K in shapes:
        if reuse and (rec := cache.lookup("gemm", device, dtype, M, N, K)):
            best = rec["backends"].get(rec["winner"], {})
            log(f"cached: gemm {M}x{N}x{K} {str(dtype).replace('torch.', '')}: {rec['winner']} "
                f"{best.get('name', '?')} {best.get('median_ms', float('nan')):.4g} ms (tuned {rec.get('tuned_at')});"
                " use --force to re-tune")
            cached.append((M, N, K))
            continue
        t_wait = time.monotonic()
        if ready is not None and (M, N, K) in ready and not ready[(M, N, K)].wait(PRECOMPILE_WAIT_S):
            log(f"gemm {M}x{N}x{K}: its candidates were not compiled within {PRECOMPILE_WAIT_S:.0f} s; the sweep "
                "compiles what it needs")
        t_sweep = time.monotonic()
        shape_rows = _sweep_shape(M, N, K, dtype, device, backends, timer, progress, progress_stream, check,
                                  max_configs, log, finals)
        t_done = time.monotonic()
        log(f"gemm {M}x{N}x{K}: {len(shape_rows)} candidates swept in {t_done - t_sweep:.1f} s"
            + (f" after {t_sweep - t_wait:.1f} s waiting for their compiles" if t_sweep - t_wait >= 0.05 else "")
            + f", done {t_done - t_start:.0f} s into the tune")
        rows.extend(shape_rows)
        rec = _record(shape_rows)
        if rec:
            records.append(("gemm", dtype, M, N, K, rec))
            if store:  # per shape: a sweep stopped part-way keeps every shape it finished
                cache.store_many([records[-1]], device)
    for thread in (ahead, builds):
        if thread is not None:
            thread.join()  # (finished what the sweep waited for; this waits out a pool's shutdown)
    if len(shapes) > len(cached):
        log(f"tuned {len(shapes) - len(cached)} shape(s) in {time.monotonic() - t_start:.0f} s")
    from ..bench.common import environment

    meta = {"op": "gemm", "dtype": str(dtype).replace("torch.", ""), "device_key": cache.device_key(device),
            "facts": cache.device_facts(device), "env": environment(), "peak_tflops": peak,
            "timer": getattr(timer, "__name__", type(timer).__name__), "cached_shapes": cached,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    from .report import Sweep

    return Sweep.from_rows(rows, meta)


# ------------------------------------------------------------------------------------------------ several GPUs
def sweep_seconds(shape) -> float:
    """Estimated seconds to sweep one GEMM shape, the cost :func:`split_shapes` balances. Fitted to a one-GPU tune of
    the default suite on an H200 with the finals and the 15 ms graph budget (candidates precompiled; perf/results/
    h200/tune_multi/tune_1gpu_2026-11-28_2246.log): ~5.9 s of per-candidate overhead whatever the size plus the
    candidates' runs (~0.95 s per TFLOP of one product: 6.0-9.6 s over 0.12-3.85 TFLOP), and 6.3-6.6 s for a decode
    or small shape (:func:`graph_timed`, timed as CUDA-graph replays; 10-17 s with the earlier 50 ms budget). FLOPs
    alone had put both decode shapes and six others on one GPU (a two-GPU tune of that suite took 0.84x the one-GPU
    time, its second GPU's precompile failing too)."""
    M, N, K = (int(x) for x in shape)
    if graph_timed(M, N, K):
        return 6.5
    return 5.9 + 0.95 * 2 * M * N * K / 1e12


def split_shapes(shapes, n: int) -> list[list[tuple]]:
    """``shapes`` dealt to ``n`` workers by :func:`sweep_seconds` so the workers finish close together: the costliest
    first, each to the least-loaded worker, then single moves and pairwise swaps out of the most-loaded worker while
    they lower its load. Each worker's shapes stay costliest first (the sweep order).

    Why the second step: dealing alone left 35.3 / 40.4 s of estimated sweep on two GPUs for the default suite's 11
    shapes (the last two shapes, 6 s each, both fell to the worker that was behind by less than one of them); a swap
    brings it to 37.5 / 38.2 (the two-GPU tune of 2026-11-29 finished its workers 49 and 55 s in)."""
    shapes = [tuple(int(x) for x in s) for s in shapes]
    cost = {s: sweep_seconds(s) for s in shapes}
    parts, loads = [[] for _ in range(n)], [0.0] * n
    for s in sorted(shapes, key=lambda s: (-cost[s], s)):
        i = loads.index(min(loads))
        parts[i].append(s)
        loads[i] += cost[s]
    for _ in range(4 * len(shapes)):  # (each accepted step lowers the largest load; a bound keeps it finite)
        h = loads.index(max(loads))
        best = None  # (new max of the pair, part, index in h, index in the other part or None for a move)
        for o in range(n):
            if o == h:
                continue
            for i, x in enumerate(parts[h]):
                if loads[o] + cost[x] < loads[h] - 1e-9:
                    pair = max(loads[h] - cost[x], loads[o] + cost[x])
                    if best is None or pair < best[0]:
                        best = (pair, o, i, None)
                for j, y in enumerate(parts[o]):
                    d = cost[x] - cost[y]
                    if d > 1e-9 and loads[o] + d < loads[h] - 1e-9:
                        pair = max(loads[h] - d, loads[o] + d)
                        if best is None or pair < best[0]:
                            best = (pair, o, i, j)
        if best is None or best[0] >= loads[h] - 1e-9:
            break
        _, o, i, j = best
        x = parts[h].pop(i)
        parts[o].append(x)
        loads[h] -= cost[x]
        loads[o] += cost[x]
        if j is not None:
            y = parts[o].pop(j)
            parts[h].append(y)
            loads[o] -= cost[y]
            loads[h] += cost[y]
    return [sorted(p, key=lambda s: (-cost[s], s)) for p in parts]


def _tune_worker(device: str, shapes, kwargs: dict, queue, ready) -> None:
    """One process of :func:`tune_gemm_multi`: tune ``shapes`` on ``device``, each once the parent's pool has
    compiled its candidates (``ready``: ``{shape: event}``), and send back (rows, meta) or an error."""
    try:
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        sweep = tune_gemm(shapes, device=device, progress=False, log=lambda m: print(f"[{device}] {m}", flush=True),
                          ready=ready, **kwargs)
        queue.put((device, sweep.df.to_dict("records"), sweep.meta, None))
    except BaseException as e:  # reported by the parent, which names the device
        queue.put((device, [], {}, f"{type(e).__name__}: {e}"))


def _collect(queue, procs, devices, poll_s: float = 5.0) -> list:
    """One result from each worker ``procs[i]`` (tuning ``devices[i]``). A worker that died without sending one (killed,
    a crash in the driver) would leave a plain wait hanging forever: every ``poll_s`` the dead workers are checked,
    and a dead one without a result stops the tune (the others are killed) with an error naming its device."""
    import queue as queue_module

    results = []
    while len(results) < len(procs):
        try:
            results.append(queue.get(timeout=poll_s))
        except queue_module.Empty:
            reported = {r[0] for r in results}
            dead = [d for d, proc in zip(devices, procs) if d not in reported and proc.exitcode not in (None, 0)]
            if dead:
                for proc in procs:
                    proc.kill()
                raise TuneError(f"tuning failed on {', '.join(dead)}: the worker process exited without a result "
                                f"(exit codes {[proc.exitcode for proc in procs]})") from None
    return results


# The multi-GPU tune's compile pool, at most this many processes. Why: its start is the tune's first wait - each
# worker imports torch / Triton and makes a CUDA context before its first compile, and 30 processes starting at once on
# a 32-core two-GPU H200 host reached their first compile 13.6 s in (the pool then compiled the whole suite's 669
# candidates in ~10 s more), where a one-GPU tune's 14-15 workers start in ~8 s. Two GPUs sweep a shape (~60 Triton
# candidates) every ~3 s between them; 16 processes compile one in ~2 s.
MULTI_POOL_MAX = 16


def multi_pool_size(jobs: int, devices: int, sweep_workers: int, cores: int | None = None) -> int:
    """Processes of the multi-GPU tune's compile pool: ``jobs`` per device, one core left to each sweep worker, at
    most :data:`MULTI_POOL_MAX`, at least one."""
    cores = cores if cores is not None else (os.cpu_count() or 2)
    return max(1, min(jobs * devices, cores - sweep_workers, MULTI_POOL_MAX))


def tune_gemm_multi(shapes, devices, *, jobs: int = 0, log=print, **kwargs):
    """:func:`tune_gemm` spread over ``devices`` (e.g. ``["cuda:0", "cuda:1"]``): one process per device, each
    sweeping its share of the shapes (:func:`split_shapes`) and storing its winners in the shared cache (the cache's
    writes are locked across processes), one merged :class:`Sweep` back. ``kwargs``: tune_gemm's. ``jobs`` (per
    device): the Triton candidates are compiled by one pool of ``jobs * len(devices)`` processes (at most
    :data:`MULTI_POOL_MAX`) in this process
    (:func:`precompile_triton`; Triton's disk cache then serves every worker; two GPUs each running a pool of their
    own measured 20-23 s of compiling where one pool did all of it in 17 s: a pool's start-up, not the compiles, is
    most of its time), less one core per sweep worker. The pool takes the shapes in the order the workers sweep them
    (their first shapes first) and each worker waits only for its next shape's compiles, so compiling overlaps the
    sweeps (the precompile launches nothing that could disturb a sweep's timings): two H200s took 80.4 s where one
    took 118.3 (0.68x; before the finals, the builds ahead and the shorter graph budget, which took one GPU to 100.4
    s). Devices of one card model share one cache section, so the result is what one GPU would have stored."""
    import multiprocessing

    t_start = time.monotonic()
    builds = None
    devices = [str(d) for d in devices]
    if len(set(devices)) != len(devices) or not devices:
        raise TuneError(f"devices: expected distinct devices, got {devices}")
    shapes = _checked_shapes(shapes)
    parts = split_shapes(shapes, len(devices))
    ctx = multiprocessing.get_context("spawn")  # (CUDA cannot be forked; each worker makes its own context)
    queue = ctx.Queue()
    ready = {s: ctx.Event() for s in shapes}
    procs = [ctx.Process(target=_tune_worker, args=(d, p, kwargs, queue, ready))
             for d, p in zip(devices, parts) if p]
    for proc in procs:
        proc.start()
    try:
        backends = kwargs.get("backends")
        device = torch.device(devices[0])
        dtype = kwargs.get("dtype") or _default_dtype(device)
        reuse = kwargs.get("reuse", True)
        # the workers' shapes interleaved: every worker's first shape, then every second, ...
        order = [part[i] for i in range(max(map(len, parts))) for part in parts if i < len(part)]
        todo = [s for s in order if not (reuse and cache.lookup("gemm", device, dtype, *s))]
        if jobs and todo and (backends is None or "cuda" in backends):
            builds = build_cuda_ahead(dtype, device, todo)  # (the workers' builds wait on the build cache's file locks)
        if jobs and todo and (backends is None or "triton" in backends):
            pool = multi_pool_size(jobs, len(devices), len(procs))
            precompile_triton(todo, dtype, device, pool, kwargs.get("max_configs"), progress=False, log=log,
                              on_shape=lambda shape: ready[tuple(shape)].set())
    finally:
        for event in ready.values():  # (also after a failed precompile: the sweeps compile what they need)
            event.set()
    # results read before join: a worker blocks until its result is read
    results = _collect(queue, procs, [d for d, p in zip(devices, parts) if p])
    if builds is not None:
        builds.join()
    log(f"tuned {len(shapes)} shape(s) on {len(procs)} GPU(s) in {time.monotonic() - t_start:.0f} s")
    for proc in procs:
        proc.join()
    errors = [f"{d}: {err}" for d, _, _, err in results if err]
    if errors:
        raise TuneError("tuning failed on " + "; ".join(errors))
    rows = [r for _, part, _, _ in sorted(results) for r in part]
    metas = [m for _, _, m, _ in sorted(results)]
    meta = {**metas[0], "devices": devices, "shapes_per_device": {d: len(p) for d, p in zip(devices, parts)},
            "cached_shapes": [s for m in metas for s in m.get("cached_shapes", [])]}
    import pandas as pd

    from .report import Sweep

    return Sweep(pd.DataFrame(rows), meta)


# ------------------------------------------------------------------------------------------------ precompile
PRECOMPILE_WAIT_S = 900.0  # a sweep waits this long for its shape's precompile, then compiles what it needs itself


def _precompile_ahead(shapes, dtype, device, jobs: int, max_configs, log):
    """:func:`precompile_triton` of ``shapes`` on a thread of this process, so the sweep of shape i runs while the
    pool compiles shape i + 1: returns the thread and ``{shape: event}``, each set once its shape is compiled (all set
    when the pool stops, whatever stopped it). The pool's progress is one closing line (no bar beside the sweep's)."""
    import threading

    ready = {tuple(s): threading.Event() for s in shapes}

    def run():
        try:
            precompile_triton(shapes, dtype, device, jobs, max_configs, progress=False, log=log,
                              on_shape=lambda shape: ready[tuple(shape)].set())
        except Exception as e:  # noqa: BLE001 - the sweeps compile what they need; say why the pool stopped
            log(f"precompile stopped ({type(e).__name__}: {e}); the sweep compiles what it needs")
        finally:
            for event in ready.values():
                event.set()

    thread = threading.Thread(target=run, name="tilewright-precompile", daemon=True)
    thread.start()
    return thread, ready


def build_cuda_ahead(dtype, device, shapes=()):
    """Start compiling the sm_90a GEMM variants that the sweep's CUDA candidates launch (bf16 / fp16, both operands
    row-major as the sweep builds them, no epilogue; also their direct-store builds where one of the ``shapes``
    (M, N, K) gives a contiguous output whose rows are off the 128-byte grid: gemm_sm90.direct_store), one thread
    each, and return the thread that waits for them (None where no CUDA candidate runs). Each build is an nvcc
    process and lands in the build cache, whose per-key locks (threads and processes) make a sweep that reaches a
    variant first wait for this build instead of running its own. Why: with an empty cache the first shape's sweep
    ran the five builds one after the other - 15 s for that shape against 6-7 s for the others (H200, one-GPU tune
    of the default suite)."""
    import concurrent.futures as cf
    import threading

    device = torch.device(device)
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16) or interpreting():
        return None
    from ..cuda_fallback import gemm_sm90 as cg
    from ..cuda_fallback.runtime import build, gemm_common

    variants = list(_swept_cuda_variants(device).values())
    if not variants or build.compiler_missing():
        return None
    a = torch.empty(64, 64, dtype=dtype)  # only the layouts and the dtype pick the build (CPU tensors do)
    odd_pitch = any(cg.direct_store_contiguous(M, N, a.element_size()) for M, N, _ in shapes)
    stores = [{}] + ([{"TW_STORE_DIRECT": 1}] if odd_pitch else [])
    builds = [(v, store) for v in variants for store in stores]

    def compile_one(v_store):
        v, store = v_store
        try:
            gemm_common.build_for(cg.SOURCE, "sm_90a", a, a, v, 0, None, 0, extra_defines=store)
        except Exception:  # noqa: BLE001 - the sweep's own build of this variant fails again and is recorded
            pass

    def run():
        with cf.ThreadPoolExecutor(len(builds)) as pool:
            list(pool.map(compile_one, builds))

    thread = threading.Thread(target=run, name="tilewright-cuda-builds", daemon=True)
    thread.start()
    return thread


def precompile_triton(shapes, dtype, device, jobs: int, max_configs: int | None = None, progress: bool = True,
                      progress_stream=None, log=print, on_shape=None) -> dict:
    """Compile the Triton candidates of ``shapes`` in ``jobs`` worker processes, ahead of the sweep that times them.

    Why: a sweep is compile-bound - each of the ~60 configs a large shape keeps compiles for 1-3 s, one after the
    other, while the timing itself takes ~0.1 s a config. Triton keeps every compiled kernel in its on-disk cache,
    keyed by source, config and argument specialization, so workers that compile each candidate once (on operands of
    the same shape, dtype and alignment as the sweep's, through the launch's own path with ``compile_only``) leave
    the sweep only cache loads. Nothing is launched, so the compiles may run while a sweep times candidates on the
    same GPU (:func:`tune_gemm`, :func:`tune_gemm_multi`). Workers are spawned processes, not threads (much of
    Triton's compile pipeline is Python, which threads would run one at a time), each on ``device``; worker ``k`` of
    ``n`` takes every n-th candidate of a shape, shape after shape in the given order. ``on_shape(shape)`` is called
    as each shape's candidates are all compiled. A candidate that fails to compile fails again in the sweep, which
    records the error: here it is only counted. Returns ``{"compiled": n, "errors": n, "seconds": s}``.
    """
    import concurrent.futures as cf
    import multiprocessing as mp

    jobs = max(1, int(jobs))
    dtype_name = str(dtype).replace("torch.", "")
    dev = str(device)
    tasks = [((M, N, K), dtype_name, dev, k, jobs, max_configs) for M, N, K in shapes for k in range(jobs)]
    t0 = time.monotonic()
    bar = make_progress(len(tasks), f"compile {len(shapes)} shape(s) on {jobs} processes", progress_stream) \
        if progress else None
    compiled = errors = 0
    startups = []
    with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_yield_to_sweeps,
                                initargs=(time.time(),)) as pool:
        # results come back in the tasks' order, a shape's `jobs` chunks after the previous shape's
        for i, (done, failed, startup) in enumerate(pool.map(_precompile_chunk, tasks)):
            compiled, errors = compiled + done, errors + failed
            if startup is not None:
                startups.append(startup)
            if bar:
                bar.update(1)
            if on_shape is not None and i % jobs == jobs - 1:
                on_shape(tasks[i][0])
    if bar:
        bar.close()
    seconds = time.monotonic() - t0
    ready = (f"; workers started in up to {max(s[0] for s in startups):.1f} s, their first compile could begin "
             f"{max(s[1] for s in startups):.1f} s in" if startups else "")
    log(f"compiled {compiled} Triton candidates in {seconds:.0f} s on {jobs} processes"
        + (f" ({errors} failed; the sweep records why)" if errors else "") + ready)
    return {"compiled": compiled, "errors": errors, "seconds": seconds, "startups": startups}


_startup: dict = {}  # a precompile worker's start: {"spawned": wall clock the pool was made, "imported": ...}


def _yield_to_sweeps(spawned: float | None = None) -> None:
    """Initializer of :func:`precompile_triton`'s workers: a lower scheduling priority (nice 10). The pool runs beside
    the sweeps and sizes itself to the cores the sweeps leave, but each compile also starts ptxas and LLVM threads; a
    sweep process starved of its core launches and loads kernels late, and overlapping the two had saved nothing
    (one-GPU tune 118 s with the pool beside the sweeps, 121 s with it first; H200). Nice'd, a compile waits for
    the sweeps instead. Also notes when the worker got here (its imports done) against ``spawned``, the wall clock
    at which the pool was made: the first shape of a tune waits for the pool's start (12 s of a one-GPU tune's first
    shape, H200), which the closing log line reports."""
    if spawned is not None:
        _startup.update(spawned=spawned, imported=time.time())
    try:
        os.nice(10)
    except (AttributeError, OSError):  # (no nice on this platform, or not permitted: compile at normal priority)
        pass


_chunk_operands: dict = {}


def _precompile_chunk(task) -> tuple[int, int, tuple | None]:
    """Worker of :func:`precompile_triton`: compile candidates ``slot``, ``slot + n``, ... of one shape, launching
    nothing. Returns (compiled, failed, startup): startup, on this process's first chunk only (else None), is
    (seconds from the pool's creation to this worker's imports done, to its operands allocated - the CUDA context
    made - and its first compile about to start)."""
    (M, N, K), dtype_name, dev, slot, n, max_configs = task
    dtype = getattr(torch, dtype_name)
    key = (M, N, K, dtype_name, dev)
    if dev.startswith("cuda") and torch.device(dev).index is not None:
        # Triton launches on the current device: a worker for cuda:1 left on device 0 failed every candidate
        # ("cannot be accessed from Triton"), and the sweep then compiled them one by one (two-GPU tune, H100).
        # (A bare "cuda" is the current device already.)
        torch.cuda.set_device(torch.device(dev))
    if key not in _chunk_operands:  # one shape's operands per worker, built as _sweep_shape builds them
        _chunk_operands.clear()
        if dev.startswith("cuda"):
            torch.cuda.empty_cache()
        # (empty: compiling reads no values, and filling them would put kernels on the GPU a sweep is timing)
        _chunk_operands[key] = tuple(torch.empty(shape, device=dev, dtype=dtype) for shape in ((M, K), (K, N), (M, N)))
    a, b, out = _chunk_operands[key]
    startup = None
    if "spawned" in _startup and "reported" not in _startup:
        _startup["reported"] = True
        startup = (_startup["imported"] - _startup["spawned"], time.time() - _startup["spawned"])
    done = failed = 0
    for cand in _triton_candidates(a, b, out, max_configs)[slot::n]:
        try:
            (cand.compile or cand.run)()
            done += 1
        except Exception:  # noqa: BLE001 - counted; the sweep records the error for this config
            failed += 1
    return done, failed, startup


# ------------------------------------------------------------------------------------------------ finals
# A sweep times its candidates one after the other for ~5-17 s, and the card's clocks drift over that time (a heavy
# shape warms it, a light one lets it boost): the two GPUs of one host, and two runs of one GPU, measured the same
# near-fastest configs up to 3-5% apart, more than report.TIE_BAND, and a one-GPU and a two-GPU tune of the default
# suite stored the same winner for 4 of 11 shapes (H200, 2026-11-28). So the contenders - the configs within
# FINAL_BAND of the sweep's fastest, at most FINAL_MAX of them, and the peer - are timed again in FINAL_ROUNDS
# interleaved rounds (each round in a rotated order, so no config always follows the same neighbour), and each keeps
# its median over the rounds: any drift now falls on all of them alike. Each backend's best in the sweep runs in the
# finals too, and report.winners picks among a shape's finalists only, so the tie rule sees like-for-like times.
FINAL_BAND = 0.05
FINAL_MAX = 4
FINAL_ROUNDS = 3


def run_finals(rows: list[dict], cands: list[Candidate], timer, rounds: int) -> list[int]:
    """Re-time one shape's contenders interleaved (see :data:`FINAL_BAND`) and replace their ``median_ms`` (and
    ``tflops``) with the median over ``rounds`` rounds; the sweep's own time stays in ``sweep_ms``. ``rows[i]`` is
    ``cands[i]``'s row. Returns the indices re-timed (none with ``rounds`` 0 or fewer than two contenders). A
    contender that fails in the finals (it had run in the sweep) keeps its sweep time and drops out of the rounds."""
    timed = [i for i, r in enumerate(rows) if r["status"] == "ok" and not math.isnan(r["median_ms"])]
    tuned = [i for i in timed if cands[i].backend != PEER_BACKEND]
    if rounds <= 0 or len(tuned) < 2:
        return []
    fastest = min(rows[i]["median_ms"] for i in tuned)
    contenders = sorted((i for i in tuned if rows[i]["median_ms"] <= fastest * (1 + FINAL_BAND)),
                        key=lambda i: rows[i]["median_ms"])[:FINAL_MAX]
    if len(contenders) < 2:
        return []
    for backend in {cands[i].backend for i in tuned} - {cands[i].backend for i in contenders}:
        # each backend's best runs too: report.winners compares a backend's finalists only, with each other's
        contenders.append(min((i for i in tuned if cands[i].backend == backend), key=lambda i: rows[i]["median_ms"]))
    order = contenders + [i for i in timed if cands[i].backend == PEER_BACKEND]
    samples = {i: [] for i in order}
    for r in range(rounds):
        if not order:
            break
        for i in order[r % len(order):] + order[:r % len(order)]:
            try:
                samples[i].append(float(timer(cands[i], cands[i].run)))
            except Exception:  # noqa: BLE001 - it ran in the sweep; a failure now leaves its sweep time
                samples[i] = None
                order = [j for j in order if j != i]
    for i, got in samples.items():
        if got:
            row = rows[i]
            ms = sorted(got)[len(got) // 2]
            row["sweep_ms"], row["median_ms"] = row["median_ms"], ms
            row["tflops"] = 2 * row["M"] * row["N"] * row["K"] / ms / 1e9
    return [i for i, got in samples.items() if got]


def _sweep_shape(M, N, K, dtype, device, backends, timer, progress, progress_stream, check, max_configs, log,
                 finals: int = 0):
    a = torch.randn(M, K, device=device, dtype=dtype)
    b = torch.randn(K, N, device=device, dtype=dtype) / K ** 0.5
    out = torch.empty(M, N, device=device, dtype=dtype)
    names, reasons = eligible_backends(a, b, backends)
    if backends and len(names) < len(list(backends)):
        bad = [n for n in backends if n not in names]
        raise TuneError(f"backend {bad[0]!r} cannot run gemm {M}x{N}x{K} here: {reasons[bad[0]]}")
    if not names:
        raise TuneError(f"no tunable backend can run gemm {M}x{N}x{K} here: " + "; ".join(reasons.values()))
    cands = [_peer(a, b)]
    if "triton" in names:
        cands += _triton_candidates(a, b, out, max_configs)
    if "cuda" in names:
        cands += _cuda_candidates(a, b, out, max_configs)
    graphed = device.type == "cuda" and graph_timed(M, N, K)
    for c in cands:
        c.cudagraph = graphed
    bar = make_progress(len(cands), f"tune gemm {M}x{N}x{K}", progress_stream) if progress else None
    ref, rows, best = None, [], None
    shape = f"{M}x{N}x{K}"
    for cand in cands:
        row = dict(op="gemm", shape=shape, M=M, N=N, K=K, dtype=str(dtype).replace("torch.", ""),
                   backend=cand.backend, config=cand.name, **cand.params, median_ms=float("nan"),
                   tflops=float("nan"), rel_err=float("nan"), status="ok", config_json=json.dumps(cand.config))
        try:
            if check:
                got = cand.run()
                if cand.backend == PEER_BACKEND:
                    ref = got.float()
                elif ref is not None:
                    row["rel_err"] = _rel_err(got, ref)
                    if not row["rel_err"] < MAX_REL_ERR:
                        row["status"] = "wrong"
            if row["status"] == "ok":
                ms = float(timer(cand, cand.run))
                row["median_ms"], row["tflops"] = ms, 2 * M * N * K / ms / 1e9
        except Exception as e:  # noqa: BLE001 - one config that fails to compile or launch must not end a sweep
            row["status"] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        rows.append(row)
        if row["status"] == "ok" and cand.backend != PEER_BACKEND and (best is None or
                                                                        row["median_ms"] < best["median_ms"]):
            best = row
        if bar:
            bar.update(1, _winner_label(best) if best else None)
    if bar:
        bar.close()
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        log(f"  {shape}: {len(bad)} of {len(rows)} candidates not timed ({bad[0]['config']}: {bad[0]['status']})")
    run_finals(rows, cands, timer, finals)
    if device.type == "cuda":
        del a, b, out, ref
        torch.cuda.empty_cache()
    return rows


def _record(shape_rows) -> dict | None:
    """The cache record of one shape's rows: each backend's best config, the overall winner, the peer's time."""
    import pandas as pd

    df = pd.DataFrame(shape_rows)
    from .report import winners

    win = winners(df)
    if win.empty:
        return None
    w = win.iloc[0]
    backends = {}
    for backend in TUNABLE_BACKENDS:
        ms_col = f"{backend}_ms"
        if ms_col in win and not math.isnan(w[ms_col]):
            best = df[(df.backend == backend) & (df.config == w[f"{backend}_config"])].iloc[0]
            backends[backend] = {"name": best.config, "config": json.loads(best.config_json),
                                 "median_ms": float(best.median_ms), "tflops": float(best.tflops)}
    if not backends:
        return None
    peer = df[df.backend == PEER_BACKEND]
    return {"winner": w["winner"], "backends": backends,
            "peer": peer.config.iloc[0] if len(peer) else None,
            "peer_ms": float(peer.median_ms.iloc[0]) if len(peer) else None,
            "candidates": int((df.backend != PEER_BACKEND).sum())}
