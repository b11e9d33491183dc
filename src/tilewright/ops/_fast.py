"""Eager replay: an op called again with an unchanged signature launches its recorded kernel directly.

Why: an eager call's Python path - argument checks, the router, the launch plan, Triton's JIT dispatch - cost 115-190
us per call on the device's CPU (``tilewright bench --op host``, H100 host), 6-13x torch's own op and longer than the
kernel of a mid-sized GEMM. Nearly all of it re-derives what the previous call with the same signature already knew.

How: the op computes a signature key from its arguments (shapes, strides, dtypes, devices, 16/128-byte alignment of
every pointer, the options, and :func:`state` - the environment switches, the tuning cache generation, the router's
epoch, the forced backend and the current device: everything the checks, the router and the launch plan read; the
GEMM adds whether autograd records, which decides whether its kernel also stores the pre-activation). On a miss it
runs the full path through :func:`run_recorded`; a launcher that knows its launch is replayable reports it with
``_record.record`` as a ``triton_kernels._runtime.BoundLaunch`` and the tensors behind each pointer argument
(``roles``). :func:`build` turns one recorded launch into a :class:`Replay` only when each role is exactly one of the
op's inputs (same pointer: the op made no copy) or one of its outputs - the op says which, nothing is inferred from
equal addresses. A hit allocates the outputs and calls the launch (inside the op's eager autograd.Function when
autograd records, ops/_eager.call_checked).

What never replays (the full path runs every time): a call the full path served with torch's reference formulas (the
gemm op's plain cuBLAS call does replay: ``ops/gemm._TorchGemm``), or with more than one launch (fp16
rms_norm_linear's weight scale), or with a copy of an input (a strided bias, a non-unit-stride attention input);
calls that torch.compile / export / a dispatch or function mode / functorch traces, or that take tensor subclasses;
the interpreter. An error raised by the full path is raised again by the next call with the same signature, since
nothing was recorded.
"""
from __future__ import annotations

import torch

from .. import backends, router
from .._env import interpreting, read_env
from ..autotune import cache
from . import _aten
from .._record import is_recording, record, recording, tensor_signature
from ._eager import _PLAIN, traced

CACHE_MAX = 4096
_caches: list[dict] = []
_env_names: tuple | None = None  # (names, the same as bytes)


def new_cache() -> dict:
    """A replay cache for one op (cleared with every other by :func:`invalidate`)."""
    replays: dict = {}
    _caches.append(replays)
    return replays


def invalidate() -> None:
    """Forget every recorded replay (``router.invalidate()`` also makes them unreachable: its epoch is in the key)."""
    for replays in _caches:
        replays.clear()


def store(cache: dict, key, replay) -> None:
    """Keep ``replay`` under ``key``; a full cache is emptied first (a workload with thousands of signatures is not
    one the replay helps, and the full path stays correct)."""
    if len(cache) >= CACHE_MAX:
        cache.clear()
    cache[key] = replay


def eligible(*tensors) -> bool:
    """Whether an eager call on ``tensors`` (None entries skipped) may replay: CUDA tensors of plain types, no
    tracing (ops/_eager.traced), no interpreter. Autograd is the caller's check."""
    if traced():
        return False
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or not t.is_cuda):
            return False
    return not interpreting()


sig = tensor_signature  # what a replay depends on in one tensor argument (None stays None)


def state() -> tuple:
    """Process state every op's full path reads besides its arguments: the router's and the records' environment
    switches, TILEWRIGHT_AUTOTUNE, the ATen route's limit (ops/_aten.py), the tuning cache generation, the router's
    epoch (``router.invalidate()`` bumps it), the backends' readiness epoch (a CUDA family disabled after a failed
    launch stops replaying), a forced backend (``use_backend``), the current device."""
    global _env_names
    if _env_names is None:
        names = (*backends.environment(), "TILEWRIGHT_AUTOTUNE", _aten.ENV)
        _env_names = (names, tuple(n.encode() for n in names))
    return (read_env(*_env_names), cache.generation, router.epoch, backends.readiness_epoch,
            router._local.backend, torch._C._cuda_getDevice())


class Replay:
    """Allocate the op's outputs, launch the recorded kernel on the new pointers, return the outputs."""

    __slots__ = ("_bound", "_outputs", "_roles", "_sources", "_takes_tensors")

    def __init__(self, bound, sources: list[tuple[bool, int]], outputs: list[tuple], roles: tuple = ()):
        self._bound = bound
        # a launch through torch (the gemm op's cuBLAS path) takes the tensors themselves, a kernel their addresses
        self._takes_tensors = getattr(bound, "takes_tensors", False)
        self._sources = sources  # per pointer argument: (is an output, index)
        self._outputs = outputs  # (shape, stride, dtype) of each output
        self._roles = roles  # per pointer argument: its role name (reported to an enclosing recording)

    def impl(self, n_inputs: int):
        """The replay in the op implementation's calling convention: ``impl(*op_args)`` -> tuple of outputs, reading
        the first ``n_inputs`` arguments (tensors at the recorded inputs' addresses, e.g. their 2-D views)."""
        def run(*args):
            return tuple(self(args[0].device, *args[:n_inputs]))
        return run

    def __call__(self, device, *inputs) -> list[torch.Tensor]:
        outs = [torch.empty_strided(shape, stride, dtype=dtype, device=device) for shape, stride, dtype in
                self._outputs]
        tensors = [outs[i] if is_out else inputs[i] for is_out, i in self._sources]
        if self._takes_tensors:
            self._bound(*tensors)
        else:
            self._bound(*[t.data_ptr() for t in tensors])
        if is_recording():  # a caller records its own replay around this one (a public function around its op)
            record(self._bound, dict(zip(self._roles, tensors)))
        return outs


def build(launches: list, inputs: dict, outputs: dict) -> Replay | None:
    """A :class:`Replay` of the single launch in ``launches`` whose roles are all in ``inputs`` (``{role: (index,
    tensor)}``: the op's input tensor at that index of the replay's arguments) or ``outputs`` (``{role: (index,
    tensor)}``: the op's returned tensor); None when anything differs: no launch or several, an unbound one, a role
    the op did not name, or a role whose tensor is not at the named input's address (a copy the op made)."""
    if len(launches) != 1 or launches[0][0] is None:
        return None
    bound, roles = launches[0]
    sources = []
    names = tuple(roles)
    for role, t in roles.items():
        if role in inputs:
            i, expected = inputs[role]
            if expected is None or t.data_ptr() != expected.data_ptr():
                return None
            sources.append((False, i))
        elif role in outputs:
            i, expected = outputs[role]
            if t.data_ptr() != expected.data_ptr():
                return None
            sources.append((True, i))
        else:
            return None
    written = {i for is_out, i in sources if is_out}
    specs = [None] * len(outputs)
    for i, t in outputs.values():
        if t.numel() and i not in written:
            return None  # an output the launch did not write (a torch op made it): a replay would return garbage
        specs[i] = (tuple(t.shape), t.stride(), t.dtype)
    return Replay(bound, sources, specs, names)


def replayed_op(cache: dict, tensors: tuple, roles: tuple, options: tuple, out_roles: tuple, full):
    """The body of a custom op that replays its own signature: ``full()`` (the op's full path, returning its output
    tuple) recorded on a first call, the :class:`Replay` afterwards. ``tensors``: the op's tensor arguments (None
    allowed), ``roles``: the kernel argument each one is (None: not a kernel argument), ``options``: the op's other
    arguments (part of the key), ``out_roles``: the kernel argument each output is. Callers of the op itself - a
    torch.compile'd graph, ``torch.ops.tilewright.*`` - get the replay's cost this way; the public functions keep
    their own replay in front of it (it also skips the dispatcher)."""
    if not eligible(*tensors):
        return full()
    key = (*[sig(t) for t in tensors], *options, state())
    replay = cache.get(key)
    if replay is not None:
        return tuple(replay(tensors[0].device, *tensors))
    return run_recorded(cache, key, full, {r: (i, t) for i, (r, t) in enumerate(zip(roles, tensors)) if r},
                        lambda result: {r: (i, o) for i, (r, o) in enumerate(zip(out_roles, result))})


def run_recorded(cache: dict, key, call, inputs: dict, outputs):
    """``call()`` (the op's full path) with its launches recorded; stores the :class:`Replay` :func:`build` makes of
    them under ``key`` (when it makes one) and returns ``call()``'s result. ``outputs(result)`` names the outputs'
    roles as :func:`build` takes them."""
    with recording() as launches:
        result = call()
    replay = build(launches, inputs, outputs(result))
    if replay is not None:
        store(cache, key, replay)
    return result
