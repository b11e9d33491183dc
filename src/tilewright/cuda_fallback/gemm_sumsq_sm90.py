"""Host side of the Hopper GEMM that also returns its output rows' sums of squares (``gemm_sumsq_sm90.cu`` =
``gemm_sm90.cu`` with ``TW_SUMSQ_OUT``): ``out = act(a @ b + bias) + residual`` and, per row, ``sum_n out[r, n]^2`` of
the stored (rounded) values in fp32 - what :func:`tilewright.linear` ``(..., return_sumsq=True)`` returns for the
RMSNorm after a pre-norm block's residual add, which then reads its input once, in its own GEMM.

Why in the epilogue: the values are in registers there; a pass after the GEMM re-reads the whole output (M x N x 2
bytes, ~3-4% of a large GEMM's time at N = 4096 - the cost the norm's own pass has). Each CTA writes one partial sum
per (tile column, row) into a (ceil(N / BN), M) fp32 buffer - no atomics, so the sums are the same bits every run -
and the host sums the partials over the tile columns (one small reduction, ceil(N / BN) x M x 4 bytes).

Entry points: :func:`constraints`, :func:`launch_cuda_gemm_sumsq` (into given ``out`` / partials), :func:`ready`
(constraints, toolchain and the first-use self-check), :func:`try_launch` (the op layer's: False instead of raising).
The op layer (ops/gemm.py, ``linear(..., return_sumsq=True)``) takes it where the plain sm_90 GEMM is the router's
choice; it is not a router family of its own.
"""
from __future__ import annotations

import math

import torch

from ..reference import epilogue_reference
from . import gemm_sm90
from .runtime import gemm_common, launch
from .runtime.guard import Guard, relative_error, run_self_check, synchronize

SOURCE = "gemm_sumsq_sm90.cu"
KERNEL = "tw_gemm_sumsq_sm90"
# build-check (CPU CI): the residual epilogue of the default and the small-M tile (what a pre-norm block's output
# projection runs), and the register-heaviest epilogue (fp16 GELU + bias + residual)
# (with a residual of full rows and an aligned bias, the paths the launcher compiles in: gemm_sm90.epilogue_paths)
BUILD_CHECK_BUILDS = (  # (variant, a_mn, b_mn, fp16, act, bias, res, extra defines)
    ("coop128x256s3", False, False, False, 0, False, True, {"TW_RES_PATH": 1}),
    ("pp128x128s5", False, False, False, 0, True, True, {"TW_RES_PATH": 1, "TW_BIAS_PATH": 1}),
    ("coop128x256s3", False, True, True, 2, True, True, {"TW_RES_PATH": 1, "TW_BIAS_PATH": 1}),
)
BUILD_CHECK_ARCHS = ("sm_90a",)
BUILD_CHECK_MARKERS = gemm_sm90.BUILD_CHECK_MARKERS + gemm_sm90.STORE_MARKERS[0]  # (TMA-stored builds)


# the plain GEMM's tiles built with the sums-of-squares epilogue (TW_SUMSQ_OUT)
VARIANTS = gemm_sm90.switched_variants("TW_SUMSQ_OUT", "-sumsq")


def build_check_builds() -> list:
    """``tilewright build-check`` rows (label, defines, dynamic smem) of BUILD_CHECK_BUILDS."""
    return gemm_common.build_check_rows(BUILD_CHECK_BUILDS, VARIANTS)


def pick_variant(M: int, N: int, K: int) -> gemm_sm90.SwitchedVariant:
    """The plain GEMM's tile for this shape (``TILEWRIGHT_CUDA_GEMM_VARIANT`` overrides both)."""
    return VARIANTS[gemm_sm90.pick_variant(M, N, K).name]


def partial_shape(M: int, N: int, K: int) -> tuple[int, int]:
    """The (tile columns, M) shape of the partial sums buffer the launch at this shape fills."""
    return -(-N // pick_variant(M, N, K).bn), M


def constraints(a, b, bias=None, residual=None) -> tuple[bool, str]:
    """Whether a (M, K), b (K, N) and the epilogue operands can take the kernel, and why not (the plain GEMM's
    rules)."""
    return gemm_sm90.constraints(a, b, bias, residual)


_prepared: dict = {}
_bound: dict = {}  # BoundCudaLaunch per signature (launches without a residual)


def launch_cuda_gemm_sumsq(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, parts: torch.Tensor, *, bias=None,
                           residual=None, activation=0, variant: gemm_sm90.SwitchedVariant | str | None = None,
                           tile_order: str | int = "grouped", group: int = 16,
                           num_ctas: int | None = None) -> torch.Tensor:
    """``out = act(a @ b + bias) + residual`` and ``parts[pn, r]`` = the sum of ``out[r, n]^2`` over tile column pn
    (the stored values, fp32); ``parts.sum(0)`` is each row's sum of squares. parts: a contiguous fp32
    (ceil(N / BN), M) tensor (:func:`partial_shape` for the default tile). The rest as
    :func:`.gemm_sm90.launch_cuda_gemm`. Raises ValueError outside :func:`constraints`."""
    M, K = a.shape
    N = b.shape[1]
    v = gemm_common.resolve_variant(VARIANTS, pick_variant, variant, M, N, K)
    if not (parts.dtype == torch.float32 and parts.shape == (-(-N // v.bn), M) and parts.is_contiguous()
            and parts.device == a.device):
        raise ValueError(f"cuda gemm sumsq: parts must be a contiguous float32 ({-(-N // v.bn)}, {M}) tensor on "
                         f"{a.device} for variant {v.name}")
    activation, tile_order, rs, res_ptr, res_period = gemm_common.launch_args(
        "cuda gemm sumsq", a, b, out, bias, residual, activation, tile_order, group, out_align=16)
    roles = gemm_common.operand_roles(a, b, out, bias, residual)
    roles["sumsq_part_ptr"] = parts

    def prepare():
        fn, grid, args = gemm_sm90.prepare(a, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order,
                                           group, num_ctas, SOURCE, KERNEL)
        return fn, grid, args + [launch.pointer("sumsq_part_ptr", parts)]

    gemm_common.launch_per_signature(
        _prepared, _bound, prepare, v, residual, roles, (activation, tile_order, group, num_ctas),
        lambda: gemm_common.prepared_key(a, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group,
                                         num_ctas, parts.data_ptr()))
    return out


# ------------------------------------------------------------------------------------------------ self-check
def _self_check_one(device, v, dtype) -> tuple[bool, str]:
    """Problems with M / N / K tails and several tiles per dimension, bias + gelu + residual, outputs and partials
    pre-filled with NaN: the output within 2e-2 relative of the fp32 reference, and the summed partials within 1e-5
    relative of the stored output's own sums of squares (the contract: the values as stored)."""
    gen = torch.Generator(device="cpu").manual_seed(4323)

    def measure(M, N, K, act, use_res):
        a = (torch.randn(M, K, generator=gen)).to(device=device, dtype=dtype)
        w = (torch.randn(N, K, generator=gen) / math.sqrt(K)).to(device=device, dtype=dtype)
        bias = torch.randn(N, generator=gen).to(device=device, dtype=dtype)
        res = torch.randn(M, N, generator=gen).to(device=device, dtype=dtype) if use_res else None
        out = torch.full((M, N), float("nan"), device=device, dtype=dtype)
        parts = torch.full((-(-N // v.bn), M), float("nan"), device=device, dtype=torch.float32)
        launch_cuda_gemm_sumsq(a, w.t(), out, parts, bias=bias, residual=None if res is None else res.view(1, M, N),
                               activation=act, variant=v)
        ref = epilogue_reference(a.float() @ w.float().t(), bias, act, res)
        synchronize(device)
        want = out.double().square().sum(1)
        return {"relative error": (relative_error(out, ref), 2e-2),
                "sum of squares error": (((parts.double().sum(0) - want).abs() / want.clamp_min(1e-30)).max().item(),
                                         1e-5)}

    shapes = ((296, 264, 200, "gelu", True), (8, 64, 72, None, False),
              (2 * v.bm + 8, 3 * v.bn + 8, 1000, None, True))
    return run_self_check(v.name, ((f"({M}, {N}, {K})", lambda c=(M, N, K, act, res): measure(*c))
                                   for M, N, K, act, res in shapes))


# Not yet run on a GPU (written and build-checked on CPU): no measurement, so the guard's reasons say the code has not
# run on this hardware; the self-check guards its first use on each device model.
MEASURED_ON: tuple = ()
GUARD = Guard("CUDA GEMM with sums of squares", "sm_90a GEMM + sums of squares ", MEASURED_ON)


def ready(a, b, bias=None, residual=None) -> tuple[bool, str]:
    """Constraints, toolchain and the variant's self-check on this device model (once per process; a failure
    disables the kernel with one warning)."""
    blocked = GUARD.blocked(constraints(a, b, bias, residual))
    if blocked:
        return blocked
    if not a.is_cuda or torch.cuda.get_device_capability(a.device)[0] != 9:
        return False, "needs an sm_90 GPU"
    v = pick_variant(a.shape[0], b.shape[1], a.shape[1])
    return GUARD.check(a.device, v.name, (a.dtype,), lambda: _self_check_one(a.device, v, a.dtype),
                       fallback="the GEMM and a pass over its output")


def try_launch(a, b, out, parts, bias=None, residual=None, activation=0) -> bool:
    """The op layer's launch, or False (the caller's other path then runs) after one warning on a failure."""
    return GUARD.run(launch_cuda_gemm_sumsq, a, b, out, parts, bias=bias, residual=residual, activation=activation)

