"""Host side of the mma.sync GEMM (``gemm_sm120.cu``): the CUDA GEMM for sm_120/121 (RTX 50xx, RTX PRO 6000
Blackwell), which has neither WGMMA nor TMEM. Its instructions (TMA, mbarrier parity waits, ldmatrix, mma.sync)
all exist from sm_90 on, so it is also built for and tested on H100/H200 (where WGMMA is faster - its record serves
sm_12x only).

Same contract as :mod:`.gemm_sm90` (operands, (R0, P, N) residual, activations, tile orders); the difference is a
persistent grid sized from the occupancy API and direct fragment stores instead of a TMA store.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from ..backends import register
from . import gemm_sm90
from .runtime import gemm_common
from .runtime.guard import Guard

SOURCE = "gemm_sm120.cu"
KERNEL = "tw_gemm_mma"
SMEM_LIMIT = 101376  # sm_120: 99 KB per block
# No run on an sm_120/121 card yet. Runs of this code on H100/H200 as sm_90 code
# (perf/results/h200/sm120_gemm_on_sm90_2026-11-26.csv) do not count: they say nothing of its speed on its target.
MEASURED_ON = ()


@dataclass(frozen=True)
class Variant:
    """One compiled configuration: CTA tile, ring depth, consumer warp grid (plus one producer warp)."""

    bm: int
    bn: int
    stages: int
    warps_m: int = 2
    warps_n: int = 4

    @property
    def name(self) -> str:
        return f"mma{self.bm}x{self.bn}s{self.stages}"

    @property
    def threads(self) -> int:
        return 32 * (self.warps_m * self.warps_n + 1)

    def smem_bytes(self) -> int:
        return 1024 + self.stages * (self.bm + self.bn) * 128 + 16 * self.stages

    def defines(self, a_mn: bool, b_mn: bool, fp16: bool, act: int = 0, bias: bool = False,
                res: bool = False) -> dict:
        return {"TW_BM": self.bm, "TW_BN": self.bn, "TW_STAGES": self.stages, "TW_WARPS_M": self.warps_m,
                "TW_WARPS_N": self.warps_n, "TW_A_MN": int(a_mn), "TW_B_MN": int(b_mn), "TW_FP16": int(fp16),
                "TW_ACT": int(act), "TW_BIAS": int(bias), "TW_RES": int(res)}


VARIANTS = {v.name: v for v in (Variant(128, 128, 3), Variant(128, 128, 2), Variant(64, 128, 4))}
DEFAULT_VARIANT = "mma128x128s3"
SMALL_M_VARIANT = "mma64x128s4"
BUILD_CHECK_BUILDS = (  # (variant, a_mn, b_mn, fp16, act, bias, res)
    ("mma128x128s3", False, True, False, 0, False, False), ("mma128x128s3", False, False, True, 0, False, False),
    ("mma128x128s3", True, True, False, 2, True, True), ("mma128x128s2", False, True, False, 0, False, False),
    ("mma64x128s4", False, False, False, 4, True, False),
)
BUILD_CHECK_ARCHS = ("sm_120a", "sm_90a")  # its target, and the arch the project runs it on
BUILD_CHECK_MARKERS = ("HMMA", "LDSM", "UTMALDG")  # mma.sync, ldmatrix, TMA loads


def build_check_builds() -> list:
    """``tilewright build-check`` rows (label, defines, dynamic smem) of BUILD_CHECK_BUILDS."""
    return gemm_common.build_check_rows(BUILD_CHECK_BUILDS, VARIANTS)


def pick_variant(M: int, N: int, K: int) -> Variant:
    """The variant for an (M, N, K) problem; TILEWRIGHT_CUDA_MMA_VARIANT forces one by name."""
    return gemm_common.pick_by_size(VARIANTS, "TILEWRIGHT_CUDA_MMA_VARIANT", SMALL_M_VARIANT, DEFAULT_VARIANT, M)


def device_arch(device) -> str:
    """The arch to build for on ``device``: its own (sm_90, sm_120, sm_121...), no arch-specific 'a' features."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def constraints(a, b, bias=None, residual=None, epilogue=None) -> tuple[bool, str]:
    """Whether the mma.sync kernel accepts these inputs (the GEMM families' TMA rules), and why not."""
    return gemm_common.operand_rules(a, b, bias, residual, "mma.sync")


def preferred(M: int, N: int, K: int, residual: bool = False) -> tuple[bool, str]:
    """Automatic choice on sm_120: no measurement exists yet, so the sm_90 win region stands in for one."""
    return gemm_common.stand_in(gemm_sm90.preferred, "mma.sync", MEASURED_ON, M, N, K, residual)


# ------------------------------------------------------------------------------------------------ launch
_prepared: dict = {}


def launch_mma_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *, bias=None, residual=None,
                    activation=0, variant: Variant | str | None = None, tile_order: str | int = "grouped",
                    group: int = 8, num_ctas: int | None = None, arch: str | None = None) -> torch.Tensor:
    """``out = act(a @ b + bias) + residual`` with the mma.sync kernel; arguments as
    :func:`.gemm_sm90.launch_cuda_gemm`."""
    return gemm_common.launch_family("mma gemm", VARIANTS, pick_variant, _prepared, _prepare, a, b, out, bias, residual,
                                     activation, variant, tile_order, group, num_ctas, out_align=4, extra=(arch,))


def _occupancy(drv, fn, threads: int, smem: int) -> int:
    """CTAs per SM the driver can co-schedule (cuOccupancyMaxActiveBlocksPerMultiprocessor), at least 1."""
    n = ctypes.c_int()
    f = drv.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor
    f.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    drv.check(f(ctypes.byref(n), fn, threads, smem), "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    return max(1, n.value)


def _prepare(a, b, out, v: Variant, bias, res_ptr, rs, res_period, activation, tile_order, group, num_ctas, arch):
    M, K = a.shape
    N = b.shape[1]
    arch = arch or device_arch(a.device)
    drv, fn, tm_a, tm_b, _, _, sms = gemm_common.build_and_map_operands(SOURCE, KERNEL, arch, a, b, v, activation,
                                                                        bias, res_ptr)
    with torch.cuda.device(a.device):
        per_sm = _occupancy(drv, fn, v.threads, v.smem_bytes())
    tiles = -(-M // v.bm) * -(-N // v.bn)
    grid = num_ctas or min(sms * per_sm, tiles)  # persistent: every co-resident CTA slot, never more than tiles
    args = gemm_common.direct_store_args(tm_a, tm_b, out, bias, res_ptr, rs, res_period, M, N, K, tile_order, group)
    return fn, grid, args


def mma_gemm(a, b, bias=None, residual=None, activation=None, **kw) -> torch.Tensor:
    """``activation(a @ b + bias) + residual`` -> new (M, N) tensor; residual broadcastable to (M, N)."""
    M, N = a.shape[0], b.shape[1]
    out = torch.empty((M, N), device=a.device, dtype=a.dtype)
    res3 = None if residual is None else torch.broadcast_to(residual, (M, N)).unsqueeze(0)
    return launch_mma_gemm(a, b, out, bias=bias, residual=res3, activation=activation, **kw)


# ------------------------------------------------------------------------------------------------ router record
GUARD = Guard("mma.sync GEMM", "mma.sync ", MEASURED_ON)
FAMILY = gemm_common.GemmFamily(GUARD, constraints, pick_variant, launch_mma_gemm, preferred)
ready, try_launch = FAMILY.ready, FAMILY.try_launch

register(FAMILY.backend("gemm_sm120", "sm_120 ldmatrix + mma.sync GEMM", (12,), env=("TILEWRIGHT_CUDA_MMA_VARIANT",)))
