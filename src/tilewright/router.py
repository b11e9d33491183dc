"""Capability router: which backend runs an op on this device for these inputs, and why.

The router is policy over the records of :mod:`tilewright.backends` (it knows no op and no kernel). For every call:
1. a forced backend: the op's ``backend=`` argument, else ``tilewright.use_backend(...)``, else the
   ``TILEWRIGHT_BACKEND`` environment variable. A forced backend that is not eligible (or not ready) is an error
   that says why - never a silent substitution;
2. otherwise the backends of the op in :data:`backends.ORDER`: the first whose record is eligible, prefers these
   shapes (its measured-preference predicate) and is ready (a CUDA kernel's first-use self-check) serves.

Eligibility of a record, in this order: its off switch (``TILEWRIGHT_CUDA=0`` for every CUDA kernel), the device's
compute capability against its archs, what it requires of the machine (a CUDA compiler), its dtypes, its
constraints. A CUDA kernel that fails its self-check, or does not compile, is disabled with one warning and Triton
serves (``cuda_fallback/runtime/guard.py``).

This module is consulted inside the ops' implementations, which are opaque to torch.compile, so device queries here
never break a graph.

Decisions for CUDA tensors are cached per call signature (op, backend request, every tensor's shape / strides / dtype /
device / pointer alignment, the environment switches the records read, the autotune-cache generation): working them
out costs ~50 us of Python per call (constraint checks, cache lookups, reason strings) - as much as a whole 4096^2
GEMM on H200 is worth in launch slack. A cached decision re-runs its record's readiness check (cheap once checked)
so a kernel family disabled by a failed launch is never served from the cache. ``invalidate()`` drops the cache.
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field

import torch

from . import backends
from ._env import capability, read_env
from ._record import tensor_signature
from .backends import BACKENDS, Backend

class _ThreadState(threading.local):
    """This thread's forced backend (``use_backend``; None: none). The class attribute is every thread's default, so
    the read each replay key and decision makes is a plain lookup: ``getattr(local, name, None)`` on a bare
    threading.local raises and catches AttributeError inside, 0.73 against 0.16 us on the dev box."""

    backend: str | None = None


_local = _ThreadState()


@contextlib.contextmanager
def use_backend(name: str | None):
    """Force ``name`` ("triton", "torch", "cuda", or None for automatic) for the ops called inside the ``with``
    block."""
    if name is not None and name not in BACKENDS:
        raise ValueError(f"use_backend: unknown backend {name!r}; expected one of {BACKENDS} or None")
    previous = _local.backend
    _local.backend = name
    try:
        yield
    finally:
        _local.backend = previous


@dataclass
class Decision:
    """The router's answer: the chosen backend, the chain of reasons that led to it and the record that serves."""

    op: str
    backend: str
    reasons: list[str] = field(default_factory=list)
    forced: bool = False  # chosen by backend=, use_backend() or TILEWRIGHT_BACKEND rather than by the router
    record: Backend | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        return f"{self.op}: backend={self.backend}\n" + "\n".join(f"  - {r}" for r in self.reasons)

    def launch(self, *args, **kwargs) -> bool:
        """Run the chosen record's op-layer entry; False when it has none or it declines (the op then runs Triton)."""
        launch = self.record.launch if self.record is not None else None
        return bool(launch is not None and launch(*args, **kwargs))


def __getattr__(name: str):
    """``PREFERENCE``: {op: backend names in the order the automatic choice tries them}, read from the registry."""
    if name == "PREFERENCE":
        return {op: backends.preference(op) for op in backends.ops()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _capability(device: torch.device) -> tuple[int, int] | None:
    """Compute capability of a CUDA device, None for other devices (``_env.capability``; tests fake it here by
    monkeypatching)."""
    return capability(device)


def _device(tensors) -> torch.device:
    return next((t.device for t in tensors if isinstance(t, torch.Tensor)), torch.device("cpu"))


def _fits(record: Backend, tensors) -> tuple[bool, str]:
    """A record on this machine and these inputs: its requirement, its dtypes, its constraints."""
    missing = record.requires() if record.requires else None
    if missing:
        return False, f"{record.backend}: {missing}"
    if record.dtypes is not None:
        bad = [t.dtype for t in tensors
               if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype not in record.dtypes]
        if bad:
            return False, (f"{record.backend}: dtype {bad[0]} not supported for {record.op} "
                           f"({', '.join(map(str, record.dtypes))})")
    ok, why = record.constraints(*tensors)
    if ok and record.kernel:
        return True, f"{record.backend}: {record.kernel}: {why}"
    return ok, f"{record.backend}: {why}"


def _select(op: str, backend: str, tensors) -> tuple[Backend | None, str]:
    """The record of ``backend`` that can run ``op`` on these tensors and why, or (None, why none can)."""
    candidates = backends.records(op, backend)
    if not candidates:
        return None, f"{backend}: no {backend} implementation of {op}"
    on = [r for r in candidates if not (r.switch and os.environ.get(r.switch, "1") == "0")]
    if not on:
        return None, f"{backend}: disabled by {candidates[0].switch}=0"
    if any(r.archs is not None for r in on):
        device = _device(tensors)
        cap = _capability(device)
        fitting = [r for r in on if r.archs is None or (cap is not None and cap[0] in r.archs)]
        if not fitting:
            if cap is None:
                return None, f"{backend}: tensors on {device.type} (needs an NVIDIA GPU)"
            have = ", ".join(f"sm_{m}x" for m in sorted({m for r in on for m in r.archs or ()}))
            return None, f"{backend}: no {op} kernel for sm_{cap[0]}{cap[1]} (have: {have}); Triton covers it"
        on = fitting
    why = ""
    for record in on:
        ok, why = _fits(record, tensors)
        if ok:
            return record, why
    return None, why


def _eligible(op: str, backend: str, tensors) -> tuple[bool, str]:
    """Whether ``backend`` can run ``op`` on these tensors, and a one-line reason."""
    record, why = _select(op, backend, tensors)
    return record is not None, why


def _ready(record: Backend, tensors) -> tuple[bool, str]:
    """The record's readiness on this device (a CUDA kernel compiles and self-checks on first use)."""
    if record.ready is None:
        return True, f"{record.backend}: ready"
    ok, why = record.ready(*tensors)
    return ok, f"{record.backend}: {why}"


_BACKEND_ENV = (("TILEWRIGHT_BACKEND",), (b"TILEWRIGHT_BACKEND",))


def _forced() -> tuple[str | None, str]:
    """The forced backend and who forced it: ``use_backend()`` (this thread), else ``TILEWRIGHT_BACKEND``. Read on
    every backward call, hence the environment through ``read_env`` (bytes on POSIX)."""
    ctx = _local.backend
    if ctx is not None:
        return ctx, "tilewright.use_backend()"
    env = read_env(*_BACKEND_ENV)[0]
    if env:
        return (env.decode() if isinstance(env, bytes) else env), "TILEWRIGHT_BACKEND"
    return None, ""


_DECISIONS_MAX = 4096
_decisions: dict = {}


# Bumped by invalidate(): the ops' eager replay keys (ops/_fast.state) hold it, so their replays are dropped too.
epoch = 0


def invalidate() -> None:
    """Forget every cached decision (after changing something the cache key does not see, e.g. another process
    wrote the autotune cache, or a test faked a capability), and every eager replay recorded under it."""
    global epoch
    _decisions.clear()
    epoch += 1


_env_names: tuple = ((), (), None)  # (names, the same as bytes, the registry's records they were read from)


def _environment() -> tuple[tuple[str, ...], tuple[bytes, ...]]:
    """``backends.environment()`` and its bytes form for ``read_env``, recomputed only when the registry's records
    changed (kernel modules register theirs on the first lookup; tests replace records)."""
    global _env_names
    names, encoded, records = _env_names
    if records is None or tuple(backends.REGISTRY.values()) != records:
        names = backends.environment()  # loads the kernel modules first: snapshot the registry after it
        encoded = tuple(n.encode() for n in names)
        _env_names = (names, encoded, tuple(backends.REGISTRY.values()))
    return names, encoded


def _tensor_signature(t):
    """A decision-key entry: a tensor's :func:`_record.tensor_signature`, anything else as it is."""
    return tensor_signature(t) if isinstance(t, torch.Tensor) else t


def decide(op: str, *tensors, backend: str | None = None) -> Decision:
    """Pick the backend for ``op`` on ``tensors``; raise ValueError if a forced backend cannot run them."""
    first = tensors[0] if tensors else None
    if not (isinstance(first, torch.Tensor) and first.is_cuda):
        return _decide(op, tensors, backend)
    from .autotune import cache

    # A hit is returned as is: what could make it stale is in the key - the environment, the tuning cache, the
    # tensors' signature, and readiness (a family disabled or a failed self-check moves backends.readiness_epoch).
    key = (op, backend, _local.backend, cache.generation, backends.readiness_epoch,
           read_env(*_environment()), tuple([_tensor_signature(t) for t in tensors]))
    hit = _decisions.get(key)
    if hit is not None:
        return hit
    decision = _decide(op, tensors, backend)  # raises for a forced backend that cannot run: never cached
    if len(_decisions) >= _DECISIONS_MAX:
        _decisions.clear()
    _decisions[key] = decision
    return decision


def _decide(op: str, tensors, backend: str | None, honor_forced: bool = True) -> Decision:
    order = backends.preference(op)
    if not order:
        raise ValueError(f"router: unknown op {op!r}; known ops: {sorted(backends.ops())}")
    source = "backend= argument"
    if backend is None and honor_forced:
        backend, source = _forced()
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"{source}: unknown backend {backend!r}; expected one of {BACKENDS}")
        record, why = _select(op, backend, tensors)
        ok = record is not None
        if ok and record.ready is not None:
            ok, why = _ready(record, tensors)
        if not ok:
            raise ValueError(f"{op}: backend {backend!r} forced by {source} cannot run these inputs: {why}")
        return Decision(op, backend, [f"forced by {source}", why], forced=True, record=record)
    reasons = []
    for candidate in order:
        record, why = _select(op, candidate, tensors)
        ok = record is not None
        if ok and record.preferred is not None:
            ok, why = record.preferred(*tensors)
            why = f"{candidate}: {why}"
        if ok and record.ready is not None:  # keep the preference reason (which kernel, measured or not) beside it
            ok, checked = _ready(record, tensors)
            why = f"{why}; {checked}"
        reasons.append(("chosen: " if ok else "skipped: ") + why)
        if ok:
            return Decision(op, candidate, reasons, record=record)
    raise AssertionError("the torch backend is always eligible")  # pragma: no cover


def backward_backend(op: str, backend: str | None, *tensors) -> str | None:
    """The backend a backward pass runs ``op`` on ``tensors`` with, given the forward's ``backend=`` argument.

    A forced backend (argument, :func:`use_backend`, ``TILEWRIGHT_BACKEND``) is kept where it can run the backward's
    own call, whose shapes and layouts differ from the forward's (``dz @ b.T``, ``a.T @ dz``: a CUDA GEMM that took
    the forward may not take an N that is no multiple of 8); elsewhere the router's own pick is returned, by name, so
    the forcing does not fail a training step halfway. None when nothing is forced.
    """
    name = backend if backend is not None else _forced()[0]
    if name is None:
        return None
    record, _ = _select(op, name, tensors)
    if record is not None and (record.ready is None or _ready(record, tensors)[0]):
        return name
    return _decide(op, tensors, None, honor_forced=False).backend


def dispatch(op: str, *tensors, backend: str | None = None) -> str:
    """The backend name that should run ``op`` (see ``decide``)."""
    return decide(op, *tensors, backend=backend).backend


def explain(op_name: str, *tensors, backend: str | None = None) -> str:
    """Human-readable account of which backend would run ``op_name`` on ``tensors``, and why."""
    return str(decide(op_name, *tensors, backend=backend))
