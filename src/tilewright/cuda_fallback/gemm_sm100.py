"""Host side of the tcgen05 GEMM (``gemm_sm100.cu``) for sm_100/103 (B200, GB200, B300).

NEVER RUN on an sm_100 device by this project: it compiles, passes build-check's SASS checks, and reaches users only
through :func:`ready`, whose first-use self-check must pass on the device first (else Triton serves, one warning).
A wrong answer or a launch error is caught that way; a protocol hang (mbarrier parity, TMEM handshake) would not be,
so the first test on a B200 is a bounded one: ``timeout 60 python -c`` running :func:`ready` on a 4096 x 4096 bf16
problem (the self-check: M/N/K tails, bias + gelu + residual), then the GPU tier with ``TILEWRIGHT_BACKEND=cuda``.

Same contract as :mod:`.gemm_sm90` (operands, (R0, P, N) residual, activations, tile orders, constraints).

FP8 builds (``FP8_VARIANTS``, TW_FP8=1: tcgen05.mma kind::f8f6f4, e4m3/e5m2 K-major operands, per-tensor or row-wise
scales in the epilogue, bf16 out) are BUILD-ONLY: build-check compiles and SASS-checks them, but no launcher or
router path reaches them (ops/scaled_mm.py does not route to sm_100 CUDA). :func:`kernel_descriptors_fp8` and
:func:`tma_boxes` are what a launcher would pass; wiring one needs a B200 to self-check it first.

2-CTA builds (``CTA2_VARIANTS``, TW_CTA2=1: tcgen05.mma cta_group::2, M = 256 per 2x1 cluster, K-major operands;
bf16/fp16 or FP8) are BUILD-ONLY as well. The kernel carries ``__cluster_dims__(2, 1, 1)``, so a launcher needs no
cuLaunchKernelEx: the plain cuLaunchKernel of runtime.launch launches it as clusters, given an even grid
(:func:`grid_ctas`), B maps with (BK, BN / 2) boxes (:func:`tma_boxes`) and the M = 256 descriptor
(:func:`kernel_descriptors` with a 2-CTA variant). Existing launches are untouched.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from ..backends import register
from .._env import SMEM_OPTIN_BYTES
from . import gemm_sm90
from . import sm100_descriptors as desc
from .runtime import gemm_common
from .runtime.guard import Guard

SOURCE = "gemm_sm100.cu"
KERNEL = "tw_gemm_sm100"
BM = 128
THREADS = 192
SMEM_LIMIT = SMEM_OPTIN_BYTES  # sm_100 has sm_90's per-block opt-in maximum
MEASURED_ON = ()  # never run on an sm_100/103 card


@dataclass(frozen=True)
class Variant:
    """A compile-time variant of the sm_100a tcgen05 GEMM (tile width, pipeline stages; FP8 builds: scale mode
    1 per-tensor / 2 row-wise)."""
    bn: int
    stages: int
    fp8_scale: int = 0  # 0: 16-bit build (kind::f16); 1 / 2: kind::f8f6f4 with TW_SCALE = 1 / 2
    cta2: bool = False  # cta_group::2: a 2x1 cluster per 256-row tile, B split by N between the two CTAs

    bm = BM  # rows per CTA (the tile of a 2-CTA variant is pair * bm)

    @property
    def pair(self) -> int:
        """CTAs that share one MMA: 2 with the cta_group::2 pair, else 1."""
        return 2 if self.cta2 else 1

    @property
    def fp8(self) -> bool:
        return self.fp8_scale != 0

    @property
    def name(self) -> str:
        return f"tc{BM * self.pair}x{self.bn}s{self.stages}" + ("", "f8", "f8row")[self.fp8_scale] + "c2" * self.cta2

    def smem_bytes(self) -> int:
        return 1024 + self.stages * (BM + self.bn // self.pair) * 128 + (2 * self.stages + 4) * 8 + 16

    def defines(self, a_mn: bool, b_mn: bool, fp16: bool, act: int = 0, bias: bool = False,
                res: bool = False) -> dict:
        d = {"TW_BN": self.bn, "TW_STAGES": self.stages, "TW_A_MN": int(a_mn), "TW_B_MN": int(b_mn),
             "TW_FP16": int(fp16), "TW_ACT": int(act), "TW_BIAS": int(bias), "TW_RES": int(res)}
        if self.fp8:  # 16-bit builds pass exactly the defines they always did (same cache keys, same SASS)
            d.update(TW_FP8=1, TW_SCALE=self.fp8_scale)
        if self.cta2:
            d.update(TW_CTA2=1)
        return d


VARIANTS = {v.name: v for v in (Variant(256, 4), Variant(128, 6))}
DEFAULT_VARIANT = "tc128x256s4"
SMALL_M_VARIANT = "tc128x128s6"
# Build-only FP8 variants (a stage is the same 16 KB + BN x 128 bytes as the 16-bit build: BK = 128 fp8 elements)
FP8_VARIANTS = {v.name: v for v in (Variant(256, 4, 1), Variant(256, 4, 2), Variant(128, 6, 1))}
# Build-only 2-CTA variants: a stage is 16 KB of A + BN / 2 x 128 bytes of B per CTA, so BN = 256 fits 6 stages
CTA2_VARIANTS = {v.name: v for v in (Variant(256, 6, cta2=True), Variant(256, 6, 1, cta2=True))}
BUILD_CHECK_VARIANTS = {**VARIANTS, **FP8_VARIANTS, **CTA2_VARIANTS}
BUILD_CHECK_BUILDS = (  # (variant, a_mn, b_mn, fp16, act, bias, res)
    ("tc128x256s4", False, False, False, 0, False, False), ("tc128x256s4", False, True, False, 0, False, False),
    ("tc128x256s4", True, True, True, 2, True, True), ("tc128x128s6", False, False, False, 4, True, False),
    # FP8 (K-major only): per-tensor plain, row-wise scales with bias + gelu + residual, the small-M tile
    ("tc128x256s4f8", False, False, False, 0, False, False), ("tc128x256s4f8row", False, False, False, 2, True, True),
    ("tc128x128s6f8", False, False, False, 0, True, False),
    # 2-CTA (K-major only): bf16 with bias + gelu + residual, FP8 per-tensor
    ("tc256x256s6c2", False, False, False, 2, True, True), ("tc256x256s6f8c2", False, False, False, 0, False, False),
)
BUILD_CHECK_ARCHS = ("sm_100a",)
# TMEM alloc/dealloc (UTCATOMSWS), TMEM loads (LDTM), tcgen05.commit (UTCBAR), TMA loads; per build
# (build_markers) the MMA: UTCHMMA for kind::f16, UTCQMMA for the FP8 builds' kind::f8f6f4
BUILD_CHECK_MARKERS = ("UTCATOMSWS", "LDTM", "UTCBAR", "UTMALDG")


def build_markers(v: Variant) -> tuple[str, ...]:
    """The MMA opcode a build's SASS must carry: UTCHMMA (kind::f16) or UTCQMMA (kind::f8f6f4); 2-CTA builds their
    .2CTA forms, the multicast commit (UTCBAR.2CTA.MULTICAST) and the pair's TMEM alloc (UTCATOMSWS.2CTA)."""
    mma = "UTCQMMA" if v.fp8 else "UTCHMMA"
    if v.cta2:
        return (mma + ".2CTA", "UTCBAR.2CTA.MULTICAST", "UTCATOMSWS.2CTA")
    return (mma,)


def build_check_builds() -> list:
    """``tilewright build-check`` rows (label, defines, dynamic smem, per-build markers) of BUILD_CHECK_BUILDS,
    build-only FP8 and 2-CTA variants included."""
    return gemm_common.build_check_rows(BUILD_CHECK_BUILDS, BUILD_CHECK_VARIANTS, build_markers)


def pick_variant(M: int, N: int, K: int) -> Variant:
    """The variant for an (M, N, K) problem; TILEWRIGHT_CUDA_SM100_VARIANT forces one by name."""
    return gemm_common.pick_by_size(VARIANTS, "TILEWRIGHT_CUDA_SM100_VARIANT", SMALL_M_VARIANT, DEFAULT_VARIANT, M)


def kernel_descriptors(v: Variant, a_mn: bool, b_mn: bool, dtype) -> tuple[int, int, int]:
    """(instruction descriptor, A smem-descriptor high bits, B smem-descriptor high bits) for one build."""
    fmt = "float16" if dtype == torch.float16 else "bfloat16"
    return (desc.instr_desc(BM * v.pair, v.bn, fmt, a_mn=a_mn, b_mn=b_mn, cta_group=v.pair),
            desc.operand_desc_hi(a_mn), desc.operand_desc_hi(b_mn))


def kernel_descriptors_fp8(v: Variant, a_format: str = "e4m3", b_format: str | None = None) -> tuple[int, int, int]:
    """(instruction descriptor, A / B smem-descriptor high bits) of an FP8 build (kind::f8f6f4, both K-major). The
    smem descriptors equal the 16-bit K-major ones: a row is still one 128-byte swizzle row, 8 rows per 1024-B atom."""
    if not v.fp8:
        raise ValueError(f"{v.name} is not an FP8 variant")
    return (desc.instr_desc(BM * v.pair, v.bn, a_format, b_format, kind="f8f6f4", cta_group=v.pair),
            desc.operand_desc_hi(False),
            desc.operand_desc_hi(False))


def tma_boxes(v: Variant) -> tuple[tuple[int, int], tuple[int, int]]:
    """TMA boxes (inner K extent, rows) in elements for a K-major build's A (K, M) and B (K, N) maps, 128B swizzle:
    one 128-byte swizzle row of K (64 16-bit or 128 fp8 elements, so an FP8 stage has the 16-bit stage's bytes and
    smem layout); a 2-CTA build's CTA loads BN / 2 rows of B."""
    return (desc.k_block("f8f6f4" if v.fp8 else "f16"), BM), (desc.k_block("f8f6f4" if v.fp8 else "f16"),
                                                             v.bn // v.pair)



def grid_ctas(v: Variant, sms: int, tiles: int) -> int:
    """Persistent grid size: one CTA per SM, at most one per tile (a tile is a CTA pair for 2-CTA builds); a
    multiple of the cluster size, which a cluster launch requires."""
    return v.pair * max(1, min(sms // v.pair, tiles))


def constraints(a, b, bias=None, residual=None, epilogue=None) -> tuple[bool, str]:
    """Whether the tcgen05 kernel accepts these inputs (the GEMM families' TMA rules), and why not."""
    return gemm_common.operand_rules(a, b, bias, residual, "tcgen05")


def preferred(M: int, N: int, K: int, residual: bool = False) -> tuple[bool, str]:
    """No sm_100 measurement exists: the sm_90 win region stands in, and the reason says so."""
    return gemm_common.stand_in(gemm_sm90.preferred, "tcgen05", MEASURED_ON, M, N, K, residual)


# ------------------------------------------------------------------------------------------------ launch
_prepared: dict = {}


def launch_sm100_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *, bias=None, residual=None,
                      activation=0, variant: Variant | str | None = None, tile_order: str | int = "grouped",
                      group: int = 8, num_ctas: int | None = None) -> torch.Tensor:
    """``out = act(a @ b + bias) + residual`` with the tcgen05 kernel; arguments as
    :func:`.gemm_sm90.launch_cuda_gemm`."""
    return gemm_common.launch_family("tcgen05 gemm", VARIANTS, pick_variant, _prepared, _prepare, a, b, out, bias,
                                     residual, activation, variant, tile_order, group, num_ctas, out_align=16,
                                     threads=THREADS)


def _prepare(a, b, out, v: Variant, bias, res_ptr, rs, res_period, activation, tile_order, group, num_ctas):
    M, K = a.shape
    N = b.shape[1]
    major, minor = torch.cuda.get_device_capability(a.device)
    arch = f"sm_{major}{minor}a"  # tcgen05 is arch-specific: sm_100a / sm_103a
    # the A box's M extent is v.bm == BM
    _, fn, tm_a, tm_b, a_mn, b_mn, sms = gemm_common.build_and_map_operands(SOURCE, KERNEL, arch, a, b, v,
                                                                            activation, bias, res_ptr)
    idesc, a_hi, b_hi = kernel_descriptors(v, a_mn, b_mn, a.dtype)
    tiles = -(-M // BM) * -(-N // v.bn)
    grid = num_ctas or min(sms, tiles)  # one CTA per SM (its smem ring takes the SM)
    args = gemm_common.direct_store_args(tm_a, tm_b, out, bias, res_ptr, rs, res_period, M, N, K, tile_order, group) + \
        [ctypes.c_uint32(idesc), ctypes.c_uint64(a_hi), ctypes.c_uint64(b_hi)]
    return fn, grid, args


# ------------------------------------------------------------------------------------------------ router record
GUARD = Guard("tcgen05 GEMM", "tcgen05 ", MEASURED_ON)
FAMILY = gemm_common.GemmFamily(GUARD, constraints, pick_variant, launch_sm100_gemm, preferred)
ready, try_launch = FAMILY.ready, FAMILY.try_launch

register(FAMILY.backend("gemm_sm100", "sm_100a tcgen05 + TMEM GEMM", (10,), env=("TILEWRIGHT_CUDA_SM100_VARIANT",)))
