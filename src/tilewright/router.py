"""Capability router: which backend runs an op on this device for these inputs, and why.

Order of decision for every op call:
1. a forced backend: the op's ``backend=`` argument, else ``tilewright.use_backend(...)``, else the
   ``TILEWRIGHT_BACKEND`` environment variable. A forced backend that is not eligible is an error that says why -
   never a silent substitution;
2. otherwise the first eligible backend in the op's preference order that also prefers these shapes (the "cuda"
   backend declares per-shape preference from measured results, see ``_cuda_preferred``).

The "cuda" backend (hand-written sm_90a kernels, ``tilewright.cuda_fallback``) is eligible only on a capability it
has a kernel for, with a CUDA compiler present and its TMA constraints met; before it first serves on a device model
it runs a self-check against a reference - a failure, or a compile failure, disables it with one warning and Triton
serves (DESIGN.md section 4). ``TILEWRIGHT_CUDA=0`` turns it off.

Eligibility is per op (dtype, device, interpreter). This module is consulted inside the ops' implementations, which
are opaque to torch.compile, so device queries here never break a graph.

Decisions for CUDA tensors are cached per call signature (op, backend request, every tensor's shape / strides / dtype /
device / pointer alignment, the environment switches, the autotune-cache generation): working them out costs ~50 us
of Python per call (constraint checks, cache lookups, reason strings) - as much as a whole 4096^2 GEMM on H200 is
worth in launch slack. A cached "cuda" decision re-checks the kernel family's state (cheap) so a family disabled by
a failed launch is never served from the cache. ``invalidate()`` drops the cache.
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field

import torch

BACKENDS = ("triton", "torch", "cuda")
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)

_local = threading.local()


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@contextlib.contextmanager
def use_backend(name: str | None):
    """Force ``name`` ("triton", "torch", "cuda", or None for automatic) for the ops called inside the ``with`` block."""
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
    forced: bool = False  # chosen by backend=, use_backend() or TILEWRIGHT_BACKEND rather than by the router

    def __str__(self) -> str:
        return f"{self.op}: backend={self.backend}\n" + "\n".join(f"  - {r}" for r in self.reasons)


def _eligible(op: str, backend: str, tensors) -> tuple[bool, str]:
    """Whether ``backend`` can run ``op`` on these tensors, and a one-line reason."""
    raw = tensors
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    if backend == "cuda":
        return _cuda_eligible(op, raw, device)
    if backend == "torch":
        return True, "torch reference: runs anywhere"
    if backend == "triton":
        allowed = _FP8_DTYPES if op == "scaled_mm" else _FLOAT_DTYPES
        bad = [t.dtype for t in tensors if t.is_floating_point() and t.dtype not in allowed]
        if bad:
            return False, f"triton: dtype {bad[0]} not supported for {op} ({', '.join(map(str, allowed))})"
        if device.type == "cuda":
            if op == "scaled_mm" and torch.cuda.get_device_capability(device) < (8, 9):
                return False, "triton: FP8 tensor cores need sm_89 or newer"
            return True, f"triton: CUDA device {device}"
        if _interpreting():
            return True, "triton: CPU tensors under TRITON_INTERPRET=1 (interpreter; correct, not fast)"
        return False, f"triton: tensors on {device.type} and TRITON_INTERPRET is not set"
    return False, f"{backend}: unknown backend"


# ---- "cuda" backend: hand-written kernels per (op, compute capability major) ----
# sm_100/103 and sm_120/121 kernels have never run on such a card here: they are built and SASS-checked in CI and
# serve only after their first-use self-check passes on the device (cuda_fallback/dispatch.py lists the families).
CUDA_KERNELS = {"gemm": {9: "sm_90a WGMMA pingpong GEMM", 10: "sm_100a tcgen05 + TMEM GEMM",
                         12: "sm_120 ldmatrix + mma.sync GEMM"}}
# Flash-attention forward (cuda_fallback/attention_sm90.py); the backward stays Triton's.
CUDA_KERNELS["attention"] = {9: "sm_90a FA3-style flash-attention forward"}
# RMSNorm-fused GEMM forward (cuda_fallback/rmsnorm_gemm.py); its backward stays Triton's.
CUDA_KERNELS["rms_norm_linear"] = {9: "sm_90a register-A WGMMA RMSNorm-GEMM"}


def _capability(device: torch.device) -> tuple[int, int] | None:
    """Compute capability of a CUDA device, None for other devices (tests fake it by monkeypatching)."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_capability(device)


def _cuda_toolchain():
    from .cuda_fallback import build

    return build.toolchain()


def _cuda_eligible(op: str, raw, device: torch.device) -> tuple[bool, str]:
    """Capability, toolchain and the kernel's input constraints (no compile, no launch)."""
    kernels = CUDA_KERNELS.get(op)
    if not kernels:
        return False, f"cuda: no hand-written kernel for {op}"
    if os.environ.get("TILEWRIGHT_CUDA", "1") == "0":
        return False, "cuda: disabled by TILEWRIGHT_CUDA=0"
    cap = _capability(device)
    if cap is None:
        return False, f"cuda: tensors on {device.type} (needs an NVIDIA GPU)"
    if cap[0] not in kernels:
        have = ", ".join(f"sm_{m}x" for m in sorted(kernels))
        return False, f"cuda: no {op} kernel for sm_{cap[0]}{cap[1]} (have: {have}); Triton covers it"
    if _cuda_toolchain() is None:
        return False, "cuda: no CUDA compiler found (nvcc, or `pip install nvidia-cuda-nvrtc`)"
    if op == "attention":  # raw = (q, k, v)
        from .cuda_fallback import attention_sm90

        ok, why = attention_sm90.constraints(*(list(raw) + [None] * 3)[:3])
        return ok, f"cuda: {kernels[cap[0]]}: {why}" if ok else f"cuda: {why}"
    if op == "rms_norm_linear":  # raw = (x, norm_weight, weight, bias)
        from .cuda_fallback import rmsnorm_gemm

        ok, why = rmsnorm_gemm.constraints(*(list(raw) + [None] * 4)[:4])
        return ok, f"cuda: {kernels[cap[0]]}: {why}" if ok else f"cuda: {why}"
    from .cuda_fallback import gemm as cuda_gemm

    a, b, bias, residual = (list(raw) + [None] * 4)[:4]
    ok, why = cuda_gemm.constraints(a, b, bias, residual)
    return ok, f"cuda: {kernels[cap[0]]}: {why}" if ok else f"cuda: {why}"


def _cuda_family(raw):
    """The cuda_fallback GEMM module for the device of ``raw[0]`` (sm_90 WGMMA, sm_100 tcgen05, sm_120 mma.sync)."""
    from .cuda_fallback import dispatch

    cap = _capability(raw[0].device)
    return dispatch.gemm_module(cap[0] if cap else 9) or dispatch.gemm_module(9)


def _cuda_preferred(op: str, raw) -> tuple[bool, str]:
    """Whether the automatic choice should take "cuda" for these shapes (measured per-shape preference; on
    capabilities never measured the reason says "not yet run on this hardware by the project's tests")."""
    if op == "attention":
        from .cuda_fallback import attention_sm90

        return attention_sm90.preferred(raw[0], raw[1])
    if op == "rms_norm_linear":
        from .cuda_fallback import rmsnorm_gemm

        return rmsnorm_gemm.preferred(raw[0].shape[0], raw[2].shape[0], raw[0].shape[1])
    a, b = raw[0], raw[1]
    residual = raw[3] if len(raw) > 3 else None
    M, N, K = a.shape[0], b.shape[1], a.shape[1]
    from .autotune import cache

    rec = cache.lookup("gemm", a.device, a.dtype, M, N, K)
    if rec and "cuda" in rec.get("backends", {}):
        if rec.get("winner") == "cuda":
            return True, f"cuda: tuned winner in the autotune cache ({rec['backends']['cuda'].get('name')})"
        return False, "cuda: triton won the tuning in the autotune cache"
    if residual is not None:
        # Measured on H200 (perf/results/h200/gemm_default_*_v3.csv): the CUDA kernel reads the residual with
        # 2-byte loads after its mainloop (0.82-0.98x cuBLAS+add), Triton's chunked epilogue hides it (0.99-1.14x).
        return False, "cuda: fused residual epilogue is faster in Triton (measured)"
    return _cuda_family(raw).preferred(M, N, K)


def _cuda_self_check(op: str, raw) -> tuple[bool, str]:
    """First-use self-check per device model (compiles on first call); False after a failure, with the reason."""
    if op == "attention":
        from .cuda_fallback import attention_sm90

        ok, why = attention_sm90.ready(*raw[:3])
        return ok, f"cuda: {why}"
    if op == "rms_norm_linear":
        from .cuda_fallback import rmsnorm_gemm

        ok, why = rmsnorm_gemm.ready(*(list(raw) + [None] * 4)[:4])
        return ok, f"cuda: {why}"
    a, b, bias, residual = (list(raw) + [None] * 4)[:4]
    ok, why = _cuda_family(raw).ready(a, b, bias, residual)
    return ok, f"cuda: {why}"


def _forced() -> tuple[str | None, str]:
    ctx = getattr(_local, "backend", None)
    if ctx is not None:
        return ctx, "tilewright.use_backend()"
    env = os.environ.get("TILEWRIGHT_BACKEND")
    if env:
        return env, "TILEWRIGHT_BACKEND"
    return None, ""


# Preference order per op, best first. Later issues add "cuda" in front where a hand-written kernel exists.
PREFERENCE = {"gemm": ("cuda", "triton", "torch"), "attention": ("cuda", "triton", "torch")}
PREFERENCE["rms_norm_linear"] = ("cuda", "triton", "torch")  # cuda: forward only, automatic once measured
PREFERENCE["scaled_mm"] = ("triton", "torch")


# Environment switches a decision depends on (read per call: a test or user may change them at any time).
_DECISION_ENV = ("TILEWRIGHT_BACKEND", "TILEWRIGHT_CUDA", "TILEWRIGHT_CUDA_ATTN", "TILEWRIGHT_CUDA_ATTN_VARIANT",
                 "TILEWRIGHT_CUDA_GEMM_VARIANT", "TILEWRIGHT_CUDA_MMA_VARIANT", "TILEWRIGHT_CUDA_RMSNORM_VARIANT",
                 "TILEWRIGHT_CUDA_COMPILER", "TILEWRIGHT_CACHE_DIR", "TRITON_INTERPRET")
_DECISIONS_MAX = 4096
_decisions: dict = {}


def invalidate() -> None:
    """Forget every cached decision (after changing something the cache key does not see, e.g. another process
    wrote the autotune cache, or a test faked a capability)."""
    _decisions.clear()


def _tensor_signature(t):
    if not isinstance(t, torch.Tensor):
        return t
    ptr = t.data_ptr()  # TMA needs 16-byte aligned bases; the kernels' fast paths look at 128-byte alignment
    return (t.shape, t.stride(), t.dtype, t.device, ptr % 16 == 0, ptr % 128 == 0)


def decide(op: str, *tensors, backend: str | None = None) -> Decision:
    """Pick the backend for ``op`` on ``tensors``; raise ValueError if a forced backend cannot run them."""
    first = tensors[0] if tensors else None
    if not (isinstance(first, torch.Tensor) and first.is_cuda):
        return _decide(op, tensors, backend)
    from .autotune import cache

    key = (op, backend, getattr(_local, "backend", None), cache.generation,
           tuple(os.environ.get(k) for k in _DECISION_ENV), tuple(_tensor_signature(t) for t in tensors))
    hit = _decisions.get(key)
    if hit is not None and (hit.backend != "cuda" or _cuda_self_check(op, tensors)[0]):
        return hit
    decision = _decide(op, tensors, backend)  # raises for a forced backend that cannot run: never cached
    if len(_decisions) >= _DECISIONS_MAX:
        _decisions.clear()
    _decisions[key] = decision
    return decision


def _decide(op: str, tensors, backend: str | None) -> Decision:
    if op not in PREFERENCE:
        raise ValueError(f"router: unknown op {op!r}; known ops: {sorted(PREFERENCE)}")
    source = "backend= argument"
    if backend is None:
        backend, source = _forced()
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"{source}: unknown backend {backend!r}; expected one of {BACKENDS}")
        ok, why = _eligible(op, backend, tensors)
        if ok and backend == "cuda":
            ok, why = _cuda_self_check(op, tensors)
        if not ok:
            raise ValueError(f"{op}: backend {backend!r} forced by {source} cannot run these inputs: {why}")
        return Decision(op, backend, [f"forced by {source}", why], forced=True)
    reasons = []
    for candidate in PREFERENCE[op]:
        ok, why = _eligible(op, candidate, tensors)
        if ok and candidate == "cuda":
            ok, why = _cuda_preferred(op, tensors)
            if ok:  # keep the preference reason (which kernel family, measured or not) beside the self-check's
                ok, checked = _cuda_self_check(op, tensors)
                why = f"{why}; {checked}"
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
