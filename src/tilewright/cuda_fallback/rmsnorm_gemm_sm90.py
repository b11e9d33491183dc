"""Host side of the Hopper RMSNorm-fused GEMM (``rmsnorm_gemm_sm90.cu`` = ``gemm_sm90.cu`` with ``TW_NORM_A``):
``y = act(rms_norm(x, g, eps) @ b + bias) + residual`` and rstd (fp32, (M,)) in one kernel.

Same numerics contract as the Triton path (triton_kernels/rmsnorm_gemm.py): fp32 sum of squares of x, the MMA
operand is ``x * g`` rounded once to x's dtype, ``rstd = 1 / sqrt_rn(ss / K + eps)`` scales the fp32 accumulator
before the bias.

Entry points:
* :func:`launch_cuda_rmsnorm_gemm` - into given ``out`` / ``rstd`` (the op layer's and the benchmark's call).
* :func:`constraints` - whether (x, norm_weight, weight, bias) can take this kernel, and why not.
* :func:`preferred` - the router's automatic choice (the sm_90 GEMM's measured win region, where this kernel was
  measured faster than the Triton fused one).
* :func:`ready` - constraints + toolchain + first-use self-check per (device model, variant, dtype).
* :func:`try_launch` - launches or returns False (one warning, then disabled); never raises.

Variants reuse the GEMM's tiles (``gemm_sm90.VARIANTS``). The default builds are register-A: ldmatrix -> x * g ->
register-A wgmma in the consumers, with the fp32 row sums kept there; ``-sb`` is their single-buffered-fragment
fallback (``TW_NORM_DBUF=0``). ``-xf`` (``TW_NORM_XFORM``) gives the per-element work to three transform warps of
the producer warpgroup instead (x -> x * g in place in smem, row sums, rstd through smem) so the consumers run the
plain GEMM's SS-wgmma mainloop; measured slower, it stays selectable. Any is selectable with
``TILEWRIGHT_CUDA_RMSNORM_VARIANT``; ``DEBUG_VARIANTS`` holds ``-ssdebug`` (register-A build with A read from smem
by the wgmma, g ignored) for the device script.
"""
from __future__ import annotations

import ctypes
import math
import os
from dataclasses import dataclass

import torch

from ..backends import Measurement, register
from . import gemm_sm90
from .runtime import cuda_backend, gemm_common, launch
from .runtime.guard import Guard, relative_error, run_self_check, synchronize

SOURCE = "rmsnorm_gemm_sm90.cu"
KERNEL = "tw_rmsnorm_gemm_sm90"


@dataclass(frozen=True)
class NormVariant(gemm_sm90.Variant):
    """A GEMM tile variant built with the norm prologue; ``dbuf`` False is the single-fragment-buffer fallback."""

    dbuf: bool = True
    ss_debug: bool = False  # A from smem, g ignored (correct only for g == 1): localises a fragment-layout bug
    xform: bool = False  # transform warps (TW_NORM_XFORM): x * g in smem by the producer warpgroup, SS wgmma
    # with xform: the transform warps only sum squares (TW_NORM_XFORM_RO) - for B = g * W folded by the host (g
    # itself is not read: the kernel computes rstd * (x @ B)); overlap: the readers join the stage's release
    # instead of gating the consumers (TW_NORM_XFORM_RO=2)
    read_only: bool = False
    overlap: bool = False
    no_read: bool = False  # debug, timing only: -ro transform warps that read nothing (TW_NORM_XFORM_NOREAD)

    @property
    def name(self) -> str:
        return (super().name + ("" if self.dbuf else "-sb") + ("-ssdebug" if self.ss_debug else "")
                + ("-xf" if self.xform else "") + ("-ro" if self.read_only else "") + ("ov" if self.overlap else "")
                + ("-noread" if self.no_read else ""))

    def smem_bytes(self) -> int:
        """The GEMM's plus, for -xf: per-stage transformed barriers, rstd_full/empty[2], padding, rstd[2][BM] fp32."""
        return super().smem_bytes() + (8 * self.stages + 4 * 8 + 8 + 2 * self.bm * 4 if self.xform else 0)

    def defines(self, a_mn: bool, b_mn: bool, fp16: bool, act: int = 0, bias: bool = False,
                res: bool = False) -> dict:
        """The GEMM variant's -D macros plus the fragment buffering switch (the source itself sets TW_NORM_A)."""
        d = super().defines(a_mn, b_mn, fp16, act, bias, res)
        if not self.dbuf:
            d["TW_NORM_DBUF"] = 0
        if self.ss_debug:
            d["TW_NORM_SS_DEBUG"] = 1
        if self.xform:
            d["TW_NORM_XFORM"] = 1
        if self.read_only:
            d["TW_NORM_XFORM_RO"] = 2 if self.overlap else 1
        if self.no_read:
            d["TW_NORM_XFORM_NOREAD"] = 1
        return d


VARIANTS = {v.name: v for v in (
    NormVariant(128, 256, 3, coop=True, xform=True), NormVariant(128, 128, 5, xform=True),
    NormVariant(64, 256, 4, xform=True),
    NormVariant(128, 256, 3, coop=True), NormVariant(128, 256, 3, coop=True, dbuf=False),
    NormVariant(128, 128, 5), NormVariant(64, 256, 4), NormVariant(64, 256, 4, dbuf=False),
    NormVariant(256, 128, 3, coop=True),
)}
# the folded forward's in-kernel sum of squares (B = g * W from the host; never picked by the router: the op layer
# names it - ops/rms_norm_linear.py)
READ_ONLY_VARIANTS = {v.name: v for v in (NormVariant(128, 256, 3, coop=True, xform=True, read_only=True),
                                          NormVariant(128, 128, 5, xform=True, read_only=True),
                                          NormVariant(128, 256, 3, coop=True, xform=True, read_only=True,
                                                      overlap=True),
                                          NormVariant(128, 128, 5, xform=True, read_only=True, overlap=True),
                                          # the 192-column tile (gemm_sm90.WAVE_VARIANT) for the wave-balanced
                                          # shapes: FOLDED_WAVE_VARIANT
                                          NormVariant(128, 192, 4, coop=True, xform=True, read_only=True,
                                                      overlap=True))}
# debug builds (tests/cuda/test_rmsnorm_gemm_sm90_gpu.py, with g = 1); never picked by the router
# (-noread: the folded builds' timing without the sums' reads - perf/results/h200/rms_norm_linear/
# sums_cost_probe_2026-12-01.py; wrong outputs)
DEBUG_VARIANTS = {v.name: v for v in (NormVariant(128, 256, 3, coop=True, ss_debug=True),
                                      NormVariant(128, 192, 4, coop=True, xform=True, read_only=True, overlap=True,
                                                  no_read=True),
                                      NormVariant(128, 256, 3, coop=True, xform=True, read_only=True, overlap=True,
                                                  no_read=True))}
# H200 (MEASURED_ON), time / cuBLAS GEMM geomean over the 8 large shapes: register-A coop128x256s3 1.219x, its
# single-buffered build 1.317x, transform warps (-xf) 1.368x, Triton fused 1.281x, eager rms_norm + cuBLAS 1.069x.
# The register-A build is the default; -xf stays selectable. The register-A kernel beat the Triton fused kernel on
# all 8 shapes (a tie on sq8k), so the router takes it inside the sm_90 GEMM's measured win region (preferred).
MEASURED_ON = (
    Measurement("H200", "perf/results/h200/rmsnorm_gemm_sm90_register_a_2026-11-26.csv", "2026-11-26"),
    Measurement("H200", "perf/results/h200/rmsnorm_gemm_sm90_xform_2026-11-26.csv", "2026-11-26"),
)
DEFAULT_VARIANT = "coop128x256s3"     # register-A, double-buffered fragments
SMALL_M_VARIANT = "pp128x128s5"       # the GEMM's M <= 256 choice
REGISTER_A_VARIANT = "coop128x256s3"
XFORM_VARIANT = "coop128x256s3-xf"    # transform warps (slower on H200: the 3 transform warps set the pace)
# build-check (CPU CI), B K-major as weight.t() is: the -xf builds in bf16, in fp16 with the full epilogue, and the
# small-M tiles; the register-A default, its single-buffered fallback, fp16 with the full epilogue, small-M.
BUILD_CHECK_BUILDS = (  # (variant, a_mn, b_mn, fp16, act, bias, res)
    ("coop128x256s3-xf", False, False, False, 0, False, False),
    ("coop128x256s3-xf", False, False, True, 2, True, True),
    ("pp128x128s5-xf", False, False, False, 0, True, False),
    ("pp64x256s4-xf", False, False, False, 0, False, False),
    ("coop128x256s3", False, False, False, 0, False, False),
    ("coop128x256s3-sb", False, False, False, 0, False, False),
    ("coop128x256s3", False, False, True, 2, True, True),
    ("pp128x128s5", False, False, False, 0, True, False),
    ("coop128x256s3-xf-ro", False, False, False, 0, False, False),
    ("coop128x256s3-xf-ro", False, False, True, 2, True, True),
    ("coop128x256s3-xf-roov", False, False, False, 0, False, False),
    ("pp128x128s5-xf-roov", False, False, False, 0, True, False),
    ("coop128x192s4-xf-roov", False, False, False, 0, True, False),
)
BUILD_CHECK_ARCHS = ("sm_90a",)
# the sm_90 GEMM's: HGMMA, TMA in and out, setmaxnreg, stmatrix; per variant (build_markers) LDSM for the
# register-A builds, LDS.128/STS.128 for -xf
BUILD_CHECK_MARKERS = gemm_sm90.BUILD_CHECK_MARKERS + gemm_sm90.STORE_MARKERS[0]  # (TMA-stored builds)


def build_check_builds() -> list:
    """``tilewright build-check`` rows (label, defines, dynamic smem, per-build markers) of BUILD_CHECK_BUILDS."""
    return gemm_common.build_check_rows(BUILD_CHECK_BUILDS, {**VARIANTS, **READ_ONLY_VARIANTS}, build_markers)


def build_markers(v: NormVariant) -> tuple:
    """SASS markers of a build beyond the kernel's (build-check): the -xf transform warps' 16-byte shared loads and
    stores (-ro: loads only); the register-A builds' ldmatrix."""
    return ("LDS.128",) if v.read_only else ("LDS.128", "STS.128") if v.xform else ("LDSM",)


def pick_variant(M: int, N: int, K: int) -> NormVariant:
    """Static choice per shape (``TILEWRIGHT_CUDA_RMSNORM_VARIANT`` overrides, e.g. ``coop128x256s3-sb``)."""
    forced = os.environ.get("TILEWRIGHT_CUDA_RMSNORM_VARIANT")
    if forced:
        return VARIANTS[forced]
    return VARIANTS[SMALL_M_VARIANT if M <= 256 else DEFAULT_VARIANT]


PREFER_MIN_FLOPS = 2**36  # see preferred()


def preferred(x, norm_weight, weight, bias=None) -> tuple[bool, str]:
    """Whether the router's automatic choice takes this kernel for x (M, K) and weight (N, K): inside the sm_90
    GEMM's measured win region, with the GEMM's earlier host-bound floor (2^36 FLOPs): the plain GEMM's was raised
    for the ViT block's 100-200 GFLOP GEMMs, while this kernel's Triton twin (the norm in the A prologue) has not
    been measured against it at those sizes (the Llama prefill's norm + QKV, 206 GFLOP, runs here)."""
    return gemm_sm90.preferred(x.shape[0], weight.shape[0], x.shape[1], min_flops=PREFER_MIN_FLOPS)


def constraints(x, norm_weight, weight=None, bias=None) -> tuple[bool, str]:
    """Whether x (M, K), norm_weight (K,), weight (N, K), bias (N,) can take the kernel, and why not."""
    if not all(isinstance(t, torch.Tensor) for t in (x, norm_weight, weight)):
        return False, "expects tensors x, norm_weight, weight"
    if x.dim() != 2 or norm_weight.dim() != 1 or weight.dim() != 2:
        return False, "expects x (M, K), norm_weight (K,), weight (N, K)"
    M, K = x.shape
    if weight.shape[1] != K or norm_weight.shape[0] != K:
        return False, "shape mismatch between x, norm_weight and weight"
    if norm_weight.dtype != x.dtype:
        return False, "mixed dtypes"
    if x.dtype == torch.float16:
        # The kernel forms x * g in fp16 before normalising: |x * g| > 65504 overflows to inf (NaN rows) where the
        # unfused pipeline stays finite. The Triton kernel rescales g by 1/max|g| for fp16; this one does not yet.
        return False, "float16 (x * norm_weight would be formed in fp16 and can overflow; Triton rescales it)"
    ok, why = gemm_sm90.constraints(x, weight.t(), bias)
    if not ok:
        return False, why
    if x.stride(1) != 1 and K > 1:
        return False, "x must have unit stride along K (the norm prologue reads rows with ldmatrix)"
    if K % 2:
        return False, f"K = {K} is odd (the kernel reads norm-weight pairs)"
    return True, "bf16, K-major x, 16-byte aligned strides (TMA)"


def _norm_weight_arg(norm_weight: torch.Tensor) -> torch.Tensor:
    """g as the kernel reads it: contiguous, 16-byte aligned (the -xf transform warps read 8 values at once; a copy
    otherwise)."""
    if norm_weight.stride(0) != 1 or norm_weight.data_ptr() % 16:
        return norm_weight.contiguous().clone()
    return norm_weight


def launch_cuda_rmsnorm_gemm(x: torch.Tensor, norm_weight: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                             rstd: torch.Tensor | None, eps: float, *, bias=None, residual=None, activation=0,
                             variant: NormVariant | str | None = None, tile_order: str | int = "grouped",
                             group: int = 16, num_ctas: int | None = None,
                             row_counts: torch.Tensor | None = None) -> torch.Tensor:
    """``out = act(rms_norm(x, g, eps) @ b + bias) + residual`` with the sm_90a kernel; rstd (fp32 (M,)) stored when
    given. x: (M, K) K-major; b: (K, N) (``weight.t()``); out: (M, N) row-major; residual (R0, P, N) as in
    :func:`.gemm_sm90.launch_cuda_gemm`. Raises ValueError on inputs outside :func:`constraints`.

    ``row_counts``: with an -roov build and rstd given, a scratch int32 tensor of at least ceil(M / BM) elements (any
    contents: the launch zeroes them) - the first column tile of each row block then sums its rows for the later
    ones (the kernel's header: sums once a row block; the tile sequence starts with those first tiles)."""
    M, K = x.shape
    N = b.shape[1]
    ok, why = constraints(x, norm_weight, b.t(), bias)
    if not ok:
        raise ValueError(f"cuda rmsnorm gemm: {why}")
    if rstd is not None and (rstd.dtype != torch.float32 or rstd.shape != (M,) or rstd.stride(0) != 1):
        raise ValueError("cuda rmsnorm gemm: rstd must be a contiguous fp32 (M,) tensor")
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"cuda rmsnorm gemm: eps must be finite and > 0, got {eps}")
    activation, tile_order, rs, res_ptr, res_period = gemm_common.launch_args(
        "cuda rmsnorm gemm", x, b, out, bias, residual, activation, tile_order, group, out_align=16)
    v = gemm_common.resolve_variant({**VARIANTS, **READ_ONLY_VARIANTS}, pick_variant, variant, M, N, K)
    zero = None
    if row_counts is not None:
        num_m = -(-M // v.bm)
        if not (v.read_only and v.overlap):
            raise ValueError(f"cuda rmsnorm gemm: row_counts needs an -roov build, not {v.name}")
        if rstd is None:
            raise ValueError("cuda rmsnorm gemm: row_counts needs rstd (the row blocks' rstd pass through it)")
        if row_counts.dtype != torch.int32 or row_counts.dim() != 1 or row_counts.numel() < num_m or \
                row_counts.stride(0) != 1 or row_counts.device != x.device:
            raise ValueError(f"cuda rmsnorm gemm: row_counts must be a contiguous int32 tensor of >= {num_m} "
                             f"elements on x's device")
        zero = {"counts_ptr": num_m}
    g = _norm_weight_arg(norm_weight)
    roles = gemm_common.operand_roles(x, b, out, bias, residual)
    roles["g_ptr"] = g  # a private copy (see _norm_weight_arg) is at another address than the op's input: no replay
    if rstd is not None:
        roles["rstd_ptr"] = rstd
    if row_counts is not None:
        roles["counts_ptr"] = row_counts

    def prepare():
        return _prepare(x, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group, num_ctas, g,
                        rstd, eps, row_counts)

    gemm_common.launch_per_signature(
        _prepared, _bound, prepare, v, residual, roles, (activation, tile_order, group, num_ctas, float(eps)),
        lambda: gemm_common.prepared_key(x, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group,
                                         num_ctas, g.data_ptr(), rstd.data_ptr() if rstd is not None else 0,
                                         float(eps), row_counts.data_ptr() if row_counts is not None else 0),
        zero)
    return out


_prepared: dict = {}
_bound: dict = {}  # BoundCudaLaunch per signature (launches without a residual; runtime/launch.launch_bound)


def _prepare(x, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group, num_ctas, g, rstd, eps,
             row_counts=None):
    fn, grid, args = gemm_sm90.prepare(x, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group,
                                       num_ctas, SOURCE, KERNEL, residual_tma=False)
    args += [launch.pointer("g_ptr", g), launch.pointer("rstd_ptr", rstd), ctypes.c_float(eps),
             launch.pointer("counts_ptr", row_counts)]
    # g's address is baked into the cached arguments: keep a private copy of it alive with them
    return fn, grid, _Args(args, keep=g)


class _Args(list):
    """Kernel arguments (the list) plus tensors whose addresses they hold and that nothing else keeps alive."""

    def __init__(self, items, keep):
        super().__init__(items)
        self.keep = keep


# ------------------------------------------------------------------------------------------------ self-check
def reference(x, norm_weight, weight, bias, eps, activation=None, residual=None):
    """The kernel's contract in fp32: (bf16(x * g) @ W^T) * rstd + bias, activation, + residual; returns (y, rstd)."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
    u = (xf * norm_weight.float()).to(x.dtype).float()
    from ..reference import epilogue_reference

    return epilogue_reference((u @ weight.float().t()) * rstd[:, None], bias, activation, residual), rstd


def run_norm_self_check(device, v, dtype, seed: int, case) -> tuple[bool, str]:
    """The first-use self-check of the norm GEMM builds (this kernel and rstd_gemm_sm90's): problems with M/N/K tails
    and one of several tiles per dimension, bias + gelu + residual, outputs pre-filled with NaN. ``case(x, w, bias,
    residual, out, rstd, activation, gen)`` launches the build into ``out`` / ``rstd`` and returns its fp32 reference
    (y, rstd); the output must be within 2e-2 relative and rstd within 1e-5."""
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def measure(M, N, K, act, use_res):
        x = (torch.randn(M, K, generator=gen) * 3).to(device=device, dtype=dtype)
        w = (torch.randn(N, K, generator=gen) / math.sqrt(K)).to(device=device, dtype=dtype)
        bias = torch.randn(N, generator=gen).to(device=device, dtype=dtype)
        res = torch.randn(M, N, generator=gen).to(device=device, dtype=dtype) if use_res else None
        out = torch.full((M, N), float("nan"), device=device, dtype=dtype)
        rstd = torch.full((M,), float("nan"), device=device, dtype=torch.float32)
        ref, ref_rstd = case(x, w, bias, res, out, rstd, act, gen)
        synchronize(device)
        return {"relative error": (relative_error(out, ref), 2e-2),
                "rstd error": (((rstd - ref_rstd).abs() / ref_rstd).max().item(), 1e-5)}

    shapes = ((296, 264, 200, "gelu", True), (8, 64, 72, None, False), (2 * v.bm + 8, 3 * v.bn + 8, 1000, "gelu", True))
    return run_self_check(v.name, ((f"({M}, {N}, {K})", lambda c=(M, N, K, act, res): measure(*c))
                                   for M, N, K, act, res in shapes))


def _self_check_one(device, v, dtype) -> tuple[bool, str]:
    """:func:`run_norm_self_check` with a non-trivial g, against :func:`reference`."""
    def case(x, w, bias, res, out, rstd, act, gen):
        g = (1 + 0.5 * torch.randn(x.shape[1], generator=gen)).to(device=x.device, dtype=x.dtype)
        M, N = out.shape
        launch_cuda_rmsnorm_gemm(x, g, w.t(), out, rstd, 1e-6, bias=bias,
                                 residual=None if res is None else res.reshape(1, M, N), activation=act, variant=v)
        return reference(x, g, w, bias, 1e-6, act, res)

    return run_norm_self_check(device, v, dtype, 4321, case)


GUARD = Guard("CUDA RMSNorm-GEMM", "sm_90a RMSNorm-GEMM ", MEASURED_ON)


def ready(x, norm_weight, weight, bias=None) -> tuple[bool, str]:
    """Constraints, toolchain and the variant's self-check on this device model (once per process; a failure
    disables the variant with one warning)."""
    blocked = GUARD.blocked(constraints(x, norm_weight, weight, bias))
    if blocked:
        return blocked
    v = pick_variant(x.shape[0], weight.shape[0], x.shape[1])
    return GUARD.check(x.device, v.name, (x.dtype,), lambda: _self_check_one(x.device, v, x.dtype))


def try_launch(x, norm_weight, weight, out, rstd, eps, bias=None) -> bool:
    """The op layer's forward: launch, or False (Triton then runs) after one warning on a failure; never raises."""
    return GUARD.run(launch_cuda_rmsnorm_gemm, x, norm_weight, weight.t(), out, rstd, eps, bias=bias)


# ------------------------------------------------------------------------------------------------ folded forward
# The folded RMSNorm-linear's in-kernel sum of squares (ops/rms_norm_linear._folded): b = (g * W)^T folded on the
# host, so the -xf build's three transform warps only read each x stage from shared memory and add its squares to the
# row sums (TW_NORM_XFORM_RO=2, "-roov": they join the stage's release rather than gating the consumers, whose
# mainloop is the plain GEMM's). Contract: rstd_gemm_sm90's, with the sums of squares taken in-kernel.
# H200, same run, time over the best bare GEMM on five large rows: 1.034-1.072, where the read-only pre-pass + rstd
# GEMM ran 1.047-1.119 (2048 x 14336 x 4096: 1.055 vs 1.047, the one row it did not win) - the pre-pass's read of x
# (3-6% of the GEMM at K 2048-4096) hides under the wgmmas; the rest over bare is the -xf build's smaller register
# budget for the consumers (perf/results/h200/rms_norm_linear/folded_in_kernel_overlap_2026-11-28_1215.txt).
FOLDED_VARIANT = "coop128x256s3-xf-roov"
# Where the plain GEMM takes the 192-column tile for its waves (gemm_sm90.pick_variant), the same tile with the
# in-kernel sums. H200, 3000 x 5120 x 5120 (perf/results/h200/rms_norm_linear/sumsq_handoff_2026-11-29_s35*.txt):
# 1.080x the bare cuBLAS GEMM against 1.090 on the 128 x 256 build - less than predicted (~1.02: the rstd GEMM on this
# tile with the sums given runs 1.007x); the sums cost this tile 7%, the wide one's rows 1.5-2.6%. The pass + rstd
# GEMM alternative ran level with it (1.081 vs 1.089x, rms_norm_linear/wave_fold_paths_s36.txt); the -noread debug
# build put the whole cost on the transform warps' reads of the x stages (sums_cost_probe_s36.txt), so this build
# sums once a row block (sums_once_applies, below).
FOLDED_WAVE_VARIANT = "coop128x192s4-xf-roov"
FOLDED_MEASURED_ON = (
    Measurement("H200", "perf/results/h200/rms_norm_linear/folded_in_kernel_overlap_2026-11-28_1215.txt", "2026-11-28"),
    Measurement("H200", "perf/results/h200/rms_norm_linear/ops_2026-11-28_1250.txt", "2026-11-28"),
)
# Its own guard: a failed folded launch disables this build, not the fused kernels the router picks.
FOLDED_GUARD = Guard("CUDA folded RMSNorm-GEMM", "sm_90a in-kernel sum-of-squares RMSNorm-GEMM ", FOLDED_MEASURED_ON)


def folded_variant(M: int, N: int, K: int) -> str:
    """The folded build for an (M, N, K) problem: :data:`FOLDED_WAVE_VARIANT` where the plain GEMM takes its
    192-column tile (``gemm_sm90.pick_variant``, which ``TILEWRIGHT_CUDA_GEMM_VARIANT`` overrides), else
    :data:`FOLDED_VARIANT`."""
    return FOLDED_WAVE_VARIANT if gemm_sm90.pick_variant(M, N, K).name == gemm_sm90.WAVE_VARIANT else FOLDED_VARIANT


def _folded_self_check(device, dtype, name: str = FOLDED_VARIANT) -> tuple[bool, str]:
    """:func:`run_norm_self_check` of folded build ``name`` with a folded weight and a g argument the build must
    not apply, against the folded contract (reference.folded_rms_norm_linear_reference: x's row sums of squares in
    fp32)."""
    from ..reference import folded_rms_norm_linear_reference as folded_reference

    v = READ_ONLY_VARIANTS[name]

    def case(x, w, bias, res, out, rstd, act, gen):
        M, N = out.shape
        # a g far from 1 that the build must ignore (g is inside the folded weight): one that applied it fails
        unused_g = (1 + 0.5 * torch.randn(x.shape[1], generator=gen)).to(device=x.device, dtype=x.dtype)
        # the sums once a row block (at every tile width, though try_launch_folded takes it on the 192 tile only), the
        # counters poisoned past the published count: the launch must zero them, or a later tile of a row block would
        # take the NaN the rstd buffer is filled with for its row block's rstd
        counts = torch.full((-(-M // v.bm),), 1 << 20, device=x.device, dtype=torch.int32) if N > v.bn else None
        launch_cuda_rmsnorm_gemm(x, unused_g, w.t(), out, rstd, 1e-6, bias=bias,
                                 residual=None if res is None else res.reshape(1, M, N), activation=act, variant=v,
                                 row_counts=counts)
        return folded_reference(x, w, x.float().pow(2).sum(1), bias, 1e-6, act, res)

    return run_norm_self_check(device, v, dtype, 4323, case)


def folded_ready(x, folded, bias=None) -> tuple[bool, str]:
    """Whether :func:`try_launch_folded` can take x (M, K) and the folded weight (N, K): bf16 / fp16 TMA operands,
    an sm_90 GPU, and the build's first-use self-check (once per process and device model)."""
    if not (isinstance(x, torch.Tensor) and isinstance(folded, torch.Tensor) and x.dim() == folded.dim() == 2):
        return False, "expects x (M, K) and the folded weight (N, K)"
    blocked = FOLDED_GUARD.blocked(constraints(x, folded[0], folded, bias))
    if blocked:
        return blocked
    if not x.is_cuda or torch.cuda.get_device_capability(x.device)[0] != 9:
        return False, "needs an sm_90 GPU"
    name = folded_variant(x.shape[0], folded.shape[0], x.shape[1])
    return FOLDED_GUARD.check(x.device, name, (x.dtype,), lambda: _folded_self_check(x.device, x.dtype, name))


# The folded build on the 192-column tile sums each row block's squares in its first column tile only (the kernel's
# "sums once a row block"). H200, graph replays interleaved, time over bare cuBLAS, outputs bit-equal
# (perf/results/h200/rms_norm_linear/sums_once_ab_v{1,2,3}_s36.txt, the kernel's three forms; v3 is this one): on the
# 192 tile 3000 x 5120 x 5120 1.145 -> 1.082x (v1 / v2: 1.148 -> 1.076, 1.172 -> 1.086), 6000 x 5120 x 5120 1.136 ->
# 1.029x (1.159 -> 1.058, 1.186 -> 1.035); on the 256 tile level (8192 x 4096 x 4096 1.041 -> 1.050, 1.032 -> 1.035,
# 1.037 -> 1.019; 2048 x 14336 x 4096 1.038 -> 1.024, 1.033 -> 1.016, 1.031 -> 1.019: the reads there cost 2-3%, and
# the counters' memset before each launch and the first wave's own sums take most of it back). So: the 192 tile only.
# ``TILEWRIGHT_RMS_SUMS_ONCE=0``: every tile sums there too.
SUMS_ONCE_ENV = "TILEWRIGHT_RMS_SUMS_ONCE"


def sums_once_applies(M: int, N: int, K: int) -> bool:
    """Whether the folded launch of an (M, N, K) problem sums once a row block: the 192-column folded build
    (:data:`FOLDED_WAVE_VARIANT`, where it measured faster) with more than one column tile, not turned off by
    :data:`SUMS_ONCE_ENV`."""
    name = folded_variant(M, N, K)
    return (name == FOLDED_WAVE_VARIANT and N > READ_ONLY_VARIANTS[name].bn
            and os.environ.get(SUMS_ONCE_ENV, "1") != "0")


def try_launch_folded(x, folded, out, rstd, eps, bias=None) -> bool:
    """``out = rstd * (x @ folded^T) + bias`` with rstd from x's row sums of squares, taken in-kernel and stored in
    ``rstd``, by the shape's :func:`folded_variant` - once a row block where :func:`sums_once_applies` (a scratch
    counter per row block, zeroed by the launch). The kernel's g argument gets ``folded[0]`` (any (K,) row of x's
    dtype: the read-only build never loads g, which is inside ``folded``). False (the caller's other path then runs)
    after one warning on a failure; never raises."""
    M, K = x.shape
    N = folded.shape[0]
    name = folded_variant(M, N, K)
    counts = None
    if sums_once_applies(M, N, K):
        counts = torch.empty(-(-M // READ_ONLY_VARIANTS[name].bm), device=x.device, dtype=torch.int32)
    return FOLDED_GUARD.run(launch_cuda_rmsnorm_gemm, x, folded[0], folded.t(), out, rstd, eps, bias=bias,
                            variant=name, row_counts=counts)


register(cuda_backend("rms_norm_linear", "rmsnorm_gemm_sm90", "sm_90a register-A WGMMA RMSNorm-GEMM", (9,),
                      env=("TILEWRIGHT_CUDA_RMSNORM_VARIANT", "TILEWRIGHT_RMS_TWO_PASS", "TILEWRIGHT_RMS_FOLDED",
                           SUMS_ONCE_ENV),
                      constraints=constraints,
                      preferred=preferred, ready=ready, launch=try_launch, measured=MEASURED_ON))
