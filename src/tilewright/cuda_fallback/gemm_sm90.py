"""Host side of the Hopper WGMMA GEMM (``gemm_sm90.cu``): variants, measured preference, launch, and its record.

Entry points:
* :func:`cuda_gemm` - ``act(a @ b + bias) + residual`` on new output; the benchmark's CUDA column.
* :func:`launch_cuda_gemm` - the same into a given ``out`` with the op layer's (R0, P, N) residual.
* :func:`constraints` - why these tensors can or cannot take this kernel (device-independent; the router's filter).
* :func:`preferred` - the measured win region (H200), which the sm_100 / sm_120 families borrow as a stand-in.
* :func:`ready` - constraints + toolchain + a first-use self-check of the variant on this device model.
* :func:`try_launch` - the op layer's entry: launches, or returns False (after one warning on a failure) so the
  caller falls back to Triton; never raises.

What the GEMM families share (operand rules, launch arguments, tensor maps, self-check) is
:mod:`.runtime.gemm_common`; the registry record is at the bottom.
"""
from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass

import torch

from ..backends import Measurement, register
from .._env import REFERENCE_SMS, SMEM_OPTIN_BYTES, sm_count
from .runtime import gemm_common, launch
from .runtime.gemm_common import ACTIVATIONS, TILE_ORDERS  # noqa: F401 - part of this module's launch contract
from .runtime.guard import Guard, relative_error, run_self_check, synchronize

SOURCE = "gemm_sm90.cu"
KERNEL = "tw_gemm_sm90"
SMEM_LIMIT = SMEM_OPTIN_BYTES


@dataclass(frozen=True)
class Variant:
    """One compiled configuration: CTA tile, ring depth, pingpong or cooperative consumers."""

    bm: int
    bn: int
    stages: int
    coop: bool = False

    @property
    def name(self) -> str:
        return f"{'coop' if self.coop else 'pp'}{self.bm}x{self.bn}s{self.stages}"

    @property
    def wm(self) -> int:
        return self.bm // 2 if self.coop else self.bm

    def smem_bytes(self) -> int:
        # alignment slack, the stages, two output staging tiles, full/empty barriers, two residual barriers, two
        # bias slices (one per consumer)
        return (1024 + self.stages * (self.bm + self.bn) * 128 + 2 * self.wm * self.bn * 2 + 16 * self.stages + 16
                + 2 * self.bn * 2)

    def defines(self, a_mn: bool, b_mn: bool, fp16: bool, act: int = 0, bias: bool = False,
                res: bool = False) -> dict:
        """-D macros of one build: this variant, the operand layouts, the dtype and the fused epilogue."""
        return {"TW_BM": self.bm, "TW_BN": self.bn, "TW_STAGES": self.stages, "TW_COOP": int(self.coop),
                "TW_A_MN": int(a_mn), "TW_B_MN": int(b_mn), "TW_FP16": int(fp16), "TW_ACT": int(act),
                "TW_BIAS": int(bias), "TW_RES": int(res)}


VARIANTS = {v.name: v for v in (
    Variant(128, 128, 4), Variant(128, 128, 5), Variant(64, 256, 4),
    Variant(128, 256, 3, coop=True), Variant(256, 128, 3, coop=True),
    # 192-column tiles for wave balancing: the persistent grid's last wave is as full as the tile count allows, and
    # at 3000 x 5120 (24 x 20 = 480 tiles of 128 x 256: 3.64 waves on 132 SMs, the fourth 64% full - every variant
    # above ran 1.068-1.20x cuBLAS there, 1.010x at 3000 x 4096 whose 384 tiles fill 2.91 waves) 128 x 192 tiles make
    # 24 x 27 = 648 (4.91 waves): 98% of the SMs busy to the end against 91%, for 10% less operand reuse a tile (its
    # B tile 75% of 256's). Four stages (210 KB of shared memory). Picked where the waves say so (wave_balanced).
    Variant(128, 192, 4, coop=True),
)}
# Variants not yet run on a GPU: only a caller that names one runs it (the variant argument, the variable); neither
# the static pick nor the tuner's sweep (tools/tuner.py) - a user's tune must not be a kernel's first run. (Empty
# since the 192-column tile's first GPU run, session 35: its GPU tests and the wave A/B below.)
AB_ONLY: frozenset = frozenset()


@dataclass(frozen=True)
class SwitchedVariant(Variant):
    """A tile variant of this kernel body built with one epilogue switch on (``switch`` = 1, named ``name + suffix``):
    the builds that keep the plain GEMM's mainloop and tiles - the folded RMSNorm's rstd epilogue (TW_NORM_SUMSQ,
    rstd_gemm_sm90.py), the output's sums of squares (TW_SUMSQ_OUT, gemm_sumsq_sm90.py)."""

    switch: str = ""
    suffix: str = ""

    @property
    def name(self) -> str:
        return super().name + self.suffix

    def defines(self, a_mn: bool, b_mn: bool, fp16: bool, act: int = 0, bias: bool = False,
                res: bool = False) -> dict:
        """The plain variant's -D macros plus the switch."""
        return {**super().defines(a_mn, b_mn, fp16, act, bias, res), self.switch: 1}


def switched_variants(switch: str, suffix: str) -> dict:
    """Every plain variant as a :class:`SwitchedVariant`, keyed by the plain variant's name (so the plain GEMM's tile
    choice, :func:`pick_variant`, and ``TILEWRIGHT_CUDA_GEMM_VARIANT`` name the switched build's tile too)."""
    return {name: SwitchedVariant(v.bm, v.bn, v.stages, v.coop, switch, suffix) for name, v in VARIANTS.items()}
DEFAULT_VARIANT = "coop128x256s3"  # large problems (H200 run 2: 1.003-1.073x cuBLAS on the 8 LLM/square shapes)
SMALL_M_VARIANT = "pp128x128s5"    # M <= 256: fewer, smaller tiles; the fastest variant on decode16/decode128
# A fused residual takes the pingpong 128 x 128 tile at every size (GemmFamily.residual_launch). Why: the cooperative
# tiles share each tile between both consumers, so its epilogue - the residual's staging-tile round trip, the bias,
# the activation - runs while no wgmma does; a pingpong consumer's epilogue runs under the other's mainloop. Measured
# (H200, MEASURED_ON[8], interleaved graph replays, time / cuBLAS's plain GEMM, this tile vs the default's): with a
# residual 1.003-1.127 vs 1.027-1.215 on 8 rows (4096^3 to 16384 x 1024 x 1024, M 8000 among them; one tie, 16384 x
# 1024 x 4096 1.059 vs 1.058), with bias + GELU + residual 1.034-1.336 vs 1.141-1.662; the 4-stage build and the
# 192-column tile lost to it on every row, and on this tile the residual's TMA path beat the element loads on every
# row. A pos_embed (MEASURED_ON[9]) 1.025-1.104 vs 1.038-1.168 on 5 rows, the one loss 4096^3 (1.076 vs 1.063).
# Without a residual the default keeps the epilogue: bias + GELU alone measured the pingpong tile 0.98-1.04x the
# default's time (faster at K 1024 and 5632, slower at 4096^3 and 16384 x 2048 x 2048).
# Since the launcher compiles one residual path a build (the .cu's TW_RES_PATH; MEASURED_ON[10]) the cooperative tile
# gained most (its bias + GELU + residual 1.089-1.364x, was 1.138-1.682x), and this tile still leads on 5 of 7 rows:
# residual 0.980-1.106x vs 1.027-1.175x, bias + GELU + residual 1.024-1.308x vs 1.083-1.364x; where the default
# leads (4096^3, 16384 x 1024 x 4096) it is by 1.0-1.5%.
RESIDUAL_VARIANT = "pp128x128s5"
# compiled by build-check (CPU CI): the default and the other families, bf16 + one fp16 / K-major-B build;
# (variant, a_mn, b_mn, fp16, act, bias, res)
BUILD_CHECK_BUILDS = (
    ("coop128x256s3", False, True, False, 0, False, False), ("coop128x256s3", False, False, True, 0, False, False),
    ("pp128x128s5", False, True, False, 0, False, False), ("pp64x256s4", False, True, False, 0, False, False),
    # the residual epilogues as the launcher builds them, one path each for the residual (TW_RES_PATH: 1 the TMA
    # tile into the staging buffer, 2 element loads) and the bias (TW_BIAS_PATH: 1 the smem slice, 2 register loads):
    # the default variant, and the residual tile with GELU in fp16 - the register-heaviest epilogue
    ("coop128x256s3", False, True, False, 0, True, True, {"TW_RES_PATH": 1, "TW_BIAS_PATH": 1}),
    ("coop128x256s3", False, True, False, 0, True, True, {"TW_RES_PATH": 2, "TW_BIAS_PATH": 2}),
    ("pp128x128s5", False, True, True, 2, True, True, {"TW_RES_PATH": 1, "TW_BIAS_PATH": 1}),
    ("pp128x128s5", False, True, True, 2, True, True, {"TW_RES_PATH": 2, "TW_BIAS_PATH": 2}),
    # the 192-column tile (both B layouts: a three-box N-major stage, a 192-row K-major box), with the residual
    ("coop128x192s4", False, True, False, 0, True, True, {"TW_RES_PATH": 1, "TW_BIAS_PATH": 1}),
    ("coop128x192s4", False, False, False, 0, False, False),
    # the gated-linear epilogue (TW_GLU: B's stage in two halves, silu(gate) * up): its tile (GLU_VARIANT) on a
    # K-major fused gate/up weight (the nn.Linear layout), the cooperative tile in fp16 on an N-major B
    ("pp128x128s5", False, False, False, 0, False, False, {"TW_GLU": 1}),
    ("coop128x256s3", False, True, True, 0, False, False, {"TW_GLU": 1}),
    # the direct store of odd-pitch outputs (TW_STORE_DIRECT, :func:`direct_store`): the default tile, and the
    # residual tile with its TMA-path residual (whose loads into the staging buffer follow the stores' reads)
    ("coop128x256s3", False, True, False, 0, False, False, {"TW_STORE_DIRECT": 1}),
    ("pp128x128s5", False, True, False, 0, True, True, {"TW_RES_PATH": 1, "TW_BIAS_PATH": 1, "TW_STORE_DIRECT": 1}),
)
BUILD_CHECK_ARCHS = ("sm_90a",)
BUILD_CHECK_MARKERS = ("HGMMA", "UTMALDG", "USETMAXREG", "STSM")  # wgmma, TMA in, setmaxnreg, stmatrix
# the output's way out: the TMA store, or (TW_STORE_DIRECT) 16-byte shared loads and global stores
STORE_MARKERS = {0: ("UTMASTG",), 1: ("LDS.128", "STG.E.NA.128")}


def build_check_builds() -> list:
    """``tilewright build-check`` rows (label, defines, dynamic smem, SASS markers of the row's store path) of
    BUILD_CHECK_BUILDS."""
    return [row + (STORE_MARKERS[row[1].get("TW_STORE_DIRECT", 0)],)
            for row in gemm_common.build_check_rows(BUILD_CHECK_BUILDS, VARIANTS)]


# Wave balance. The kernel's grid is persistent (one CTA per SM walking the tiles), so a GEMM costs about
# ceil(tiles / SMs) tile-times, and a 128 x 192 tile's time is ~192/256 of a 128 x 256 one's (same mainloop per
# column; measured per-FLOP efficiency 0.97-1.01 of the wide tile's). WAVE_VARIANT runs where that model says the
# default's last, partly empty wave costs at least WAVE_MIN_GAIN more: ceil(t256 / SMs) * 256 >= 1.04 * ceil(t192 /
# SMs) * 192. H200 (132 SMs), both tiles with the plain and the rstd epilogue in one process, interleaved graph
# replays (perf/results/h200/gemm/wave_tile_ab_2026-11-29_s35.txt, 12 rows): the model's ratio against the measured
# 256 / 192 time - 3000 x 5120 x 5120 1.067 vs 1.061 (rstd 1.050), 6000 x 5120 x 5120 1.067 vs 1.070 (1.060),
# 3000 x 5000 x 4000 1.067 vs 1.007 (0.992; a K tail slows both tiles there), 3000 x 4096 / 8192 x 6144 / 16384 x
# 3072 1.0 vs 0.996-1.006, 8192 x 4096 / 16384 x 2048 x 5632 0.97 vs 0.965-0.975, 2048 x 14336 0.93 vs 0.977,
# 4096^3 0.89 vs 0.897, 16384 x 1024 0.89 vs 0.860 (and a ninth of its columns padding). Only the first three pass
# the gain, none of the others - the rule loses nothing measured. The 4% margin: per-FLOP efficiency of the narrow
# tile varied 0.97-1.01 over those rows. Only from WAVE_MIN_WAVES of the default's tiles (every measured row had
# 2.9 or more): below, both grids are one or two partial waves, where a tile's time is its K loop's latency more than
# its columns - unmeasured, so the default stays.
WAVE_VARIANT = "coop128x192s4"
WAVE_MIN_GAIN = 1.04
WAVE_MIN_WAVES = 2


@functools.lru_cache(maxsize=4096)
def wave_balanced(M: int, N: int, sms: int) -> bool:
    """Whether WAVE_VARIANT's tiles fill ``sms`` SMs' waves enough better than the default's to pay (above)."""
    wide, narrow = VARIANTS[DEFAULT_VARIANT], VARIANTS[WAVE_VARIANT]

    def tiles(v: Variant) -> int:
        return -(-M // v.bm) * -(-N // v.bn)

    def wave_columns(v: Variant) -> int:  # waves x tile columns: the model's time, in one tile row's columns
        return -(-tiles(v) // sms) * v.bn
    return tiles(wide) >= WAVE_MIN_WAVES * sms and wave_columns(wide) >= WAVE_MIN_GAIN * wave_columns(narrow)


def _launch_sms() -> int:
    """The current CUDA device's SM count, REFERENCE_SMS before CUDA is initialized (CPU tests, planning without a
    GPU). Why the current device and not the operands': the pick takes (M, N, K) in every family's interface. A
    launch on another device of another SM count would take that count's tile - a slower choice, never a wrong one;
    and every caller that sizes a buffer by the tile (gemm_sumsq_sm90.partial_shape) asks in the same context as
    its launch, so the two agree."""
    return sm_count(torch.device("cuda")) if torch.cuda.is_initialized() else REFERENCE_SMS


def pick_variant(M: int, N: int, K: int, sms: int | None = None) -> Variant:
    """Static choice per shape (``TILEWRIGHT_CUDA_GEMM_VARIANT`` overrides): SMALL_M_VARIANT at M <= 256, the
    192-column tile where the waves pay (:func:`wave_balanced` on ``sms`` SMs, None: the current device's), else
    DEFAULT_VARIANT."""
    if M > 256 and not os.environ.get("TILEWRIGHT_CUDA_GEMM_VARIANT") and wave_balanced(
            M, N, _launch_sms() if sms is None else sms):
        return VARIANTS[WAVE_VARIANT]
    return gemm_common.pick_by_size(VARIANTS, "TILEWRIGHT_CUDA_GEMM_VARIANT", SMALL_M_VARIANT, DEFAULT_VARIANT, M)


# Measured preference (router, automatic mode), from one H200 run with Triton's default config and cuBLAS beside it
# (MEASURED_ON[0]): this kernel was faster on every suite shape with full 64-row / 128-column tiles and M >= 128 (all
# eight LLM/square shapes, decode128: 157 vs 73 TF/s), Triton on decode16 (22 vs 19) and on `odd` (3000x5000x4000:
# 549 vs 511). Outside that region Triton keeps the default.
# Updated by the tuned side-by-side run (MEASURED_ON[1]): with Triton's decode defaults, decode128 runs 0.84x cuBLAS
# in Triton and 0.60x in this kernel, so M <= 256 stays with Triton.
# A fused residual (MEASURED_ON[2]): this kernel read it with 2-byte loads after its mainloop (0.82-0.98x
# cuBLAS+add), Triton's chunked epilogue hid it (0.99-1.14x), so a residual went to Triton. Since the epilogue loads
# bias and residual in batches ahead of its stores, and a residual whose rows are evenly strided comes by TMA into the
# staging tile during the mainloop (MEASURED_ON[6], time / plain cuBLAS GEMM at M 16384, CUDA vs Triton): K 5632
# 1.064 vs 1.144, K 4096 1.227 vs 1.252 (with bias) and 1.142 vs 1.223, K 2048 1.204 vs 1.266, K 1024 1.634 vs
# 1.479; a pos_embed repeated over the batch, K 768: 1.559 vs 2.043. Routing residuals from K 2048 here measured
# those GEMMs faster, but the ViT-L B8 step's fwd+bwd ran 4.95 ms in that run against 4.42 in the run before it
# (forward 1.29 vs 1.31; Llama unchanged) - unexplained, and an in-process A/B could not be run in that session, so
# a residual kept Triton (perf/LOG.md, session 16), except one repeated over the batch (a pos_embed: 25% faster here,
# no such GEMM in the ViT step above the region's FLOPs floor).
# H200, in-process (MEASURED_ON[7]: CUDA-graph replays interleaved, L2 flushed, bf16, the model benches' residual
# GEMMs): this kernel / Triton with a residual of one row per output row 1.105x at 16384 x 2048 x 2048 (Llama wo),
# 1.031x at K 5632 (down), 1.170x at 16384 x 1024 x 1024 (ViT-L proj), 1.008x at K 4096 (fc2), 1.064 / 1.022x at 8192
# x 4096 x 4096 / 14336; Triton ran level with cuBLAS's addmm (residual as C) and F.linear + add. The model-level A/B
# the session-16 doubt asked for (both routes in one process, two runs; perf/LOG.md, session 29): Llama B8 forward
# +0.6-3.0%, compiled forward + backward +2.8-4.8%, ViT-L B8 -1.5 to +6.7% (one row below: compiled forward in one
# run); the eager Llama training step, host-exposed, 1.1 / 4.5% slower by wall in both runs, yet 2% less GPU time
# under the profiler with equal walls - not settled. RESIDUAL_ROWS: such residuals take this kernel in its region
# (False: Triton, as before).
RESIDUAL_ROWS = True
MEASURED_ON = (
    Measurement("H200", "perf/results/h200/cuda_gemm_2026-11-26.csv", "2026-11-26"),
    Measurement("H200", "perf/results/h200/2026-11-26/gemm.csv", "2026-11-26"),
    Measurement("H200", "perf/results/h200/gemm_default_20261126-0146_v3.csv", "2026-11-26"),
    Measurement("H100", "perf/results/h100/model/profile_2026-11-26.txt", "2026-11-26"),
    Measurement("H100", "perf/results/h100/model/profile_prefill_2026-11-26_1830_dense_grad.txt", "2026-11-26"),
    Measurement("H100", "perf/results/h100/model/gemm_floor_2026-11-27_0205_ab_floor36.csv", "2026-11-27"),
    Measurement("H100", "perf/results/h100/gemm/epilogue_loads_2026-11-27_2100.txt", "2026-11-27"),
    Measurement("H200", "perf/results/h200/gemm/residual_cublas_ab_2026-11-29_0845.txt", "2026-11-29"),
    Measurement("H200", "perf/results/h200/gemm/epilogue_paths_ab_s39.txt", "2026-12-02"),
    Measurement("H200", "perf/results/h200/gemm/epilogue_floor_s39.txt", "2026-12-02"),
    Measurement("H200", "perf/results/h200/gemm/epilogue_code_size_ab_s39.txt", "2026-12-02"),
)
PREFER_MIN_M = 257
PREFER_MIN_N = 1024
PREFER_MIN_K = 512
# Host cost (MEASURED_ON[3], MEASURED_ON[4]): while this kernel's launch path re-encoded its tensor maps every call
# (130-450 us of Python in a model, no eager replay) the floor was raised from 2**36 to 2**38, so the ViT-L step's ten
# 100-200 GFLOP GEMMs took Triton's replayed launches instead. Its launches replay now (runtime.launch.BoundCudaLaunch,
# ~10 us above Triton's), so the floor is back at 2**36 (MEASURED_ON[5]: ViT-L B8 x S2048 forward 1.360 / 1.365 ms
# at 2**38 -> 1.334 / 1.340 ms at 2**36, two rounds each in one process order; fwd+bwd within the host noise).
PREFER_MIN_FLOPS = 2**36


def preferred(M: int, N: int, K: int, residual: bool | str = False,
              min_flops: int = PREFER_MIN_FLOPS) -> tuple[bool, str]:
    """Whether the router's automatic choice should take this kernel for an (M, N, K) problem (with a fused
    residual when ``residual``: ``"repeated"`` for one whose rows repeat over the batch, a pos_embed), and why: the
    measured win region. ``min_flops``: the host-bound floor of the caller's launch path (the RMSNorm-GEMM build
    passes its own)."""
    if residual and residual != "repeated" and not RESIDUAL_ROWS:
        return False, "a fused residual of one row per output row stays on Triton (RESIDUAL_ROWS is off)"
    region = (f"M >= {PREFER_MIN_M}, N >= {PREFER_MIN_N}, K >= {PREFER_MIN_K}, M % 64 == 0, N % 128 == 0, "
              f"2MNK >= {min_flops / 1e9:.0f} GFLOP")
    if M >= PREFER_MIN_M and N >= PREFER_MIN_N and K >= PREFER_MIN_K and M % 64 == 0 and N % 128 == 0:
        if 2 * M * N * K < min_flops:
            return False, (f"({M}, {N}, {K}) is outside the measured win region ({region}): "
                           f"{2 * M * N * K / 1e9:.1f} GFLOP is host-bound, where Triton's eager replay costs a "
                           "fraction of this kernel's launch path")
        return True, f"({M}, {N}, {K}) is in the measured win region ({region})"
    return False, f"({M}, {N}, {K}) is outside the measured win region ({region}); Triton is faster there"


def constraints(a: torch.Tensor, b: torch.Tensor, bias=None, residual=None, epilogue=None) -> tuple[bool, str]:
    """Whether the kernel can take these operands at all (dtype, rank, TMA alignment), and why not."""
    return gemm_common.operand_rules(a, b, bias, residual, "WGMMA")


# ------------------------------------------------------------------------------------------------ launch
def launch_cuda_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *, bias=None, residual=None,
                     activation=0, variant: Variant | str | None = None, tile_order: str | int = "grouped",
                     group: int = 16, num_ctas: int | None = None) -> torch.Tensor:
    """``out = act(a @ b + bias) + residual`` with the sm_90a kernel (no checks beyond :func:`constraints`).

    a: (M, K), b: (K, N), out: (M, N) row-major; residual: (R0, P, N) with R0 * P == M (row r reads
    residual[r // P, r % P]) or None; activation: a name or an ACTIVATIONS code; tile_order: a TILE_ORDERS name or
    code (group must be a power of two for morton/hilbert). Grouped-16 won 6 of the 8 large suite shapes on H200.
    """
    return gemm_common.launch_family("cuda gemm", VARIANTS, pick_variant, _prepared, prepare, a, b, out, bias, residual,
                                     activation, variant, tile_order, group, num_ctas, out_align=16, threads=384)


_prepared: dict = {}  # launch-ready (function, grid, kernel arguments) per prepared_key (runtime.launch.launch_cached)


def prepare(a, b, out, v: Variant, bias, res_ptr, rs, res_period, activation, tile_order, group, num_ctas,
            source: str = SOURCE, kernel: str = KERNEL, residual_tma: bool = True, glu: bool = False) -> tuple:
    """(function, grid, kernel arguments) of one launch of ``kernel`` in ``source`` - this kernel body, or a build
    of it such as rmsnorm_gemm_sm90.cu, which appends its own arguments: the A/B/out tensor maps, the epilogue,
    the tile order and the pingpong pairing. ``residual_tma``: whether the build can read the residual through a
    TMA map (the kernel's RES_TMA; off in the RMSNorm builds, which get the element loads' arguments) - and so
    whether its epilogue paths are compiled in (:func:`epilogue_paths`). ``glu``: the gated-linear build (the .cu's
    TW_GLU): b holds [gate | up] over 2N columns for out's N, each tile's B stage two boxes of v.bn / 2 rows."""
    M, K = a.shape
    N = b.shape[1] // 2 if glu else b.shape[1]
    res_rows = residual_map_rows(M, N, v, res_ptr, rs, res_period) if residual_tma else 0
    defines = epilogue_paths(bias, res_ptr, res_rows, residual_tma)
    if glu:
        defines["TW_GLU"] = 1
    direct = source == SOURCE and not glu and direct_store(out)
    if direct:
        defines["TW_STORE_DIRECT"] = 1
    drv, fn, tm_a, tm_b, _, _, sms = gemm_common.build_and_map_operands(
        source, kernel, "sm_90a", a, b, v, activation, bias, res_ptr, extra_defines=defines,
        b_box_rows=v.bn // 2 if glu else None)
    if direct:  # (the map is not read: the pointer argument below holds out's role)
        tm_c = launch.TensorMap()
    else:
        with torch.cuda.device(a.device):
            tm_c = launch.tag(drv.encode_tiled(launch.tma_dtype(a.dtype), out.data_ptr(), (N, M),
                                               (out.stride(0) * 2,), (64, v.wm), 128), "c_ptr")
    tiles = -(-M // v.bm) * -(-N // (v.bn // 2 if glu else v.bn))
    pair = (not v.coop) and tiles >= 2 * sms
    grid = num_ctas or min(sms, -(-tiles // (2 if pair else 1)))
    epilogue = gemm_common.epilogue_args(bias, res_ptr, rs, res_period, M, N, K)
    if res_rows:
        with torch.cuda.device(a.device):
            tm_r = launch.tag(drv.encode_tiled(launch.tma_dtype(a.dtype), res_ptr, (N, res_rows), (rs[1] * 2,),
                                               (64, v.wm), 128), "res_ptr")
        epilogue[1] = ctypes.c_uint64(res_ptr)  # (not read by the kernel then: the map holds the residual's role)
    else:
        tm_r = launch.TensorMap()
    args = [tm_a, tm_b, tm_c, *epilogue, ctypes.c_int32(activation), ctypes.c_int32(tile_order),
            ctypes.c_int32(group), ctypes.c_int32(int(pair)), tm_r, ctypes.c_int32(res_rows)]
    if direct:
        args += [launch.pointer("c_ptr", out), ctypes.c_int64(out.stride(0))]
    return fn, grid, args


# Output row pitches (and bases) the TMA store writes in whole 128-byte lines; others take the direct store.
STORE_LINE_BYTES = 128


def direct_store(out: torch.Tensor) -> bool:
    """Whether a plain GEMM launch writes ``out`` by the consumers' own 16-byte stores (the .cu's TW_STORE_DIRECT
    says why) instead of the TMA store: a base or, over more than one row, a row pitch that is no multiple of
    :data:`STORE_LINE_BYTES` (e.g. a contiguous output with N % 64 != 0 in 16 bits). Both ways store the same
    values; the choice is speed only (the launch family already requires 16-byte aligned bases and pitches)."""
    return _off_line_grid(out.data_ptr(), out.shape[0], out.stride(0) * out.element_size())


def direct_store_contiguous(M: int, N: int, element_size: int) -> bool:
    """:func:`direct_store` of a new contiguous (M, N) output (CUDA allocations start on the grid), from its shape
    alone - e.g. which builds a tune of (M, N, K) will launch."""
    return _off_line_grid(0, M, N * element_size)


def _off_line_grid(base: int, rows: int, pitch_bytes: int) -> bool:
    return base % STORE_LINE_BYTES != 0 or (rows > 1 and pitch_bytes % STORE_LINE_BYTES != 0)


# ------------------------------------------------------------------------------------------------ gated linear
# The gated-linear build's tile: the pingpong 128 x 128 (64 output columns a tile). Why: one consumer's epilogue (the
# silu, the product, the stores) runs under the other's mainloop, where the cooperative tiles share each tile and run
# it while no wgmma does. Measured (H200, interleaved graph replays, perf/results/h200/gemm/swiglu_linear_s40.txt):
# 1030 vs 1087 us at 16384 x F 5632 x K 2048 (cuBLAS's plain (M, 2F) GEMM alone: 1087), 254 vs 263 at 4096 rows,
# 2740 vs 2822 at 8192 x 14336 x 4096 (cuBLAS 2743) - 0.95-1.00x cuBLAS's GEMM without the SwiGLU; pp64x256s4
# 1.00-1.05x.
GLU_VARIANT = "pp128x128s5"


def glu_variant(M: int, N2: int, K: int) -> Variant:
    """The tile of a gated-linear launch whose B has ``N2`` (= 2N) columns: GLU_VARIANT, or the variant
    ``TILEWRIGHT_CUDA_GEMM_VARIANT`` names when its columns halve into whole 64-column chunks (128 or 256)."""
    forced = os.environ.get("TILEWRIGHT_CUDA_GEMM_VARIANT")
    if forced and VARIANTS[forced].bn % 128 == 0:
        return VARIANTS[forced]
    return VARIANTS[GLU_VARIANT]


def glu_constraints(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, str]:
    """Whether the gated-linear build can take ``a`` (M, K) and ``b`` (K, 2N) = [gate | up]: the plain GEMM's operand
    rules, an even column count, and out rows (N elements) of whole 16 bytes (the TMA store)."""
    if b.dim() == 2 and b.shape[1] % 2:
        return False, f"b has {b.shape[1]} columns: [gate | up] needs an even count"
    if b.dim() == 2 and (b.shape[1] // 2 * a.element_size()) % 16:
        return False, f"N = {b.shape[1] // 2}: output rows are not a multiple of 16 bytes (TMA store)"
    ok, why = constraints(a, b)
    if not ok:
        return ok, why
    return True, "bf16/fp16 with 16-byte aligned strides (TMA), [gate | up] columns"


_prepared_glu: dict = {}


def launch_cuda_swiglu(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *, variant: Variant | str | None = None,
                       tile_order: str | int = "grouped", group: int = 16, num_ctas: int | None = None) -> torch.Tensor:
    """``out = silu(a @ b[:, :N]) * (a @ b[:, N:])`` with the gated-linear build (the .cu's TW_GLU): a (M, K), b (K,
    2N) holding [gate | up] (a fused gate/up weight W (2N, K) as ``W.t()``), out (M, N) row-major, 16-byte aligned.
    Raises ValueError naming what does not fit; no checks beyond :func:`glu_constraints` and out's layout."""
    ok, why = glu_constraints(a, b)
    if not ok:
        raise ValueError(f"cuda swiglu gemm: {why}")
    M, K = a.shape
    N = b.shape[1] // 2
    gemm_common.check_out("cuda swiglu gemm (N = b's columns / 2)", a, out, M, N, 16)
    v = VARIANTS[variant] if isinstance(variant, str) else (variant or glu_variant(M, 2 * N, K))
    if v.bn % 128:
        raise ValueError(f"cuda swiglu gemm: variant {v.name}: the gate and up halves need a tile of 128 or 256 "
                         "columns")
    tile_order = gemm_common.tile_order_code("cuda swiglu gemm", tile_order, group)
    key = gemm_common.prepared_key(a, b, out, v, None, tile_order, group, num_ctas, "glu")
    launch.launch_cached(_prepared_glu, key,
                         lambda: prepare(a, b, out, v, None, 0, (0, 0, 0), 1, 0, tile_order, group, num_ctas,
                                         glu=True),
                         a.device, 384, v.smem_bytes(), {"a_ptr": a, "b_ptr": b, "c_ptr": out})
    return out


def _glu_self_check(device, v: Variant, b_mn: bool, dtype) -> tuple[bool, str]:
    """First-use check of the gated-linear build of ``v``: tails in M, N (a gate tile that reads past N into the up
    columns) and K, NaN-filled outputs, against the fp32 formula."""
    g = torch.Generator(device="cpu").manual_seed(4321)

    def measure(M, N, K):
        a = torch.randn(M, K, generator=g).to(device=device, dtype=dtype)
        w = (torch.randn(2 * N, K, generator=g) / K ** 0.5).to(device=device, dtype=dtype)
        b = w.t().contiguous() if b_mn else w.t()
        out = torch.full((M, N), float("nan"), device=device, dtype=dtype)
        launch_cuda_swiglu(a, b, out, variant=v)
        h = a.float() @ w.float().t()
        ref = torch.nn.functional.silu(h[:, :N]) * h[:, N:]
        synchronize(device)
        return {"relative error": (relative_error(out, ref), 2e-2)}

    shapes = ((296, 136, 200), (8, 64, 72), (2 * v.bm + 8, 3 * (v.bn // 2) + 8, 1000))
    return run_self_check(v.name + "-glu", ((f"({M}, {N}, {K})", lambda c=(M, N, K): measure(*c))
                                            for M, N, K in shapes))


def glu_ready(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, str]:
    """Constraints, toolchain and the first-use self-check of the gated-linear build this call would take (once per
    process and device model; a failure sends such calls to the unfused pair, with one warning)."""
    blocked = GLU_GUARD.blocked(glu_constraints(a, b))
    if blocked:
        return blocked
    v = glu_variant(a.shape[0], b.shape[1], a.shape[1])
    (b_first, _), _ = gemm_common.layout(b, "b")
    return GLU_GUARD.check(a.device, v.name + "-glu", (not b_first, a.dtype),
                       lambda: _glu_self_check(a.device, v, not b_first, a.dtype), fallback="the unfused GEMM + SwiGLU")


def try_launch_swiglu(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> bool:
    """The op layer's entry to :func:`launch_cuda_swiglu`: launches, or False after one warning on a failure (the
    caller then runs the unfused pair); never raises."""
    return GLU_GUARD.run(launch_cuda_swiglu, a, b, out)


def epilogue_paths(bias, res_ptr: int, res_rows: int, plain_epilogue: bool = True) -> dict:
    """The epilogue paths a launch's build compiles in, not chosen in the kernel (the .cu's TW_RES_PATH and
    TW_BIAS_PATH say why: the unused path's code slowed the mainloop): the residual's TMA tile where it has a map
    (``res_rows``), else its element loads; a 4-byte aligned bias's smem slice, else its register loads. Empty for
    the builds that read both element-wise anyway (``plain_epilogue`` False: the RMSNorm builds) and for an absent
    operand."""
    paths = {}
    if plain_epilogue and res_ptr:
        paths["TW_RES_PATH"] = 1 if res_rows else 2
    if plain_epilogue and bias is not None:
        paths["TW_BIAS_PATH"] = 1 if bias.data_ptr() % 4 == 0 else 2
    return paths


def residual_map_rows(M: int, N: int, v: Variant, res_ptr: int, rs, res_period: int) -> int:
    """Rows of the TMA map the kernel reads the residual through (row r at r % rows), or 0 for its element loads.

    The residual (R0, P, N) with strides rs, element (r, n) at (r // P, r % P, n): one map over M rows when its
    rows are evenly strided (R0 == 1, or batches back to back); over the P rows of one period when it repeats over
    the batch (rs[0] == 0, a pos_embed) and every consumer tile lies within a period (P % wm == 0). TMA needs unit
    column stride, a 16-byte aligned base and row stride; a row repeated for every output row (rs[1] == 0) is not
    a map."""
    if not res_ptr or rs[2] != 1 or res_ptr % 16 or rs[1] <= 0 or (rs[1] * 2) % 16 or rs[1] < N:
        return 0
    if rs[0] == 0 and res_period < M:
        return res_period if res_period % v.wm == 0 else 0
    return M if (res_period == M or rs[0] == res_period * rs[1]) else 0


def cuda_gemm(a: torch.Tensor, b: torch.Tensor, bias=None, residual=None, activation=None, **kw) -> torch.Tensor:
    """``activation(a @ b + bias) + residual`` -> new (M, N) tensor; residual broadcastable to (M, N)."""
    M, N = a.shape[0], b.shape[1]
    out = torch.empty((M, N), device=a.device, dtype=a.dtype)
    res3 = None if residual is None else torch.broadcast_to(residual, (M, N)).unsqueeze(0)
    return launch_cuda_gemm(a, b, out, bias=bias, residual=res3, activation=activation, **kw)


# ------------------------------------------------------------------------------------------------ router record
GUARD = Guard("CUDA GEMM", measured=MEASURED_ON)
# The gated-linear build's own switch: a failure there sends SwiGLU projections to the unfused pair and leaves the
# plain GEMM on
GLU_MEASURED_ON = (Measurement("H200", "perf/results/h200/gemm/swiglu_linear_pp_s40.txt", "2026-12-02"),)
GLU_GUARD = Guard("CUDA SwiGLU GEMM", "sm_90a SwiGLU GEMM ", GLU_MEASURED_ON, fallback="the unfused GEMM + SwiGLU")
def tuned_variants() -> dict:
    """The variants ``tilewright tune`` sweeps (tools/tuner.py) and a tuned launch may take (name -> variant): those
    that fit the shared memory, less the ones not yet run on a GPU (AB_ONLY)."""
    return {n: v for n, v in VARIANTS.items() if v.smem_bytes() <= SMEM_LIMIT and n not in AB_ONLY}


FAMILY = gemm_common.GemmFamily(GUARD, constraints, pick_variant, launch_cuda_gemm, preferred,
                                tuned_variants=tuned_variants(), variant_env="TILEWRIGHT_CUDA_GEMM_VARIANT",
                                residual_variant=VARIANTS[RESIDUAL_VARIANT])
ready, try_launch = FAMILY.ready, FAMILY.try_launch

register(FAMILY.backend("gemm_sm90", "sm_90a WGMMA pingpong GEMM", (9,), env=("TILEWRIGHT_CUDA_GEMM_VARIANT",)))
