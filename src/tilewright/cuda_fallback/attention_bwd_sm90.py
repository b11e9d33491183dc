"""Host side of the Hopper flash-attention backward's dK / dV kernel (``attention_bwd_sm90.cu``): constraints, launch.

The kernel computes dK and dV of one key block per CTA from the forward's LSE and the Triton backward's delta
(``rowsum(dO * O)``); ``triton_kernels/attention.attention_backward`` keeps the preprocess and the dQ kernel. It is
**opt-in** (``TILEWRIGHT_CUDA_ATTN_BWD=1``) until it has been measured against the Triton dK / dV kernel on the device:
the op layer uses it then for the calls :func:`constraints` accepts and Triton's kernel otherwise.

Entry points: :func:`constraints` (why these tensors can or cannot take the kernel), :func:`enabled` (the opt-in
switch), :func:`launch_dkdv` (into given dk / dv).
"""
from __future__ import annotations

import ctypes
import os

import torch

from .._env import SMEM_OPTIN_BYTES
from .attention_sm90 import LOG2E, tma_dims_strides
from .runtime import HALF_DTYPES, build, launch

SOURCE = "attention_bwd_sm90.cu"
KERNEL = "tw_attn_bwd_dkdv_sm90"
KERNEL_DQ = "tw_attn_bwd_dq_sm90"  # the query-block half (same source and build): NOT yet run on a GPU
DQ_ENV = "TILEWRIGHT_CUDA_ATTN_BWD_DQ"
DQ_THREADS = 256  # one producer warpgroup + one consumer warpgroup (64 query rows per CTA)
DQ_BLOCK_N = 64  # keys per step
HEAD_DIMS = (64, 128)  # dK + dV take D registers a thread in each consumer warpgroup
BLOCK_M = 64  # query rows per step
STAGES = 2
ENV = "TILEWRIGHT_CUDA_ATTN_BWD"
VARIANT_ENV = "TILEWRIGHT_CUDA_ATTN_BWD_VARIANT"
# Variant -> consumer warpgroups (64 keys each). "a" (one) is the schedule measured on the device; "b" (two, a
# 128-key block sharing each Q / dO load, setmaxnreg 24 / 240) compiles spill-free but has NOT run on a GPU yet.
VARIANTS = {"a": 1, "b": 2}
DEFAULT_VARIANT = "a"
# compiled by build-check (CPU CI): (variant, head dim, causal, fp16)
BUILD_CHECK_BUILDS = (("a", 128, False, False), ("a", 128, True, False), ("a", 64, True, True),
                      ("b", 128, True, False))
BUILD_CHECK_ARCHS = ("sm_90a",)
BUILD_CHECK_MARKERS = ("HGMMA", "UTMALDG")


def block_n(variant: str) -> int:
    """Keys per CTA: 64 per consumer warpgroup."""
    return 64 * VARIANTS[variant]


def threads(variant: str) -> int:
    """One producer warpgroup plus the consumer warpgroups, 128 threads each."""
    return 128 * (VARIANTS[variant] + 1)


def smem_bytes(head_dim: int, variant: str = DEFAULT_VARIANT) -> int:
    """Dynamic shared memory: K + V blocks, STAGES x (Q + dO) blocks, each consumer's double-buffered row
    statistics, the mbarriers and 1024 bytes of alignment slack."""
    return 1024 + 2 * block_n(variant) * head_dim * 2 + 2 * STAGES * BLOCK_M * head_dim * 2 + \
        VARIANTS[variant] * 2 * 2 * BLOCK_M * 4 + (1 + 2 * STAGES) * 8


def defines(head_dim: int, causal: bool, fp16: bool, variant: str = DEFAULT_VARIANT) -> dict:
    """-D macros of one build."""
    return {"TW_HDIM": head_dim, "TW_STAGES": STAGES, "TW_CAUSAL": int(causal), "TW_FP16": int(fp16),
            "TW_CONSUMERS": VARIANTS[variant]}


def pick_variant() -> str:
    """The variant to run: ``TILEWRIGHT_CUDA_ATTN_BWD_VARIANT`` (a | b), else :data:`DEFAULT_VARIANT`."""
    name = os.environ.get(VARIANT_ENV) or DEFAULT_VARIANT
    if name not in VARIANTS:
        raise ValueError(f"{VARIANT_ENV}: unknown variant {name!r}; expected one of {sorted(VARIANTS)}")
    return name


def build_check_builds() -> list:
    """``tilewright build-check`` rows: (label, defines, dynamic smem[, markers]); the two-consumer build must also
    contain USETMAXREG."""
    rows = []
    for var, d, c, f in BUILD_CHECK_BUILDS:
        label = f"dkdv {var} hdim{d} {'causal' if c else 'full'} {'fp16' if f else 'bf16'}"
        row = (label, defines(d, c, f, var), smem_bytes(d, var))
        rows.append(row + (("USETMAXREG",),) if VARIANTS[var] == 2 else row)
    return rows


def dq_smem_bytes(head_dim: int) -> int:
    """The dQ kernel's dynamic shared memory: the resident Q + dO blocks, STAGES x (K + V) blocks, mbarriers, slack."""
    return 1024 + 2 * BLOCK_M * head_dim * 2 + 2 * STAGES * DQ_BLOCK_N * head_dim * 2 + (1 + 2 * STAGES) * 8


def dq_enabled() -> bool:
    """Whether the op layer may use the dQ kernel: ``TILEWRIGHT_CUDA_ATTN_BWD_DQ=1`` (with the dK / dV switch)."""
    return enabled() and os.environ.get(DQ_ENV) == "1"


def enabled() -> bool:
    """Whether the op layer may use the kernel: ``TILEWRIGHT_CUDA_ATTN_BWD=1`` (off by default until measured)."""
    return os.environ.get(ENV) == "1"


def constraints(do, q, k, v, dk, dv, causal_offset: int = 0, window: bool = False, softcap: float = 0.0,
                ) -> tuple[bool, str]:
    """Whether the kernel takes these tensors and options at all, and why not: bf16 / fp16 CUDA tensors, head dim
    64 or 128 for q, k, v and dO alike, GQA, top-left causal or none (no offset, window or soft cap), 16-byte aligned
    TMA strides for q, k, v, dO, and dk / dv with a unit last stride and 4-byte aligned rows."""
    if not all(isinstance(t, torch.Tensor) and t.is_cuda for t in (do, q, k, v, dk, dv)):
        return False, "CUDA tensors only"
    if q.dtype not in HALF_DTYPES or any(t.dtype != q.dtype for t in (do, k, v, dk, dv)):
        return False, f"dtype {q.dtype} (bfloat16 / float16, all equal)"
    if q.dim() != 4 or any(t.dim() != 4 for t in (do, k, v, dk, dv)):
        return False, "4-D (B, H, S, D) tensors only"
    B, Hq, Sq, D = q.shape
    if D not in HEAD_DIMS or k.shape[-1] != D or v.shape[-1] != D or do.shape != q.shape:
        return False, f"head dim {D} (the CUDA dK / dV kernel takes {HEAD_DIMS}, equal for q, k, v and dO)"
    if k.shape != v.shape or dk.shape != k.shape or dv.shape != v.shape or k.shape[0] != B:
        return False, "k, v, dk, dv must share one (B, Hkv, Skv, D) shape"
    Hkv, Skv = k.shape[1], k.shape[2]
    if Hkv == 0 or Hq % Hkv or min(B, Hq, Sq, Skv) == 0:
        return False, "empty problem or Hq not a multiple of Hkv"
    if B > 65535 or Hkv > 65535:
        return False, "more than 65535 batches or kv heads (grid limits)"
    if causal_offset or window or softcap:
        return False, "top-left causal or no mask only (no causal offset, window or soft cap)"
    for t, name in ((q, "q"), (k, "k"), (v, "v"), (do, "grad_out")):
        lay, why = tma_dims_strides(t)
        if lay is None:
            return False, f"{name}: {why}"
    for t, name in ((dk, "dk"), (dv, "dv")):
        if t.stride(-1) != 1 or t.data_ptr() % 4 or any(s % 2 for s in t.stride()[:3]):
            return False, f"{name}: unit last stride and 4-byte aligned rows needed (paired stores)"
    if max(smem_bytes(D, var) for var in VARIANTS) > SMEM_OPTIN_BYTES:  # pragma: no cover - every build fits
        return False, f"head dim {D} needs more shared memory than sm_90 has"
    return True, f"bf16/fp16, head dim {D}, TMA-aligned"


_prepared: dict = {}  # launch-ready (function, grid, arguments) per call signature and pointers: launch_cached


def _function_and_maps(kernel: str, smem: int, defs: dict, q, k, v, do, kv_rows: int):
    """The compiled ``kernel`` of the build ``defs`` and the four 128B-swizzled tensor maps both kernels take: q and
    dO with BLOCK_M-row boxes, k and v with ``kv_rows``-row boxes, each 64 columns wide over (D, S, H, B)."""
    dt = launch.tma_dtype(q.dtype)
    bld = build.compile_source(SOURCE, "sm_90a", defs)
    drv = launch.driver()
    maps = []
    with torch.cuda.device(q.device):
        fn = drv.function(bld, kernel, smem)
        for t, rows, role in ((q, BLOCK_M, "Q"), (k, kv_rows, "K"), (v, kv_rows, "V"), (do, BLOCK_M, "DO")):
            (dims, strides), _ = tma_dims_strides(t)
            maps.append(launch.tag(drv.encode_tiled(dt, t.data_ptr(), dims, strides, (64, rows, 1, 1), 128), role))
    return fn, maps


def _check_statistics(q, lse, delta, scale: float) -> None:
    """The row statistics both kernels read (contiguous fp32 (B, Hq, Sq) LSE and delta) and a finite, positive
    scale; ValueError naming what is wrong."""
    B, Hq, Sq, _ = q.shape
    for t, name in ((lse, "lse"), (delta, "delta")):
        if t.shape != (B, Hq, Sq) or t.dtype != torch.float32 or not t.is_contiguous():
            raise ValueError(f"cuda attention backward: {name} must be a contiguous float32 (B, Hq, Sq) tensor")
    if not (scale > 0.0 and scale < float("inf")):
        raise ValueError(f"cuda attention backward: scale {scale} must be finite and > 0")


def _prepare(do, q, k, v, lse, delta, dk, dv, causal: bool, scale: float, variant: str):
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    bn = block_n(variant)
    fn, maps = _function_and_maps(KERNEL, smem_bytes(D, variant), defines(D, causal, q.dtype == torch.float16, variant),
                                  q, k, v, do, bn)
    grid = (-(-Skv // bn), Hkv, B)
    args = [*maps, launch.pointer("LSE", lse), launch.pointer("DELTA", delta), launch.pointer("DK", dk),
            launch.pointer("DV", dv), *(ctypes.c_int64(s) for s in dk.stride()[:3]),
            *(ctypes.c_int64(s) for s in dv.stride()[:3]), ctypes.c_int32(Sq), ctypes.c_int32(Skv),
            ctypes.c_int32(Hq), ctypes.c_int32(Hq // Hkv), ctypes.c_float(scale * LOG2E), ctypes.c_float(scale)]
    return fn, grid, args


def launch_dkdv(do, q, k, v, lse, delta, dk, dv, causal: bool, scale: float, variant: str | None = None) -> None:
    """dK and dV of ``softmax(scale q k^T [causal]) v`` into ``dk`` / ``dv`` (sm_90a kernel).

    lse: the forward's natural-log LSE, delta: ``rowsum(dO * O)``, both contiguous fp32 (B, Hq, Sq). Raises
    ValueError (naming the rule) for tensors :func:`constraints` rejects, and for a scale that is not finite and
    positive. ``variant``: a | b (default :func:`pick_variant`)."""
    ok, why = constraints(do, q, k, v, dk, dv)
    if not ok:
        raise ValueError(f"cuda attention backward: {why}")
    _check_statistics(q, lse, delta, scale)
    variant = variant or pick_variant()
    if variant not in VARIANTS:
        raise ValueError(f"cuda attention backward: unknown variant {variant!r}; expected one of {sorted(VARIANTS)}")
    key = (q.device.index, q.dtype, bool(causal), float(scale), variant,
           *((t.data_ptr(), t.shape, t.stride()) for t in (do, q, k, v, dk, dv)), lse.data_ptr(), delta.data_ptr())
    launch.launch_cached(_prepared, key, lambda: _prepare(do, q, k, v, lse, delta, dk, dv, bool(causal),
                                                          float(scale), variant),
                         q.device, threads(variant), smem_bytes(q.shape[-1], variant))


_prepared_dq: dict = {}


def _prepare_dq(do, q, k, v, lse, delta, dq, causal: bool, scale: float):
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    fn, maps = _function_and_maps(KERNEL_DQ, dq_smem_bytes(D), defines(D, causal, q.dtype == torch.float16), q, k,
                                  v, do, DQ_BLOCK_N)
    grid = (-(-Sq // BLOCK_M), Hq, B)
    args = [*maps, launch.pointer("LSE", lse), launch.pointer("DELTA", delta), launch.pointer("DQ", dq),
            *(ctypes.c_int64(s) for s in dq.stride()[:3]), ctypes.c_int32(Sq), ctypes.c_int32(Skv),
            ctypes.c_int32(Hq), ctypes.c_int32(Hq // Hkv), ctypes.c_float(scale * LOG2E), ctypes.c_float(scale)]
    return fn, grid, args


def launch_dq(do, q, k, v, lse, delta, dq, causal: bool, scale: float) -> None:
    """dQ of ``softmax(scale q k^T [causal]) v`` into ``dq`` (sm_90a kernel; deterministic: each CTA owns its rows).
    Same inputs and rules as :func:`launch_dkdv`; dq is shaped like q (unit last stride, 4-byte aligned rows)."""
    ok, why = constraints(do, q, k, v, k, v)  # dk / dv stand-ins: k and v have their shape and layout rules
    if not ok:
        raise ValueError(f"cuda attention backward: {why}")
    if dq.shape != q.shape or dq.dtype != q.dtype or dq.stride(-1) != 1 or dq.data_ptr() % 4 or \
            any(s % 2 for s in dq.stride()[:3]):
        raise ValueError("cuda attention backward: dq must be shaped like q, same dtype, unit last stride, 4-byte "
                         "aligned rows")
    _check_statistics(q, lse, delta, scale)
    key = (q.device.index, q.dtype, bool(causal), float(scale),
           *((t.data_ptr(), t.shape, t.stride()) for t in (do, q, k, v, dq)), lse.data_ptr(), delta.data_ptr())
    launch.launch_cached(_prepared_dq, key, lambda: _prepare_dq(do, q, k, v, lse, delta, dq, bool(causal),
                                                                float(scale)),
                         q.device, DQ_THREADS, dq_smem_bytes(q.shape[-1]))
