"""Capability router: which backend runs an op on this device for these inputs, and why.

Order of decision for every op call:
1. a forced backend: the op's ``backend=`` argument, else ``tilewright.use_backend(...)``, else the
   ``TILEWRIGHT_BACKEND`` environment variable. A forced backend that is not eligible is an error that says why -
   never a silent substitution;
2. otherwise the first eligible backend in the op's preference order.

Eligibility is per op (dtype, device, interpreter). This module is consulted inside the ops' implementations, which
are opaque to torch.compile, so device queries here never break a graph.
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field

import torch

BACKENDS = ("triton", "torch")
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

_local = threading.local()


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@contextlib.contextmanager
def use_backend(name: str | None):
    """Force ``name`` ("triton", "torch", or None for automatic) for the ops called inside the ``with`` block."""
    if name is not None and name not in BACKENDS:
        raise ValueError(f"use_backend: unknown backend {name!r}; expected one of {BACKENDS} or None")
    previous = getattr(_local, "backend", None)
    _local.backend = name
    try:
        yield
    finally:
        _local.backend = previous


@dataclass
class Decision:
    """The router's answer: the chosen backend and the chain of reasons that led to it."""

    op: str
    backend: str
    reasons: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.op}: backend={self.backend}\n" + "\n".join(f"  - {r}" for r in self.reasons)


def _eligible(op: str, backend: str, tensors) -> tuple[bool, str]:
    """Whether ``backend`` can run ``op`` on these tensors, and a one-line reason."""
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    if backend == "torch":
        return True, "torch reference: runs anywhere"
    if backend == "triton":
        bad = [t.dtype for t in tensors if t.is_floating_point() and t.dtype not in _FLOAT_DTYPES]
        if bad:
            return False, f"triton: dtype {bad[0]} not supported (fp16, bf16, fp32)"
        if device.type == "cuda":
            return True, f"triton: CUDA device {torch.cuda.get_device_name(device)}"
        if _interpreting():
            return True, "triton: CPU tensors under TRITON_INTERPRET=1 (interpreter; correct, not fast)"
        return False, f"triton: tensors on {device.type} and TRITON_INTERPRET is not set"
    return False, f"{backend}: unknown backend"


def _forced() -> tuple[str | None, str]:
    ctx = getattr(_local, "backend", None)
    if ctx is not None:
        return ctx, "tilewright.use_backend()"
    env = os.environ.get("TILEWRIGHT_BACKEND")
    if env:
        return env, "TILEWRIGHT_BACKEND"
    return None, ""


# Preference order per op, best first. Later issues add "cuda" in front where a hand-written kernel exists.
PREFERENCE = {"gemm": ("triton", "torch")}


def decide(op: str, *tensors, backend: str | None = None) -> Decision:
    """Pick the backend for ``op`` on ``tensors``; raise ValueError if a forced backend cannot run them."""
    if op not in PREFERENCE:
        raise ValueError(f"router: unknown op {op!r}; known ops: {sorted(PREFERENCE)}")
    source = "backend= argument"
    if backend is None:
        backend, source = _forced()
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"{source}: unknown backend {backend!r}; expected one of {BACKENDS}")
        ok, why = _eligible(op, backend, tensors)
        if not ok:
            raise ValueError(f"{op}: backend {backend!r} forced by {source} cannot run these inputs: {why}")
        return Decision(op, backend, [f"forced by {source}", why])
    reasons = []
    for candidate in PREFERENCE[op]:
        ok, why = _eligible(op, candidate, tensors)
        reasons.append(("chosen: " if ok else "skipped: ") + why)
        if ok:
            return Decision(op, candidate, reasons)
    raise AssertionError("the torch backend is always eligible")  # pragma: no cover


def dispatch(op: str, *tensors, backend: str | None = None) -> str:
    """The backend name that should run ``op`` (see ``decide``)."""
    return decide(op, *tensors, backend=backend).backend


def explain(op_name: str, *tensors, backend: str | None = None) -> str:
    """Human-readable account of which backend would run ``op_name`` on ``tensors``, and why."""
    return str(decide(op_name, *tensors, backend=backend))
