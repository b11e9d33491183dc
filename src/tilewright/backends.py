"""The backend registry: one record per implementation of an op, which the router (``router.py``) chooses among.

A :class:`Backend` says what an implementation needs and how it is reached: the op, the backend name users force
(``"cuda"``, ``"triton"``, ``"torch"``), the capability majors and dtypes it has code for, its input constraints,
its measured-preference predicate, its readiness check (a CUDA kernel's first-use self-check) and the op layer's
launch entry, plus where its preference was measured (:class:`Measurement`, data - never a file read at run time).

Triton and torch records for every op are registered here; each hand-written CUDA family registers its own record
from its module (``cuda_fallback/<kernel>.py``), and :data:`IMPLEMENTATIONS` lists those modules - the one line a
new family adds. They are imported on the first lookup, so importing the router touches no kernel module.
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Callable

import torch

from ._env import interpreting

BACKENDS = ("triton", "torch", "cuda")  # the names backend=, use_backend() and TILEWRIGHT_BACKEND accept
ORDER = ("cuda", "triton", "torch")  # automatic choice: a hand-written kernel where it wins, Triton, the reference

# Modules that register hand-written implementations (imported on the first lookup): one line per kernel family.
IMPLEMENTATIONS = (
    "tilewright.cuda_fallback.gemm_sm90",
    "tilewright.cuda_fallback.gemm_sm100",
    "tilewright.cuda_fallback.gemm_sm120",
    "tilewright.cuda_fallback.attention_sm90",
    "tilewright.cuda_fallback.rmsnorm_gemm_sm90",
    "tilewright.cuda_fallback.fp8_gemm_sm90",
)

Check = Callable[..., "tuple[bool, str]"]


@dataclass(frozen=True)
class Measurement:
    """Where a per-shape preference was measured: the card, the result file in the repository it came from (kept as
    provenance, not read at run time) and the date of the run."""

    card: str
    csv: str
    date: str


@dataclass(frozen=True)
class Backend:
    """One implementation of ``op`` that the router may choose.

    Every predicate takes the op's tensors as the op passes them to ``router.decide`` and returns ``(ok, why)``;
    ``why`` is a clause the router prefixes with the backend name.
    """

    op: str  # "gemm", "attention", "rms_norm_linear", "scaled_mm"
    backend: str  # the name it answers to when forced: one of BACKENDS
    name: str  # unique per op: the implementation ("gemm_sm90", "triton", "torch")
    constraints: Check  # whether these inputs fit at all (shapes, layouts, alignment); no compile, no launch
    kernel: str = ""  # what the reasons call it ("sm_90a WGMMA pingpong GEMM"); "" for none
    archs: tuple[int, ...] | None = None  # compute-capability majors it has code for; None: any device
    dtypes: tuple[torch.dtype, ...] | None = None  # floating dtypes it takes; None: any
    switch: str | None = None  # environment variable that turns it off when set to "0"
    requires: Callable[[], "str | None"] | None = None  # what the machine must have (a compiler): None, or why not
    preferred: Check | None = None  # measured per-shape preference in automatic mode; None: always
    ready: Check | None = None  # readiness on this device (first-use self-check); None: always ready
    launch: Callable[..., bool] | None = None  # the op layer's entry: launches, or False so the op falls back
    measured: tuple[Measurement, ...] = ()  # runs behind ``preferred``; empty: never run on its hardware
    env: tuple[str, ...] = ()  # further environment variables its predicates read (the router's cache keys on them)

    @property
    def key(self) -> tuple[str, str]:
        """(op, name): the record's identity in the registry."""
        return self.op, self.name


REGISTRY: dict[tuple[str, str], Backend] = {}
# Bumped whenever a record's readiness can have changed (a kernel family disabled, a self-check failed): readiness
# only ever goes from ready to not ready, so the router's cached decisions (and the ops' eager replays) that hold
# this number stay valid until it moves, and a cache hit need not re-run the readiness checks (attention's cost
# ~10 us of Python a call: constraints, toolchain, variant, device model).
readiness_epoch = 0
ROUTER_ENV = ("TILEWRIGHT_BACKEND",)  # read by the router itself (the forced backend)
_loaded = False
_load_lock = threading.RLock()


def register(record: Backend) -> Backend:
    """Add ``record``; a second record under the same (op, name) is an error (two modules claiming one name)."""
    if record.backend not in BACKENDS:
        raise ValueError(f"{record.key}: unknown backend {record.backend!r}; expected one of {BACKENDS}")
    if record.key in REGISTRY:
        raise ValueError(f"backend {record.key} is registered twice")
    REGISTRY[record.key] = record
    return record


def readiness_changed() -> None:
    """Tell the router that some record's readiness changed (see :data:`readiness_epoch`)."""
    global readiness_epoch
    readiness_epoch += 1


def environment() -> tuple[str, ...]:
    """Every environment variable a decision depends on: the router's own and each record's switch and ``env``."""
    names = [*ROUTER_ENV]
    for r in records():
        names += [r.switch] if r.switch else []
        names += r.env
    return tuple(dict.fromkeys(names))


def _load() -> None:
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if not _loaded:
            for module in IMPLEMENTATIONS:
                importlib.import_module(module)
            _loaded = True


def records(op: str | None = None, backend: str | None = None) -> list[Backend]:
    """Registered records (of ``op`` and ``backend`` when given) in registration order."""
    _load()
    return [r for r in REGISTRY.values() if (op is None or r.op == op) and (backend is None or r.backend == backend)]


def ops() -> list[str]:
    """Every op with a registered implementation, in registration order."""
    return list(dict.fromkeys(r.op for r in records()))


def preference(op: str) -> tuple[str, ...]:
    """The backend names that implement ``op``, in the order the automatic choice tries them (:data:`ORDER`)."""
    have = {r.backend for r in records(op)}
    return tuple(b for b in ORDER if b in have)


def implementation_modules() -> list:
    """The imported modules of :data:`IMPLEMENTATIONS` (the hand-written kernel families)."""
    _load()
    return [importlib.import_module(m) for m in IMPLEMENTATIONS]


# Hand-written kernels that are part of an op's path without a router record of their own (the op layer calls them
# for a piece of its work): build-check compiles them like the families.
KERNEL_PARTS = (
    "tilewright.cuda_fallback.attention_bwd_sm90",  # the attention backward's dK / dV kernel (ops/attention.py)
    "tilewright.cuda_fallback.rstd_gemm_sm90",  # the folded RMSNorm-linear's GEMM (ops/rms_norm_linear.py)
    "tilewright.cuda_fallback.gemm_sumsq_sm90",  # the GEMM returning its rows' sums of squares (ops/gemm.py)
)


def kernel_modules() -> list:
    """Every module with a hand-written kernel source: the families (:data:`IMPLEMENTATIONS`) and
    :data:`KERNEL_PARTS`."""
    return [*implementation_modules(), *(importlib.import_module(m) for m in KERNEL_PARTS)]


# ---- the portable backends every op has: Triton kernels and the torch reference ----
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def _triton_device(min_capability: tuple[int, int] | None):
    """The Triton record's constraints: a CUDA device (at least ``min_capability``) or CPU under the interpreter."""
    def constraints(*tensors) -> tuple[bool, str]:
        device = next((t.device for t in tensors if isinstance(t, torch.Tensor)), torch.device("cpu"))
        if device.type == "cuda":
            if min_capability and torch.cuda.get_device_capability(device) < min_capability:
                return False, "FP8 tensor cores need sm_89 or newer"
            return True, f"CUDA device {device}"
        if interpreting():
            return True, "CPU tensors under TRITON_INTERPRET=1 (interpreter; correct, not fast)"
        return False, f"tensors on {device.type} and TRITON_INTERPRET is not set"
    return constraints


def _runs_anywhere(*tensors) -> tuple[bool, str]:
    return True, "runs anywhere"


def _triton_gemm_preferred(a, b, bias=None, residual=None, epilogue=None) -> tuple[bool, str]:
    """The Triton GEMM in automatic mode: everywhere but where cuBLAS was measured faster on a plain GEMM. The reason
    keeps the device clause the constraints gave (it replaces theirs in the router's account)."""
    from .cublas_routes import cublas_preferred

    cublas, why = cublas_preferred(a, b, bias, residual, epilogue)
    if cublas:
        return False, f"cuBLAS is faster here ({why})"
    return True, f"{_triton_device(None)(a, b)[1]}; no cuBLAS route: {why}"


def _register_portable() -> None:
    for op, dtypes, min_capability in (("gemm", FLOAT_DTYPES, None), ("attention", FLOAT_DTYPES, None),
                                       ("rms_norm_linear", FLOAT_DTYPES, None), ("scaled_mm", FP8_DTYPES, (8, 9))):
        gemm = op == "gemm"
        register(Backend(op, "triton", "triton", _triton_device(min_capability), dtypes=dtypes,
                         preferred=_triton_gemm_preferred if gemm else None,
                         env=("TRITON_INTERPRET", "TILEWRIGHT_CUBLAS") if gemm else ("TRITON_INTERPRET",)))
        register(Backend(op, "torch", "torch", _runs_anywhere, kernel="reference"))


_register_portable()
