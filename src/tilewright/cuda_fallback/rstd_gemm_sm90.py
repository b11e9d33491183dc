"""Host side of the folded RMSNorm-linear for Hopper (``rstd_gemm_sm90.cu`` = ``gemm_sm90.cu`` with
``TW_NORM_SUMSQ``): ``y = act(rstd * (x @ b) + bias) + residual`` where ``b = (g * W)^T`` is the norm weight folded
into the weight, and ``rstd = 1 / sqrt(sumsq / K + eps)`` comes from each row's fp32 sum of squares (``sumsq``, an
input: a read-only pass over x, or whatever produced x). The GEMM's mainloop is the plain kernel's, so the fused op
costs the bare GEMM plus M floats read in the epilogue (and the sum of squares, where it is not given).

Numerics: the MMA operands are x itself and ``g * W`` rounded once to the weight's dtype (torch's unfused pair rounds
``x * rstd`` and then ``* g`` instead); rstd in fp32 (IEEE division and square root, as the fused kernels) scales the
fp32 accumulator before the bias.

Entry points: :func:`constraints`, :func:`launch_cuda_rstd_gemm` (into given ``out`` / ``rstd``), :func:`ready`
(constraints, toolchain and the first-use self-check), :func:`try_launch` (the op layer's: False instead of raising).
The op layer (ops/rms_norm_linear.py) takes it where the plain sm_90 GEMM is the router's choice; it is not a router
family of its own.
"""
from __future__ import annotations

import ctypes
import math

import torch

from ..backends import Measurement
from ..reference import folded_rms_norm_linear_reference
from . import gemm_sm90
from .runtime import gemm_common, launch
from .runtime.guard import Guard

SOURCE = "rstd_gemm_sm90.cu"
KERNEL = "tw_rstd_gemm_sm90"
# build-check (CPU CI): the GEMM's default and small-M tiles, plain and with the full epilogue in fp16
BUILD_CHECK_BUILDS = (  # (variant, a_mn, b_mn, fp16, act, bias, res)
    ("coop128x256s3", False, False, False, 0, False, False),
    ("coop128x256s3", False, False, True, 2, True, True),
    ("pp128x128s5", False, False, False, 0, True, False),
)
BUILD_CHECK_ARCHS = ("sm_90a",)
BUILD_CHECK_MARKERS = gemm_sm90.BUILD_CHECK_MARKERS + gemm_sm90.STORE_MARKERS[0]  # (TMA-stored builds)


# the plain GEMM's tiles built with the rstd epilogue (TW_NORM_SUMSQ)
VARIANTS = gemm_sm90.switched_variants("TW_NORM_SUMSQ", "-rstd")


def build_check_builds() -> list:
    """``tilewright build-check`` rows (label, defines, dynamic smem) of BUILD_CHECK_BUILDS."""
    return gemm_common.build_check_rows(BUILD_CHECK_BUILDS, VARIANTS)


def pick_variant(M: int, N: int, K: int) -> gemm_sm90.SwitchedVariant:
    """The plain GEMM's tile for this shape (``TILEWRIGHT_CUDA_GEMM_VARIANT`` overrides both)."""
    return VARIANTS[gemm_sm90.pick_variant(M, N, K).name]


def constraints(x, b, sumsq, bias=None, residual=None) -> tuple[bool, str]:
    """Whether x (M, K), b (K, N) (the folded weight, transposed), sumsq (M,) and the epilogue operands can take the
    kernel, and why not."""
    ok, why = gemm_sm90.constraints(x, b, bias, residual)
    if not ok:
        return False, why
    if not (isinstance(sumsq, torch.Tensor) and sumsq.dtype == torch.float32 and sumsq.shape == (x.shape[0],)
            and sumsq.stride(0) == 1 and sumsq.device == x.device):
        return False, f"sumsq: expected a contiguous float32 ({x.shape[0]},) tensor on {x.device}"
    return True, "16-bit operands, 16-byte aligned strides (TMA), fp32 row sums"


_prepared: dict = {}


def launch_cuda_rstd_gemm(x: torch.Tensor, b: torch.Tensor, out: torch.Tensor, sumsq: torch.Tensor,
                          rstd: torch.Tensor | None, eps: float, *, bias=None, residual=None, activation=0,
                          variant: gemm_sm90.SwitchedVariant | str | None = None, tile_order: str | int = "grouped",
                          group: int = 16, num_ctas: int | None = None) -> torch.Tensor:
    """``out = act(rstd * (x @ b) + bias) + residual`` with ``rstd = 1 / sqrt(sumsq / K + eps)``, stored in ``rstd``
    (fp32 (M,)) when given. x: (M, K); b: (K, N), the folded weight ``(g * W).t()``; out: (M, N) row-major;
    residual (R0, P, N) as in :func:`.gemm_sm90.launch_cuda_gemm`. Raises ValueError outside :func:`constraints`."""
    ok, why = constraints(x, b, sumsq, bias, residual)
    if not ok:
        raise ValueError(f"cuda rstd gemm: {why}")
    M = x.shape[0]
    if rstd is not None and (rstd.dtype != torch.float32 or rstd.shape != (M,) or rstd.stride(0) != 1):
        raise ValueError("cuda rstd gemm: rstd must be a contiguous fp32 (M,) tensor")
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"cuda rstd gemm: eps must be finite and > 0, got {eps}")
    activation, tile_order, rs, res_ptr, res_period = gemm_common.launch_args(
        "cuda rstd gemm", x, b, out, bias, residual, activation, tile_order, group, out_align=16)
    v = gemm_common.resolve_variant(VARIANTS, pick_variant, variant, M, b.shape[1], x.shape[1])
    roles = gemm_common.operand_roles(x, b, out, bias, residual)
    roles["sumsq_ptr"] = sumsq
    if rstd is not None:
        roles["rstd_ptr"] = rstd

    def prepare():
        return _prepare(x, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group, num_ctas, sumsq,
                        rstd, eps)

    gemm_common.launch_per_signature(
        _prepared, _bound, prepare, v, residual, roles, (activation, tile_order, group, num_ctas, float(eps)),
        lambda: gemm_common.prepared_key(x, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group,
                                         num_ctas, sumsq.data_ptr(), rstd.data_ptr() if rstd is not None else 0,
                                         float(eps)))
    return out


_bound: dict = {}  # BoundCudaLaunch per signature (launches without a residual)


def _prepare(x, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group, num_ctas, sumsq, rstd, eps):
    fn, grid, args = gemm_sm90.prepare(x, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group,
                                       num_ctas, SOURCE, KERNEL)
    args += [launch.pointer("sumsq_ptr", sumsq), launch.pointer("rstd_ptr", rstd), ctypes.c_float(eps)]
    return fn, grid, args


# ------------------------------------------------------------------------------------------------ self-check
# The kernel's contract in fp32: (x @ folded^T) * rstd + bias, activation, + residual; returns (y, rstd).
reference = folded_rms_norm_linear_reference


def _self_check_one(device, v, dtype) -> tuple[bool, str]:
    """The norm GEMMs' self-check (rmsnorm_gemm_sm90.run_norm_self_check) with x's sums of squares as the input,
    against :func:`reference`."""
    from .rmsnorm_gemm_sm90 import run_norm_self_check

    def case(x, w, bias, res, out, rstd, act, gen):
        sumsq = x.float().pow(2).sum(1)
        M, N = out.shape
        launch_cuda_rstd_gemm(x, w.t(), out, sumsq, rstd, 1e-6, bias=bias,
                              residual=None if res is None else res.reshape(1, M, N), activation=act, variant=v)
        return reference(x, w, sumsq, bias, 1e-6, act, res)

    return run_norm_self_check(device, v, dtype, 4322, case)


# measured: the op's folded forward on an H200, issue 17's rows (ops/rms_norm_linear.py says where it runs)
MEASURED_ON = (Measurement("H200", "perf/results/h200/rms_norm_linear/folded_2026-11-28_0953.txt", "2026-11-28"),)
GUARD = Guard("CUDA rstd-GEMM", "sm_90a rstd-GEMM ", MEASURED_ON)


def ready(x, b, sumsq, bias=None) -> tuple[bool, str]:
    """Constraints, toolchain and the variant's self-check on this device model (once per process; a failure
    disables the kernel with one warning)."""
    blocked = GUARD.blocked(constraints(x, b, sumsq, bias))
    if blocked:
        return blocked
    if not x.is_cuda or torch.cuda.get_device_capability(x.device)[0] != 9:
        return False, "needs an sm_90 GPU"
    v = pick_variant(x.shape[0], b.shape[1], x.shape[1])
    return GUARD.check(x.device, v.name, (x.dtype,), lambda: _self_check_one(x.device, v, x.dtype))


def try_launch(x, b, out, sumsq, rstd, eps, bias=None) -> bool:
    """The op layer's launch, or False (the caller's other path then runs) after one warning on a failure."""
    return GUARD.run(launch_cuda_rstd_gemm, x, b, out, sumsq, rstd, eps, bias=bias)
