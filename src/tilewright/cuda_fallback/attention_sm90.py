"""Host side of the Hopper flash-attention forward (``attention_sm90.cu``): variants, constraints, launch, self-check.

The kernel writes ``out`` and the natural-log ``lse`` (fp32, contiguous (B, Hq, Sq)) exactly as the Triton forward
does, so ``ops/attention.py`` pairs it with the Triton backward.

Entry points:
* :func:`cuda_attention` - (out, lse) on new tensors; the benchmark's CUDA column.
* :func:`launch_attention` - the same into given ``out`` / ``lse``.
* :func:`constraints` - why these tensors can or cannot take this kernel (device-independent; the router's filter).
* :func:`preferred` - whether the router's automatic choice takes it (the measured table, H100).
* :func:`ready` - constraints + toolchain + first-use self-check of the variant on this device model.
* :func:`try_launch` - what the op layer calls: launches, or returns False (after one warning on a failure) so the
  caller falls back to Triton; never raises.
* :func:`launch_attention_varlen` / :func:`varlen_route` / :func:`try_launch_varlen` - the same kernel over packed
  variable-length batches (``TW_VARLEN`` builds; ``ops/varlen.py``).

Its registry record is at the bottom.
"""
from __future__ import annotations

import ctypes
import math
import os
from dataclasses import dataclass

import torch

from .._codes import Varlen
from .._env import SMEM_OPTIN_BYTES, sm_count
from .. import backends
from ..backends import Measurement, register
from .runtime import HALF_DTYPES, build, cuda_backend, launch
from .runtime.guard import Guard, relative_error, run_self_check, synchronize

SOURCE = "attention_sm90.cu"
KERNEL = "tw_attn_fwd_sm90"
HEAD_DIMS = (64, 128, 256)  # the builds (TW_HDIM); other head dims run on the next one up (build_head_dim)
SMEM_LIMIT = SMEM_OPTIN_BYTES
LOG2E = 1.4426950408889634
# Sq + Skv stay below this in every attention kernel of this package: they add row / key indices and the band's
# offsets (clamped to [-(Sq + 1), Skv + 1]) in 32-bit ints.
MAX_BAND_SPAN = 1 << 30


@dataclass(frozen=True)
class Variant:
    """One schedule of the kernel (see the .cu header): consumer warpgroups, pingpong, intra-warpgroup overlap, ring
    depth, persistent CTAs. Head dim, causal and dtype are further compile-time switches chosen per call (the head dims
    it builds at: ``head_dims``)."""

    name: str
    consumers: int
    pingpong: bool
    overlap: bool
    stages: int = 2
    block_n: int | None = None  # key block; None: 128, or 64 at head dim 256
    exp_fma: int | None = None  # every exp_fma-th 8-column chunk's exponentials on the FMA pipe; None: EXP_FMA_DEFAULT
    # TW_PERSISTENT: at most one CTA per SM, each walking the tiles (persistent_grid); dense launches of the overlap
    # schedule only (the .cu's static_assert; packed batches run variant c)
    persistent: bool = False

    @property
    def bm(self) -> int:
        """Q rows per CTA (64 per consumer warpgroup)."""
        return 64 * self.consumers

    @property
    def threads(self) -> int:
        """One producer warpgroup (TMA loads) plus the consumer warpgroups, 128 threads each."""
        return 128 * (self.consumers + 1)

    @property
    def head_dims(self) -> tuple:
        """The builds (TW_HDIM) this variant has: three consumers get 160 registers each, which hold S + P + O at
        head dim 64 only (the .cu's static_assert); key blocks over 128 build at head dim 128 only (at 64 the pinned
        overlap spilled 576-768 B with them, at 256 the key block is 64)."""
        if self.consumers == 3:
            return (64,)
        return (128,) if (self.block_n or 0) > 128 else HEAD_DIMS

    def bn(self, head_dim: int) -> int:
        """Key block: ``block_n``, else 128, or 64 for head dim 256 (O alone takes 128 registers per thread there)."""
        return 64 if head_dim > 128 else (self.block_n or 128)

    def pin_wait(self, head_dim: int) -> bool:
        """Whether the overlap schedule pins the PV wait after the softmax (TW_PIN_WAIT). ptxas hoists that wait
        above the exponentials otherwise; pinned, it needs S + P + O + softmax registers at once, which fits in 240
        at hdim 64 (key block 128) and hdim 128 with key block 64, not at hdim 128 x 128 or hdim 256 (C7512). Not
        with three consumers: in their 160 registers the pinned hdim-64 build spilled 320 B and serialised its wgmmas
        (C7512; nvcc 13.0), unpinned it fits (0 spills) - the other two warpgroups' GEMMs hide its softmax instead."""
        return self.overlap and self.consumers < 3 and (head_dim == 64 or (head_dim == 128 and self.bn(head_dim) == 64))

    def smem_bytes(self, head_dim: int) -> int:
        """Dynamic shared memory: Q tile + STAGES x (K + V) blocks + mbarriers (bar_q, full / empty K and V per
        stage, and the persistent builds' q_empty) + 1024 alignment slack."""
        return 1024 + self.bm * head_dim * 2 + 2 * self.stages * self.bn(head_dim) * head_dim * 2 + \
            (1 + 4 * self.stages + self.persistent) * 8

    def defines(self, head_dim: int, causal: bool, fp16: bool, softcap: bool = False, window: bool = False,
                upper_offset: bool = False) -> dict:
        """-D macros of one build of this variant (``causal``: the band's upper edge, ``upper_offset``: at an offset
        other than 0; ``window``: its lower edge; ``softcap``: the logit cap)."""
        defs = {"TW_HDIM": head_dim, "TW_BN": self.bn(head_dim), "TW_STAGES": self.stages,
                "TW_CONSUMERS": self.consumers, "TW_PINGPONG": int(self.pingpong), "TW_OVERLAP": int(self.overlap),
                "TW_CAUSAL": int(causal), "TW_FP16": int(fp16),
                # the soft cap's tanh adds live registers: with the pinned wait the hdim-64 build spilled
                "TW_PIN_WAIT": int(self.pin_wait(head_dim) and not softcap)}
        if softcap:  # only then: the builds without them keep their cache keys
            defs["TW_SOFTCAP"] = 1
        if window:
            defs["TW_WINDOW"] = 1
        if upper_offset:
            defs["TW_UPPER_OFFSET"] = 1
        exp_fma = self.exp_fma if self.exp_fma is not None else EXP_FMA_DEFAULT.get(head_dim, 0)
        if exp_fma:
            defs["TW_EXP_FMA"] = exp_fma
        if self.persistent:
            defs["TW_PERSISTENT"] = 1
        return defs


# Head dim -> every how many 8-column chunks of S take their exponentials on the FMA pipe (TW_EXP_FMA; see the .cu).
# Empty: measured on H100 (perf/results/h100/attention/exp_fma_2026-11-27_1400.txt) every fourth chunk ran the
# non-causal hdim-64 row 3% faster (0.657 vs 0.678 ms, within the run-to-run spread of other rows) and the causal
# rows 1-3% slower (their diagonal masking uses the same pipes); every second or eighth chunk lost everywhere.
EXP_FMA_DEFAULT: dict = {}


def build_head_dim(head_dim: int) -> int | None:
    """The build (TW_HDIM) a head dim runs on, or None: 64, or a multiple of 8 from 72 to 256 on the 128 / 256 build.

    Why a wider build computes a narrower head dim exactly: every global access of the kernel is a TMA box of 64
    columns, and the maps are encoded with the tensors' true head dim, so the columns past it are zero-filled on
    load (they add 0 to q k^T; P V computes zero columns for them) and clipped on the O store - the padding exists
    in shared memory and registers only, never as a copy of q / k / v in global memory. A multiple of 8 keeps every row
    16-byte aligned (TMA). Head dims below 64 stay with Triton (a box wider than the tensor's dim is not used)."""
    if head_dim == 64:
        return 64
    if head_dim % 8 or not 64 < head_dim <= 256:
        return None
    return 128 if head_dim <= 128 else 256


# Ordered from simplest to full, so a numerics failure on the device localises the bug.
VARIANTS = {v.name: v for v in (
    Variant("a", 1, False, False),  # one consumer warpgroup, sequential S -> softmax -> PV
    Variant("b", 2, True, False),   # + second warpgroup, pingpong on the QK^T sections
    Variant("b_free", 2, False, False),  # two warpgroups without the ordering barriers
    Variant("c", 2, True, True),    # + intra-warpgroup overlap (full FA3-style schedule)
    Variant("c64", 2, True, True, block_n=64),  # c with 64-key blocks: registers for the pinned overlap at hdim 128
    # c with 176- / 192-key blocks (hdim 128 only): fewer softmax rescales and pingpong hand-offs per key, the tile
    # FlashAttention-3 uses for hdim 128 without a mask; 0 spills (nvcc 13.0), 214 / 230 KB of shared memory. c176
    # runs where it measured faster than c (WIDE_KEYS_BY_HEAD_DIM, below); c192, within 0.5% of it, stays an A/B one.
    Variant("c176", 2, True, True, block_n=176),
    Variant("c192", 2, True, True, block_n=192),
    # c / c176 with persistent CTAs (issue 15: per-CTA fill and drain at 2k-4k tokens a head, 12-23 key blocks a
    # tile): gridDim.x = min(tiles, SMs) CTAs walk the tiles in the same order, the K / V ring running on across a
    # CTA's tiles. cp runs on short causal rows (PERSISTENT_BY_HEAD_DIM, below); c176p stays an A/B one.
    Variant("cp", 2, True, True, persistent=True),
    Variant("c176p", 2, True, True, block_n=176, persistent=True),
    Variant("b3", 3, True, False),  # b with three consumer warpgroups in a round-robin pingpong (hdim 64 only)
    Variant("c3", 3, True, True),   # c with three consumer warpgroups (hdim 64 only; the .cu header says why)
)}
DEFAULT_VARIANT = "c"
# compiled by build-check (CPU CI): every schedule at hdim 128 (the three-consumer ones at their hdim 64), plus the full
# one at the other head dims / causal / fp16
BUILD_CHECK_BUILDS = (("b", 128, False, False), ("c", 128, False, False),
                      ("c", 128, True, False), ("c", 64, True, True), ("c", 256, False, False),
                      ("c", 256, True, False), ("c64", 128, True, False), ("c", 128, True, False, True),
                      ("c", 256, True, False, True), ("c", 128, True, False, False, True, True),
                      ("c", 64, False, False, True, True),  # the four ending here: soft cap, band edges, both
                      ("c", 128, True, False, False, False, True, True),  # packed batches (varlen), causal
                      ("c", 256, False, False, False, False, False, True),
                      ("c3", 64, False, False), ("c3", 64, True, False), ("b3", 64, False, False),
                      ("c176", 128, False, False), ("c192", 128, False, True),
                      ("cp", 128, False, False), ("cp", 128, True, False),  # persistent CTAs
                      ("c176p", 128, False, False), ("c176p", 128, True, False))
BUILD_CHECK_ARCHS = ("sm_90a",)
# wgmma (SS for QK^T, register-A for PV), TMA in and out, setmaxnreg, stmatrix
BUILD_CHECK_MARKERS = ("HGMMA", "UTMALDG", "UTMASTG", "USETMAXREG", "STSM")


# Build head dim -> its default variant where that is not DEFAULT_VARIANT. Head dim 64: three consumer warpgroups.
# H200, the forward against variant c and cuDNN in one process, seven rows (causal or not, GQA, S 1024-16384):
# c3 1.08-1.22x c, 0.89-1.10x cuDNN where c ran 0.81-0.95x; out and LSE bit-equal to c's (each row's key blocks in the
# same order). Run: perf/results/h200/attention/consumers3_ab_2026-11-29_1137.txt
DEFAULT_BY_HEAD_DIM = {64: "c3"}

# Build head dim -> the wide-key-block variant, taken where it measured faster than the head dim's default: 176-key
# blocks at 128. H200, c176 against c and cuDNN in one process, forward, graph replays (perf/results/h200/attention/
# wide_key_rule_2026-11-29_1602.txt, 23 rows, B x S = 16k tokens, MHA and GQA 4): without a mask c176 / c = 0.99 at
# S 1024, 1.005 / 1.016 at 2048, 1.02 at 4096, 1.04-1.05 at 8192, 1.06 at 16384 (cuDNN 1.00 -> 1.05x at 8k), and
# with short query blocks on long key ranges 1.003 (Sq 512 / Skv 4096), 1.043 (1024 / 8192) but 0.983 (256 / 2048);
# causal 0.93 / 0.96-0.98 at 1024 / 2048 (the diagonal block masks more of a wider block, and short rows have few
# blocks to save hand-offs on), 1.010 at 4096, 1.03 at 8192, 1.04-1.05 at 16384. c192 ran within 0.5% of c176 (first
# run, seven rows: wide_key_blocks_2026-11-29_1540.txt), behind it on three of the four mask-free rows. Out and LSE
# within the fp32 reference's error as c's (not bit-equal: other block boundaries, other rescales). Only the plain
# masks: a window or a soft cap, unmeasured with the wide block, keep the default.
WIDE_KEYS_BY_HEAD_DIM = {128: "c176"}
WIDE_KEYS_MIN_KEYS = 4096  # without a mask: this many keys, any query rows
WIDE_KEYS_MIN_SQUARE = 2048  # without a mask: or this many of both
WIDE_KEYS_MIN_CAUSAL = 4096  # with the causal mask: this many of both


# Build head dim -> the persistent-CTA variant, taken on causal rows of PERSISTENT_CAUSAL_KEYS query rows and keys:
# there a causal tile's work runs from one key block to all of them, so the one-CTA-a-tile grid ends in a ragged tail
# of long tiles, and a CTA that walks on to its next tile keeps its K / V ring filling across the hand-over. H200,
# cp against c and cuDNN in one process, forward, graph replays, out and LSE bit-equal to c's (perf/results/h200/
# attention/persistent_ab_2026-11-29.txt, 16 rows, B x S = 16k tokens, MHA 16 and GQA 32/8): causal cp / c = 1.043 /
# 1.046 at S 1024, 1.031 / 1.007 at 2048, 0.974 / 0.978 at 4096 (where c176 runs), 0.94-0.97 at 8192; without a mask
# 0.976-0.999 everywhere (uniform tiles leave no tail to fill). Only the plain causal mask: a window or a soft cap,
# unmeasured with it, keep the default; packed batches have no persistent build.
PERSISTENT_BY_HEAD_DIM = {128: "cp"}
PERSISTENT_CAUSAL_KEYS = (1024, 2048)  # min and max of (query rows, keys) where it measured faster


def persistent_pays(causal: bool, sq: int, skv: int) -> bool:
    """Whether a forward of ``sq`` query rows on ``skv`` keys is where the persistent CTAs measured faster (above)."""
    lo, hi = PERSISTENT_CAUSAL_KEYS
    return causal and lo <= min(sq, skv) and max(sq, skv) <= hi


def wide_keys_pay(causal: bool, sq: int, skv: int) -> bool:
    """Whether a forward of ``sq`` query rows on ``skv`` keys is where the wide key blocks measured faster (above)."""
    if causal:
        return min(sq, skv) >= WIDE_KEYS_MIN_CAUSAL
    return skv >= WIDE_KEYS_MIN_KEYS or min(sq, skv) >= WIDE_KEYS_MIN_SQUARE


def pick_variant(head_dim: int | None = None, causal: bool | None = None, sq: int = 0, skv: int = 0,
                 plain_mask: bool = True) -> Variant:
    """The variant to run at ``head_dim`` (its build's default: DEFAULT_BY_HEAD_DIM, else DEFAULT_VARIANT), or the
    wide-key-block one (WIDE_KEYS_BY_HEAD_DIM) or the persistent one (PERSISTENT_BY_HEAD_DIM) when the mask is known
    (``causal`` not None), plain (no window, no soft cap: ``plain_mask``) and the problem is where it measured faster
    (``sq`` query rows, ``skv`` keys: wide_keys_pay, persistent_pays);
    ``TILEWRIGHT_CUDA_ATTN_VARIANT`` = a | b | b_free | c | c64 | c176 | c192 | cp | c176p | b3 | c3 overrides it (b3 /
    c3 build at head dim 64 only, c176 / c192 / c176p at 128: see :func:`check_variant_head_dim`)."""
    name = os.environ.get("TILEWRIGHT_CUDA_ATTN_VARIANT")
    if name:
        return VARIANTS[name]
    d = build_head_dim(head_dim) if head_dim is not None else None
    wide = WIDE_KEYS_BY_HEAD_DIM.get(d)
    if wide is not None and causal is not None and plain_mask and wide_keys_pay(causal, sq, skv):
        return VARIANTS[wide]
    persistent = PERSISTENT_BY_HEAD_DIM.get(d)
    if persistent is not None and causal is not None and plain_mask and persistent_pays(causal, sq, skv):
        return VARIANTS[persistent]
    return VARIANTS[DEFAULT_BY_HEAD_DIM.get(d, DEFAULT_VARIANT)]


def check_variant_head_dim(var: Variant, head_dim: int) -> None:
    """ValueError when ``var`` has no build at the build head dim of ``head_dim`` (b3 / c3 at anything but 64, c176 /
    c192 / c176p at anything but 128): a variant asked for by name runs as itself or not at all, never as another one
    in its place."""
    d = build_head_dim(head_dim)
    if d is not None and d not in var.head_dims:
        others = ", ".join(n for n, v in VARIANTS.items() if d in v.head_dims)
        raise ValueError(f"cuda attention: variant {var.name!r} (TILEWRIGHT_CUDA_ATTN_VARIANT or the variant argument) "
                         f"builds at head dim {', '.join(map(str, var.head_dims))} only, not at head dim {head_dim} "
                         f"(build {d}); variants there: {others}")


# The router's choice comes from a measured table (MEASURED_ON[1], H100): the CUDA forward's speed over Triton's,
# both through the public op with the backend forced (so both with their eager replay), per head dim, MHA or GQA
# (Hq > Hkv) and (Sq, Skv); each entry is the smaller of the causal and non-causal ratios (the router does not see
# the mask, and they agree except at 128 rows). A problem takes the entry nearest to it in (log2 Sq, log2 Skv) at
# the nearest head dim, and the CUDA forward when that entry is >= PREFER_RATIO. It replaced a fixed region (head dim
# >= 128, >= 1024 query rows; H200, MEASURED_ON[0]) set while each CUDA call re-encoded its tensor maps (~0.15 ms of
# host): with its launches replayed it is 1.16-1.71x Triton's forward at every measured point but 128 x 128.
MEASURED_ON = (Measurement("H200", "perf/results/h200/2026-11-26/attention.csv", "2026-11-26"),
               Measurement("H100", "perf/results/h100/attention/forward_route_2026-11-27_0140.csv", "2026-11-27"))
PREFER_RATIO = 1.03
_FORWARD_TABLE_TEXT = """
64 0 128/128:0.33 512/512:1.50 1024/1024:1.43 2048/2048:1.32 8192/8192:1.19 128/4096:1.28 512/4096:1.26 2048/8192:1.17
64 1 128/128:1.64 512/512:1.58 1024/1024:1.47 2048/2048:1.33 8192/8192:1.20 128/4096:1.22 512/4096:1.16 2048/8192:1.18
128 0 128/128:0.36 512/512:1.51 1024/1024:1.51 2048/2048:1.47 8192/8192:1.33 128/4096:1.46 512/4096:1.35 2048/8192:1.32
128 1 128/128:0.93 512/512:1.64 1024/1024:1.58 2048/2048:1.51 8192/8192:1.27 128/4096:1.71 512/4096:1.37 2048/8192:1.36
256 0 128/128:0.26 512/512:1.40 1024/1024:1.39 2048/2048:1.22 8192/8192:1.21 128/4096:1.44 512/4096:1.30 2048/8192:1.27
256 1 128/128:1.00 512/512:1.48 1024/1024:1.32 2048/2048:1.21 8192/8192:1.08 128/4096:1.40 512/4096:1.29 2048/8192:1.27
"""


def _parse_forward_table(text: str) -> dict:
    """{(head dim, GQA): [(Sq, Skv, CUDA / Triton speed ratio), ...]} from the lines above."""
    table = {}
    for line in text.strip().splitlines():
        d, gqa, *points = line.split()
        table[(int(d), gqa == "1")] = [(int(sq), int(skv), float(r)) for sq, skv, r in
                                       (p.replace(":", "/").split("/") for p in points)]
    return table


FORWARD_TABLE = _parse_forward_table(_FORWARD_TABLE_TEXT)


def measured_ratio(head_dim: int, gqa: bool, sq: int, skv: int) -> tuple[float, tuple[int, int, int]]:
    """The measured CUDA / Triton forward speed ratio nearest to a problem, and the (head dim, Sq, Skv) it was
    measured at: the nearest tabled head dim, then the nearest point in (log2 Sq, log2 Skv)."""
    d = min({key[0] for key in FORWARD_TABLE}, key=lambda t: (abs(t - head_dim), t))
    ls, lk = math.log2(max(sq, 1)), math.log2(max(skv, 1))
    msq, mskv, ratio = min(FORWARD_TABLE[(d, gqa)],
                           key=lambda p: (math.log2(p[0]) - ls) ** 2 + (math.log2(p[1]) - lk) ** 2)
    return ratio, (d, msq, mskv)


def preferred(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None = None) -> tuple[bool, str]:
    """Whether the router's automatic choice should take this kernel: the measured table's nearest entry (see
    FORWARD_TABLE) is at least PREFER_RATIO. ``TILEWRIGHT_CUDA_ATTN=1`` takes it everywhere it is eligible, ``=0``
    never."""
    env = os.environ.get("TILEWRIGHT_CUDA_ATTN")
    if env == "0":
        return False, "attention forward opted out by TILEWRIGHT_CUDA_ATTN=0"
    if env == "1":
        return True, "attention forward opted in by TILEWRIGHT_CUDA_ATTN=1"
    gqa = q.shape[1] > k.shape[1]
    # a padded head dim does the work of its build: it takes that build's measurements
    ratio, (d, msq, mskv) = measured_ratio(build_head_dim(q.shape[-1]) or q.shape[-1], gqa, q.shape[-2],
                                           k.shape[-2])
    where = f"nearest measured point: head dim {d}, {'GQA' if gqa else 'MHA'}, Sq {msq}, Skv {mskv}; H100"
    if ratio >= PREFER_RATIO:
        return True, f"sm_90a attention forward measured {ratio:.2f}x the Triton forward ({where})"
    return False, f"the Triton forward was faster: the sm_90a one measured {ratio:.2f}x ({where})"


# ------------------------------------------------------------------------------------------------ constraints
def tma_dims_strides(t: torch.Tensor):
    """(dims innermost first, byte strides of dims 1..3) of a (B, H, S, D) tensor as a 4-D TMA map over (D, S, H, B),
    or (None, why). Strides must be positive multiples of 16 bytes (TMA); a size-1 dim's stride is free and replaced
    by a valid one."""
    B, H, S, D = t.shape
    es = t.element_size()
    if t.stride(3) != 1 and D > 1:
        return None, "last dim is not unit-stride"
    strides = []
    for size, st in ((S, t.stride(2)), (H, t.stride(1)), (B, t.stride(0))):
        nbytes = st * es
        if size == 1:
            nbytes = max(16, -(-abs(nbytes) // 16) * 16)
        elif nbytes <= 0 or nbytes % 16 or nbytes >= 1 << 40:
            return None, f"stride {st} x {es} B is not a positive multiple of 16 bytes (TMA)"
        strides.append(nbytes)
    if t.data_ptr() % 16:
        return None, "base address is not 16-byte aligned (TMA)"
    return ((D, S, H, B), tuple(strides)), ""


def constraints(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None = None) -> tuple[bool, str]:
    """Whether the kernel can take these operands at all (dtype, head dim, shapes, TMA alignment), and why not."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        return False, "q, k, v must be tensors"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False, "q, k, v must be 4-D (B, H, S, D)"
    if q.dtype not in HALF_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return False, f"dtype {q.dtype} (the WGMMA attention takes bfloat16 / float16, all three equal)"
    B, Hq, Sq, D = q.shape
    if build_head_dim(D) is None:
        return False, (f"head dim {D} (the WGMMA attention takes 64, or a multiple of 8 from 72 to 256 on its 128 / "
                       "256 builds)")
    if v.shape[3] != D and k.shape[3] == D:
        return False, (f"value head dim must equal the query's in the WGMMA attention (v has {v.shape[3]}, q "
                       f"{D}; Triton serves a value head dim of its own)")
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        return False, f"k/v shapes {tuple(k.shape)}/{tuple(v.shape)} do not match q {tuple(q.shape)}"
    Hkv, Skv = k.shape[1], k.shape[2]
    if Hkv == 0 or Hq % Hkv:
        return False, f"Hq = {Hq} is not a multiple of Hkv = {Hkv}"
    if Sq == 0 or Skv == 0 or B == 0 or Hq == 0:
        return False, "empty problem (Sq, Skv, B or H is 0)"
    if B > 65535 or Hq > 65535:
        return False, "more than 65535 batches or heads (grid limits)"
    if Sq + Skv >= MAX_BAND_SPAN:
        return False, "Sq + Skv >= 2^30 (the band's row + offset sums are 32-bit)"
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        lay, why = tma_dims_strides(t)
        if lay is None:
            return False, f"{name}: {why}"
    if Variant("x", 2, True, True).smem_bytes(build_head_dim(D)) > SMEM_LIMIT:  # pragma: no cover - every build fits
        return False, f"head dim {D} needs more shared memory than sm_90 has"
    return True, f"bf16/fp16, head dim {D}, 16-byte aligned strides (TMA)"


# ------------------------------------------------------------------------------------------------ launch
def softcap_args(scale: float, softcap: float) -> list:
    """The kernels' softcap_pre / softcap_post arguments: scale / cap and cap * log2(e) (unread without the cap)."""
    return [ctypes.c_float(scale / softcap if softcap > 0 else 0.0), ctypes.c_float(softcap * LOG2E)]


def band_offsets(Sq: int, Skv: int, causal_offset: int = 0, window_offset: int | None = None) -> tuple[int, int]:
    """The kernels' KeyBand (ptx/attention_tile.cuh) as (upper, lower): key j is visible to query i iff
    ``i + lower <= j`` and, in builds with the upper edge (causal), ``j <= i + upper``. ``causal_offset``: the upper
    edge (0 top-left causal, Skv - Sq bottom-right, plus a window's right side); ``window_offset``: the lower edge
    (a window's left side; None: none). Clamped into [-(Sq + 1), Skv + 1], where every value outside means the same
    (all keys, or none), so that no row + offset sum in the kernels overflows."""
    lo, hi = -(Sq + 1), Skv + 1
    upper = min(max(int(causal_offset), lo), hi)
    lower = lo if window_offset is None else min(max(int(window_offset), lo), hi)
    return upper, lower


def packed_band_offsets(max_q: int, max_k: int, causal_offset: int = 0,
                        window_offset: int | None = None) -> tuple[int, int]:
    """:func:`band_offsets` of a packed batch (``TW_VARLEN`` builds): offsets relative to each sequence's bottom-right
    corner, which the kernels add to Skv_b - Sq_b and clamp per sequence. Clamped here to +-(max_q + max_k + 2): past
    that every sequence sees all keys or none, and shift + offset stays 32-bit."""
    span = max_q + max_k + 2
    upper = min(max(int(causal_offset), -span), span)
    lower = -span if window_offset is None else min(max(int(window_offset), -span), span)
    return upper, lower


_prepared: dict = {}  # launch-ready (function, grid, kernel arguments) per (pointers, shapes, strides, variant, causal,
#                       scale): runtime.launch.launch_cached


def _prepare(q, k, v, out, lse, causal: bool, scale: float, var: Variant, band: tuple[int, int], softcap: float,
             window: bool, packed: Varlen | None = None):
    """(function, grid, arguments) of one launch; q / k / v / out as (B, H, S, D) - for packed batches (``packed``)
    the (1, H, total, D) views, the grid then covering ``packed.max_q`` query rows of each sequence."""
    if var.persistent and packed is not None:  # (launch_attention_varlen runs DEFAULT_VARIANT: not reached from it)
        raise ValueError(f"cuda attention: variant {var.name!r} (persistent CTAs) has no packed-batch build")
    B, Hq, Sq, D = q.shape
    head_dim = D
    D = build_head_dim(D)  # the build; the maps keep the tensors' own head dim (tma_dims_strides)
    Hkv, Skv = k.shape[1], k.shape[2]
    dt = launch.tma_dtype(q.dtype)
    defines = var.defines(D, causal, q.dtype == torch.float16, softcap > 0, window,
                          causal and (band[0] != 0 or packed is not None))  # packed: each sequence its own offset
    if packed is not None:
        defines["TW_VARLEN"] = 1
    bld = build.compile_source(SOURCE, "sm_90a", defines)
    drv = launch.driver()
    bn = var.bn(D)
    maps = []
    with torch.cuda.device(q.device):
        fn = drv.function(bld, KERNEL, var.smem_bytes(D))
        for t, rows, role in ((q, var.bm, "Q"), (k, bn, "K"), (v, bn, "V"), (out, 64, "O")):
            (dims, strides), _ = tma_dims_strides(t)
            maps.append(launch.tag(drv.encode_tiled(dt, t.data_ptr(), dims, strides, (64, rows, 1, 1), 128), role))
    grid = (-(-(Sq if packed is None else packed.max_q) // var.bm), Hq, B if packed is None else packed.batch)
    if var.persistent:
        grid = persistent_grid(grid, sm_count(q.device))
    # with the soft cap, scores become cap * tanh(s * scale / cap) * log2(e) before the softmax's exp2: scale_log2 1
    capped = softcap > 0
    args = [*maps, launch.pointer("LSE", lse), ctypes.c_int32(Sq), ctypes.c_int32(Skv), ctypes.c_int32(Hq),
            ctypes.c_int32(Hq // Hkv), ctypes.c_float(1.0 if capped else scale * LOG2E), ctypes.c_int32(band[0]),
            ctypes.c_int32(band[1]), *softcap_args(scale, softcap)]
    if packed is None:  # the packed-batch arguments, unread by dense builds
        args += [ctypes.c_uint64(0), ctypes.c_uint64(0), ctypes.c_uint64(0), ctypes.c_int64(0), ctypes.c_int64(0),
                 ctypes.c_int32(head_dim)]
        if var.persistent:  # the persistent builds' last argument: the batch (their tiles: ceil(Sq / BM) x Hq x B)
            args.append(ctypes.c_int32(B))
    else:
        args += [launch.pointer("CU_Q", packed.cu_q), launch.pointer("CU_K", packed.cu_k),
                 launch.pointer("O_ROWS", out), ctypes.c_int64(out.stride(2)), ctypes.c_int64(out.stride(1)),
                 ctypes.c_int32(head_dim)]
    return fn, grid, args


def persistent_grid(tiles: tuple[int, int, int], sms: int) -> tuple[int, int, int]:
    """The grid of a persistent build (TW_PERSISTENT) over the (x, y, z) tiles the other builds launch one CTA each
    for: min(tiles, SMs) CTAs in x (one per SM: a CTA's shared memory, 161-214 KB, leaves room for no second), each
    taking the tiles at linear positions blockIdx.x, + gridDim.x, ... (the kernel's tile_coords). ValueError for 2^30
    tiles or more: the kernel counts them in 32-bit ints, a position plus the grid's stride included."""
    total = tiles[0] * tiles[1] * tiles[2]
    if total >= 1 << 30:
        raise ValueError(f"cuda attention: {total} tiles for a persistent variant (fewer than 2^30)")
    return (max(1, min(total, sms)), 1, 1)


def check_launch(q, k, v, out, lse) -> None:
    """Validate one launch's tensors (ValueError naming the argument and the rule)."""
    ok, why = constraints(q, k, v)
    if not ok:
        raise ValueError(f"cuda attention: {why}")
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError("cuda attention: out must have q's shape, dtype and device")
    lay, why = tma_dims_strides(out)
    if lay is None:
        raise ValueError(f"cuda attention: out: {why}")
    B, Hq, Sq, _ = q.shape
    if lse.shape != (B, Hq, Sq) or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise ValueError("cuda attention: lse must be a contiguous float32 (B, Hq, Sq) tensor")


def launch_attention(q, k, v, out, lse, causal: bool = False, scale: float | None = None,
                     variant: Variant | str | None = None, *, causal_offset: int = 0,
                     window_offset: int | None = None, softcap: float = 0.0) -> None:
    """Write softmax(scale q k^T [mask]) v into ``out`` and its natural-log LSE into ``lse`` (sm_90a kernel).

    q: (B, Hq, Sq, D); k, v: (B, Hkv, Skv, D), Hq % Hkv == 0; build_head_dim(D) not None; any strides that are
    multiples of 16 bytes with a unit last dim; out like q; lse contiguous fp32 (B, Hq, Sq). The mask is a band, as
    the Triton forward's: with ``causal`` query i sees key j only if ``j <= i + causal_offset`` (0: top-left, SDPA's
    alignment; Skv - Sq: bottom-right; a window's right side adds to it), and with ``window_offset`` not None only if
    ``j >= i + window_offset`` too. A row that sees no key gets out 0 and LSE -inf. ``softcap`` > 0: scores
    ``softcap * tanh(scale q k^T / softcap)``."""
    check_launch(q, k, v, out, lse)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if not (scale > 0.0 and math.isfinite(scale)):
        # the kernel masks with -inf before scaling (scale * log2 e folded into one multiply): it needs scale > 0
        raise ValueError(f"cuda attention: scale {scale} must be finite and > 0 (Triton serves other scales)")
    softcap = float(softcap)
    if not (softcap >= 0.0 and math.isfinite(softcap)):
        raise ValueError(f"cuda attention: softcap {softcap} must be finite and >= 0 (0: none)")
    if isinstance(variant, str):
        var = VARIANTS[variant]
    else:
        var = variant or _checked_variant(q, k, bool(causal), window_offset is None and softcap == 0.0)
    check_variant_head_dim(var, q.shape[-1])
    band = band_offsets(q.shape[2], k.shape[2], causal_offset if causal else 0, window_offset)
    window = window_offset is not None
    key = (q.device.index, q.dtype, var, bool(causal), scale, band, softcap, window,
           *((t.data_ptr(), t.shape, t.stride()) for t in (q, k, v, out)), lse.data_ptr())
    launch.launch_cached(_prepared, key, lambda: _prepare(q, k, v, out, lse, bool(causal), scale, var, band, softcap,
                                                          window),
                         q.device,
                         var.threads, var.smem_bytes(build_head_dim(q.shape[-1])),
                         {"Q": q, "K": k, "V": v, "O": out, "LSE": lse})


def _checked_variant(q, k, causal: bool, plain_mask: bool) -> Variant:
    """:func:`pick_variant` for a launch without a named variant. The router's readiness check (:func:`ready`) ran
    the head dim's default variant's self-check; a wide-key-block pick runs its own on first use, and a launch
    whose pick fails it (or may not run it yet: a CUDA-graph capture) runs the default instead - a correct kernel the
    router has already checked."""
    var = pick_variant(q.shape[-1], causal, q.shape[2], k.shape[2], plain_mask)
    default = pick_variant(q.shape[-1])
    if var is default:
        return var
    ok, _ = GUARD.check(q.device, var.name, (q.shape[-1], q.dtype),
                        lambda: self_check(q.device, var, q.shape[-1], q.dtype), fallback=f"variant {default.name}")
    return var if ok else default


def cuda_attention(q, k, v, causal: bool = False, scale: float | None = None, variant=None, **options):
    """(out, lse) on new tensors: out (B, Hq, Sq, D) contiguous, lse fp32 (B, Hq, Sq); ``options``: the mask and cap
    keywords of :func:`launch_attention`."""
    B, Hq, Sq, _ = q.shape
    out = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    lse = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
    launch_attention(q, k, v, out, lse, causal, scale, variant, **options)
    return out, lse


# ------------------------------------------------------------------------------------------------ packed batches
# (the packed batch itself: _codes.Varlen, the descriptor the Triton launchers take too)
def _packed_as_bhsd(x: torch.Tensor) -> torch.Tensor:
    """(total, H, D) -> the (1, H, total, D) view the maps are encoded over (no copy)."""
    return x.unsqueeze(0).transpose(1, 2)


def check_packed(packed: Varlen, q: torch.Tensor, who: str) -> None:
    """The offsets a ``TW_VARLEN`` kernel reads as raw int32 arrays: contiguous int32 (batch + 1,) tensors of one
    shape on q's device (ValueError naming them; their values are the op's check: ops/varlen._check_values)."""
    cu_q, cu_k = packed.cu_q, packed.cu_k
    for name, cu in (("cu_q", cu_q), ("cu_k", cu_k)):
        if cu.dtype != torch.int32 or cu.dim() != 1 or not cu.is_contiguous() or cu.device != q.device:
            raise ValueError(f"{who}: {name} must be a contiguous 1-D int32 tensor on q's device, got {cu.dtype} "
                             f"{tuple(cu.shape)} on {cu.device}")
    if cu_k.shape != cu_q.shape:
        raise ValueError(f"{who}: cu_k has {cu_k.shape[0]} offsets where cu_q has {cu_q.shape[0]}")


def varlen_constraints(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor,
                       max_q: int, max_k: int) -> tuple[bool, str]:
    """Whether packed q (total_q, Hq, D), k / v (total_k, Hkv, D) with these offsets can take the kernel at all."""
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        return False, "packed q, k, v must be 3-D (total, H, D)"
    ok, why = constraints(_packed_as_bhsd(q), _packed_as_bhsd(k), _packed_as_bhsd(v))
    if not ok:
        return False, why
    if cu_q.dtype != torch.int32 or cu_q.dim() != 1 or not 2 <= cu_q.shape[0] <= 65536:
        return False, "cu_seqlens must be int32 (batch + 1,) with 1 to 65535 sequences (grid limit)"
    if max_q + max_k >= MAX_BAND_SPAN or q.shape[0] + k.shape[0] >= MAX_BAND_SPAN:
        return False, "lengths of 2^30 rows or more (the band's row + offset sums are 32-bit)"
    if max_q < 1:
        return False, "max_seqlen_q is 0"
    return True, f"bf16/fp16 packed sequences, head dim {q.shape[-1]}, 16-byte aligned strides (TMA)"


def launch_attention_varlen(q, k, v, out, lse, cu_q, cu_k, max_q: int, max_k: int, causal: bool = False,
                            scale: float | None = None, *, causal_offset: int = 0, window_offset: int | None = None,
                            softcap: float = 0.0) -> None:
    """:func:`launch_attention` over packed sequences (flash-attn's varlen layout): q (total_q, Hq, D), k / v
    (total_k, Hkv, D), out like q, lse contiguous fp32 (Hq, total_q); ``cu_q`` / ``cu_k`` int32 (batch + 1,) offsets
    on the device (checked by the caller: 0 first, nondecreasing, the totals last, no sequence longer than ``max_q`` /
    ``max_k``). ``causal_offset`` / ``window_offset`` are relative to each sequence's bottom-right corner (key
    position i + Skv_b - Sq_b of query i): 0 / None is bottom-right causal, flash-attn's varlen convention."""
    ok, why = varlen_constraints(q, k, v, cu_q, max_q, max_k)
    if not ok:
        raise ValueError(f"cuda attention (packed): {why}")
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError("cuda attention (packed): out must have q's shape, dtype and device")
    if tma_dims_strides(_packed_as_bhsd(out))[0] is None:
        raise ValueError("cuda attention (packed): out: strides are not TMA-compatible (16-byte multiples)")
    if lse.shape != (q.shape[1], q.shape[0]) or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise ValueError("cuda attention (packed): lse must be a contiguous float32 (Hq, total_q) tensor")
    check_packed(Varlen(cu_q, cu_k, max_q, max_k), q, "cuda attention (packed)")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if not (scale > 0.0 and math.isfinite(scale)):
        raise ValueError(f"cuda attention (packed): scale {scale} must be finite and > 0")
    softcap = float(softcap)
    if not (softcap >= 0.0 and math.isfinite(softcap)):
        raise ValueError(f"cuda attention (packed): softcap {softcap} must be finite and >= 0 (0: none)")
    var = VARIANTS[DEFAULT_VARIANT]  # the one schedule measured on packed batches
    upper, lower = packed_band_offsets(max_q, max_k, causal_offset if causal else 0, window_offset)
    window = window_offset is not None
    packed = Varlen(cu_q, cu_k, int(max_q), int(max_k))
    views = [_packed_as_bhsd(t) for t in (q, k, v, out)]
    key = ("varlen", q.device.index, q.dtype, bool(causal), scale, upper, lower, softcap, window, int(max_q),
           *((t.data_ptr(), t.shape, t.stride()) for t in (q, k, v, out)), lse.data_ptr(), cu_q.data_ptr(),
           cu_k.data_ptr(), cu_q.shape[0])
    launch.launch_cached(_prepared, key, lambda: _prepare(*views, lse, bool(causal), scale, var, (upper, lower),
                                                          softcap, window, packed),
                         q.device, var.threads, var.smem_bytes(build_head_dim(q.shape[-1])),
                         {"Q": q, "K": k, "V": v, "O": out, "O_ROWS": out, "LSE": lse, "CU_Q": cu_q, "CU_K": cu_k})


def _out_and_lse_metrics(out, lse, ref_out, ref_lse) -> dict:
    """A self-check's metrics (guard.run_self_check): out's relative error and the largest LSE error, each within
    2e-2; the LSE must be infinite exactly where the reference's is (rows that see no key: -inf in both)."""
    same_infs = torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    lse_error = (lse - ref_lse).nan_to_num(posinf=1e9, neginf=-1e9).abs().max().item() if same_infs else float("inf")
    return {"out relative error": (relative_error(out, ref_out), 2e-2), "max |LSE error|": (lse_error, 2e-2)}


# (q lengths, k lengths, Hq, Hkv, causal, window (left, right)): tails in every length, an empty sequence, one row,
# Sq_b > Skv_b under bottom-right causal (rows that see no key), a window with both edges
SELF_CHECK_PACKED = (((200, 0, 65, 300, 1), (200, 0, 65, 300, 1), 4, 2, False, None),
                     ((200, 0, 65, 300, 1), (200, 0, 65, 300, 1), 4, 2, True, None),
                     ((100, 7, 300), (200, 130, 257), 2, 1, True, None),
                     ((300, 130), (260, 400), 2, 2, False, (70, 30)))


def self_check_varlen(device, head_dim: int, dtype) -> tuple[bool, str]:
    """Packed batches (tails, an empty sequence, GQA, bottom-right causal with Sq_b != Skv_b, a window) against the
    per-sequence fp32 reference: out and LSE, each sequence's rows only (a launch that wrote another sequence's rows
    or missed its own fails on the NaN-poisoned output)."""
    from ..reference import varlen_attention_reference

    g = torch.Generator(device="cpu").manual_seed(11)

    def measure(lq, lk, Hq, Hkv, causal, window):
        cu_q = torch.tensor([0, *torch.tensor(lq).cumsum(0).tolist()], dtype=torch.int32, device=device)
        cu_k = torch.tensor([0, *torch.tensor(lk).cumsum(0).tolist()], dtype=torch.int32, device=device)
        q = torch.randn(sum(lq), Hq, head_dim, generator=g).to(device=device, dtype=dtype)
        k = torch.randn(sum(lk), Hkv, head_dim, generator=g).to(device=device, dtype=dtype)
        v = torch.randn(sum(lk), Hkv, head_dim, generator=g).to(device=device, dtype=dtype)
        out = torch.full_like(q, float("nan"))
        lse = torch.full((Hq, sum(lq)), float("nan"), device=device)
        upper = causal or (window is not None and window[1] is not None)
        launch_attention_varlen(q, k, v, out, lse, cu_q, cu_k, max(lq), max(lk), upper,
                                causal_offset=0 if causal or window is None else window[1],
                                window_offset=None if window is None else -window[0])
        ro, rl = varlen_attention_reference(q.float(), k.float(), v.float(), cu_q, cu_k, causal, None, 0.0, window)
        synchronize(device)
        return _out_and_lse_metrics(out, lse, ro, rl)

    cases = [(f"packed hdim {head_dim} causal={causal} window={w} (q lengths {lq}, k lengths {lk}, Hq={Hq}, Hkv={Hkv})",
              lambda c=(lq, lk, Hq, Hkv, causal, w): measure(*c))
             for lq, lk, Hq, Hkv, causal, w in SELF_CHECK_PACKED]
    return run_self_check("varlen", cases)


_varlen_routes: dict = {}


def varlen_route(q, k, v, cu_q, max_q: int, max_k: int) -> tuple[bool, str]:
    """Whether ``flash_attention_varlen`` runs this call on the sm_90a kernel: an sm_90 device, the toolchain, the
    constraints, the measured preference (the dense table at the batch's mean lengths: a packed batch's tiles are its
    sequences' tiles) and the packed builds' self-check (once per process and device model). Remembered per call
    signature (every layer of a step asks with the same one); a readiness change (a failed check or launch) or the
    switches' environment moves the key."""
    key = (q.device, q.dtype, max_q, max_k, cu_q.shape[0], backends.readiness_epoch,
           os.environ.get("TILEWRIGHT_CUDA"), os.environ.get("TILEWRIGHT_CUDA_ATTN"),
           *((t.shape, t.stride(), t.data_ptr() % 16) for t in (q, k, v)))
    hit = _varlen_routes.get(key)
    if hit is None:
        hit = _varlen_route(q, k, v, cu_q, max_q, max_k)
        if len(_varlen_routes) >= 256:
            _varlen_routes.clear()
        _varlen_routes[key] = hit
    return hit


def _varlen_route(q, k, v, cu_q, max_q: int, max_k: int) -> tuple[bool, str]:
    if not (q.is_cuda and torch.cuda.get_device_capability(q.device)[0] == 9):
        return False, "not an sm_90 device"
    if os.environ.get("TILEWRIGHT_CUDA") == "0":
        return False, "CUDA kernels off (TILEWRIGHT_CUDA=0)"
    blocked = GUARD.blocked(varlen_constraints(q, k, v, cu_q, max_q, max_k))
    if blocked:
        return blocked
    batch = max(1, cu_q.shape[0] - 1)
    ok, why = preferred(_packed_as_bhsd(q)[:, :, : max(1, q.shape[0] // batch)],
                        _packed_as_bhsd(k)[:, :, : max(1, k.shape[0] // batch)])
    if not ok:
        return False, why
    return GUARD.check(q.device, "varlen", (q.shape[-1], q.dtype), lambda: self_check_varlen(q.device, q.shape[-1],
                                                                                             q.dtype))


def try_launch_varlen(q, k, v, out, lse, cu_q, cu_k, max_q: int, max_k: int, causal: bool, scale: float,
                      **options) -> bool:
    """:func:`launch_attention_varlen` for the op layer: False (Triton then runs) when it declines or fails (then the
    family is disabled with one warning); never raises."""
    return GUARD.run(launch_attention_varlen, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal, scale, **options)


# ------------------------------------------------------------------------------------------------ self-check
# (B, Hq, Hkv, Sq, Skv): GQA, tails in both lengths (not block multiples), Sq != Skv both ways, one block only
SELF_CHECK_SHAPES = ((1, 4, 2, 200, 200), (2, 2, 1, 65, 300), (1, 2, 2, 300, 130), (1, 1, 1, 7, 7))
# (B, Hq, Hkv, Sq, Skv, bottom-right causal, window (left, right)): the band's other edges through the same build -
# rows that see no key (bottom-right, Sq > Skv), a left edge that skips key blocks, a right edge without causal
SELF_CHECK_BANDS = ((1, 2, 1, 300, 200, True, None), (1, 2, 2, 400, 400, False, (100, 0)),
                    (1, 2, 1, 300, 260, False, (70, 30)))


def self_check(device, var: Variant, head_dim: int, dtype) -> tuple[bool, str]:
    """Small problems (both causal modes, GQA, ragged lengths, the band's edges) against the fp32 reference: out and
    LSE (a row that sees no key: out 0, LSE -inf in both)."""
    from ..reference import attention_reference

    g = torch.Generator(device="cpu").manual_seed(7)

    def measure(B, Hq, Hkv, Sq, Skv, causal, bottom_right=False, window=None):
        q = torch.randn(B, Hq, Sq, head_dim, generator=g).to(device=device, dtype=dtype)
        k = torch.randn(B, Hkv, Skv, head_dim, generator=g).to(device=device, dtype=dtype)
        v = torch.randn(B, Hkv, Skv, head_dim, generator=g).to(device=device, dtype=dtype)
        out = torch.full_like(q, float("nan"))
        lse = torch.full((B, Hq, Sq), float("nan"), device=device)
        shift = Skv - Sq if bottom_right else 0
        upper = causal or (window is not None and window[1] is not None)
        launch_attention(q, k, v, out, lse, upper, None, var,
                         causal_offset=shift + (0 if causal or window is None else window[1]),
                         window_offset=None if window is None or window[0] is None else shift - window[0])
        ro, rl = attention_reference(q.float(), k.float(), v.float(), causal, None, bottom_right, 0.0, window)
        synchronize(device)
        return _out_and_lse_metrics(out, lse, ro, rl)

    cases = [(f"hdim {head_dim} causal={causal} (B={B}, Hq={Hq}, Hkv={Hkv}, Sq={Sq}, Skv={Skv})",
              lambda c=(B, Hq, Hkv, Sq, Skv, causal): measure(*c))
             for (B, Hq, Hkv, Sq, Skv) in SELF_CHECK_SHAPES for causal in (False, True)]
    cases += [(f"hdim {head_dim} bottom_right={br} window={w} (B={B}, Hq={Hq}, Hkv={Hkv}, Sq={Sq}, Skv={Skv})",
               lambda c=(B, Hq, Hkv, Sq, Skv, br, br, w): measure(*c))
              for (B, Hq, Hkv, Sq, Skv, br, w) in SELF_CHECK_BANDS]
    return run_self_check(var.name, cases)


GUARD = Guard("CUDA attention", "sm_90a attention ", MEASURED_ON, declines=(ValueError,))  # ValueError: check_launch


def ready(q, k, v) -> tuple[bool, str]:
    """Everything the router needs before routing here: constraints, toolchain, and the variant's self-check on this
    device model (once per process; a failure disables the kernel with one warning and Triton serves)."""
    blocked = GUARD.blocked(constraints(q, k, v))
    if blocked:
        return blocked
    var = pick_variant(q.shape[-1])
    # raised, not a failed self-check: a variant the environment names at a head dim it has no build for is a
    # configuration error (Triton serving that call instead would hide it)
    check_variant_head_dim(var, q.shape[-1])
    return GUARD.check(q.device, var.name, (q.shape[-1], q.dtype),
                       lambda: self_check(q.device, var, q.shape[-1], q.dtype))


def try_launch(q, k, v, out, lse, causal: bool, scale: float, **options) -> bool:
    """Launch for the op layer (``options``: the mask and cap keywords of :func:`launch_attention`); False (Triton
    then runs) when the kernel declines these tensors (the family stays on) or fails (then disabled with one
    warning) - never raises."""
    return GUARD.run(launch_attention, q, k, v, out, lse, causal, scale, **options)


def build_check_builds() -> list:
    """``tilewright build-check`` rows: (label, defines, dynamic smem) of BUILD_CHECK_BUILDS. Variant "a" (one
    consumer, no setmaxnreg by design) is compiled by the CPU tests instead, since the table requires USETMAXREG."""
    out = []
    for name, hdim, causal, fp16, *options in BUILD_CHECK_BUILDS:
        v = VARIANTS[name]
        capped, window, offset, packed = (list(options) + [False] * 4)[:4]
        label = f"{name} hdim{hdim} {'causal' if causal else 'full'} {'fp16' if fp16 else 'bf16'}"
        label += " softcap" * capped + " window" * window + " offset" * offset + " varlen" * packed
        defines = v.defines(hdim, causal, fp16, capped, window, offset)
        if packed:
            defines["TW_VARLEN"] = 1
        out.append((label, defines, v.smem_bytes(hdim)))
    return out


register(cuda_backend("attention", "attention_sm90", "sm_90a FA3-style flash-attention forward", (9,),
                      env=("TILEWRIGHT_CUDA_ATTN", "TILEWRIGHT_CUDA_ATTN_VARIANT"), constraints=constraints,
                      preferred=preferred, ready=ready, launch=try_launch, measured=MEASURED_ON))
