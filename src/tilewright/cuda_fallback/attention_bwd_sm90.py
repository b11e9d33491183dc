"""Host side of the Hopper flash-attention backward's kernels (``attention_bwd_sm90.cu``): constraints, launch.

The dK / dV kernel computes dK and dV of one key block per CTA (and, variant b, dQ's partial sums into an fp32
workspace) from the forward's LSE and the Triton backward's delta (``rowsum(dO * O)``: its preprocess kernel); the dQ
kernel is the deterministic alternative for dQ. The op layer
uses it (:func:`enabled`) where it measured faster than Triton's backward and :func:`constraints` accepts the call,
Triton's kernels otherwise; dQ comes from the same pass, the separate dQ kernel or Triton's (:func:`dq_mode`).

Entry points: :func:`constraints` (why these tensors can or cannot take the kernel), :func:`enabled` (where the op
layer uses it), :func:`launch_dkdv` (into given dk / dv, and dq's fp32 workspace), :func:`launch_dq`. Both take packed
variable-length batches too (``packed``: a ``_codes.Varlen``, the ``TW_VARLEN`` builds; q / k / v / dO and the
gradients as the (1, H, total, D) views of the packed tensors, lse / delta (1, Hq, total_q)).
"""
from __future__ import annotations

import ctypes
import os

import torch

from .._env import SMEM_OPTIN_BYTES
from .._codes import Varlen
from .attention_sm90 import (LOG2E, MAX_BAND_SPAN, band_offsets, build_head_dim, check_packed, packed_band_offsets,
                             softcap_args, tma_dims_strides)
from .runtime import HALF_DTYPES, build, launch

SOURCE = "attention_bwd_sm90.cu"
KERNEL = "tw_attn_bwd_dkdv_sm90"
KERNEL_DQ = "tw_attn_bwd_dq_sm90"  # the query-block half (same source and build): deterministic dQ
DQ_ENV = "TILEWRIGHT_CUDA_ATTN_BWD_DQ"
DQ_MODES = ("atomic", "kernel", "triton")  # see dq_mode()
DEFAULT_DQ_MODE = "atomic"
DQ_STAGE_ENV = "TILEWRIGHT_CUDA_ATTN_BWD_DQ_STAGE"
# dQ in the pass: how a consumer stages its fp32 partial for the reduce-adds (the kernel's TW_DQ_STAGE_SPLIT): "b64",
# one 64-bit shared store per fragment pair (2-way bank conflicts under the 128B swizzle), or "split", two 32-bit ones
# (none, for 16 more stores a step); see pick_dq_stage(). "split" is the default: through the op against cuDNN on an
# H200 (one process per setting, fwd + bwd) it ran 2.211 vs 2.280 ms at 2 x 8 x 8k x 64 (0.983 vs 0.930x cuDNN),
# 6.889 vs 7.027 at 2 x 16 x 8k x 128, 1.098 vs 1.115 at the 2k GQA row, level on the causal 8k / 16k rows; out, LSE,
# dK and dV bit-equal to b64's (the shared ring is read back by the same TMA reduce-adds).
DQ_STAGES = ("b64", "split")
DEFAULT_DQ_STAGE = "split"
STEP_ENV = "TILEWRIGHT_CUDA_ATTN_BWD_STEP"
# Changes to the dK / dV consumers' step, comma-separated in TILEWRIGHT_CUDA_ATTN_BWD_STEP (an A/B switch; "none":
# none; unset: DEFAULT_STEP_BY_HEAD_DIM, see pick_step()). Name -> the kernel's macro: "defer" hands a step's staged
# dQ to the writer warp (its fence + arrive) one step later, behind the next step's S^T / dP^T issue; "stsm" stores
# dS^T by four stmatrix.x4 instead of 16 32-bit stores; "lds64" reads the statistics (LSE, delta) by 64-bit loads, a
# column pair each. The same values (dK / dV bit-equal, dQ's staged partials too); only data movement and
# synchronisation differ. Written against the stall profile of the head-dim-64 b+dq build (ncu, H200: the staging's
# fence + arrive ~8.6% of the samples, the statistics loads ~4.5%, the dS^T stores 2.65%).
STEP_OPTIONS = {"defer": "TW_DQ_DEFER", "stsm": "TW_DS_STMATRIX", "lds64": "TW_STATS_LDS64"}
STEP_DQ_ONLY = ("defer", "stsm")  # change dQ's staging / dS^T's stores: builds with dQ in the pass only
# None of them in the soft-cap builds of two consumers at head dim 128 (defines() leaves them out): those consumers sit
# at the edge of their 240 registers, and ptxas (nvcc 13.0) spilled 12-40 bytes in 8 of the 14 option sets of the
# causal and the windowed build with dQ in the pass, and with lds64 in the windowed one without; the other builds
# compiled spill-free with all three (the build-check rows, and the CPU tests' other builds).
DEFAULT_STEP = ()
# Build head dim -> its step options where they are not DEFAULT_STEP. H200, fwd + bwd through the op, each setting's
# CUDA graph and cuDNN's interleaved in one process, dK / dV bit-equal to the default build's (perf/results/h200/
# attention/bwd_sync_ab_2026-11-29_s34*.txt): at head dim 128 "defer" ran 1.007-1.050x the default on 9 of 10 rows (2 x
# 16 x 8k full 1.007 / 1.010, 4 x 16 x 2k 1.010 both masks, GQA 2 x 32/8 x 4k 1.011, 2 x 16 x 4k causal 1.035, 1 x
# 32/8 x 8k causal 1.050, 4 x 32/8 x 2k causal 1.009 / 1.029) and 0.994 at 8 x 16 x 1k causal; all three 1.008-1.057
# on the same rows, no better overall. At head dim 64 each option was level or slower (defer 0.964 / 0.973, all three
# 0.954 / 0.958 on 2 x 8 x 8k): there the staging's fence is not behind the next step's MMAs' issue, it is the issue.
DEFAULT_STEP_BY_HEAD_DIM = {128: ("defer",)}
DQ_THREADS = 256  # one producer warpgroup + one consumer warpgroup (64 query rows per CTA)
DQ_BLOCK_N = 64  # keys per step
# The builds (TW_HDIM): dK + dV take D registers a thread in each consumer warpgroup. Other head dims - multiples of 8
# from 72 to 128 - run on the 128 build (the forward's build_head_dim rule): their maps keep the true width, so TMA
# zero-fills the columns past it, and the stores skip them (the kernels' head_dim argument).
HEAD_DIMS = (64, 128)
BLOCK_M = 64  # query rows per step
STAGES = 2
ENV = "TILEWRIGHT_CUDA_ATTN_BWD"
VARIANT_ENV = "TILEWRIGHT_CUDA_ATTN_BWD_VARIANT"
# Variant -> consumer warpgroups (64 keys each). "a": one; "b": two over a 128-key block sharing each Q / dO load
# (setmaxnreg 24 / 240), 1.05-1.2x "a" on H100 and the only one that takes dQ in the pass.
VARIANTS = {"a": 1, "b": 2}
DEFAULT_VARIANT = "b"
# compiled by build-check (CPU CI): (variant, head dim, causal, fp16[, window, softcap, offset, varlen, dq b64, step])
BUILD_CHECK_BUILDS = (("a", 128, False, False), ("a", 128, True, False), ("a", 64, True, True),
                      ("b", 128, True, False), ("b+dq", 128, True, False), ("b+dq", 64, False, True),
                      ("b+dq", 128, True, False, True, False, True), ("b", 64, False, False, True),
                      ("b+dq", 128, True, False, False, True), ("b", 64, True, False, True, True),
                      ("b+dq", 128, True, False, False, False, True, True), ("b", 64, False, True, False, False,
                                                                             False, True),
                      ("b+dq", 64, False, False, False, False, False, False, True),
                      ("b+dq", 128, True, False, False, False, False, False, True),
                      *(("b+dq", 64, False, False, False, False, False, False, False, step)
                        for step in (("defer",), ("stsm",), ("lds64",), tuple(STEP_OPTIONS))),
                      ("b+dq", 128, True, False, False, False, False, False, False, tuple(STEP_OPTIONS)))
# rows 6-9: windowed, windowed, soft cap, both; 10-11: packed batches (varlen); 12-13: dQ staged by 64-bit stores (the
# "b64" staging, without TW_DQ_STAGE_SPLIT; every other dQ-in-the-pass row stages by 32-bit ones); the last five: the
# step's opt-in changes (STEP_OPTIONS) at head dim 64, each and all three, and all three at 128 causal
BUILD_CHECK_ARCHS = ("sm_90a",)
BUILD_CHECK_MARKERS = ("HGMMA", "UTMALDG")


def block_n(variant: str) -> int:
    """Keys per CTA: 64 per consumer warpgroup."""
    return 64 * VARIANTS[variant]


def threads(variant: str) -> int:
    """One producer warpgroup plus the consumer warpgroups, 128 threads each."""
    return 128 * (VARIANTS[variant] + 1)


def smem_bytes(head_dim: int, variant: str = DEFAULT_VARIANT, dq_atomic: bool = False, packed: bool = False) -> int:
    """Dynamic shared memory: K + V blocks, STAGES x (Q + dO) blocks, the row statistics (dense: one block a stage;
    packed batches: each consumer's, double-buffered by step; rounded up to 1024 bytes, the dS^T tile's alignment),
    with dQ in the pass two dS^T tiles and each consumer's fp32 64 x 64 dQ staging, the mbarriers and 1024 bytes of
    alignment slack."""
    bn, nc = block_n(variant), VARIANTS[variant]
    dq = 2 * bn * BLOCK_M * 2 + nc * 64 * 64 * 4 if dq_atomic else 0
    stats = (0 if packed else STAGES * STATS_BLOCK_BYTES) + nc * 2 * STATS_BLOCK_BYTES  # the kernel's STAT_REGION
    return 1024 + 2 * bn * head_dim * 2 + 2 * STAGES * BLOCK_M * head_dim * 2 + -(-stats // 1024) * 1024 + dq + \
        (1 + 2 * STAGES) * 8


# The dense builds' row statistics (the kernel's STATS_BY_TMA): per (b, h, 64-row query block), the block's 64 base-2
# LSEs then its 64 deltas, fp32 - one 512-byte bulk copy a step, taken with the stage's Q and dO.
STATS_ROWS = BLOCK_M
STATS_BLOCK_BYTES = 2 * STATS_ROWS * 4


def statistics_shape(B: int, Hq: int, Sq: int) -> tuple:
    """Shape of the packed statistics of a dense (B, Hq, Sq) call: (B, Hq, ceil(Sq / 64), 2, 64) fp32."""
    return (B, Hq, -(-Sq // STATS_ROWS), 2, STATS_ROWS)


def pack_statistics(lse: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """The dK / dV kernel's packed statistics from the forward's natural-log LSE and delta (both (B, Hq, Sq) fp32):
    LSE * log2(e), +inf where the LSE is -inf (a row that sees no key) and on the padding rows past Sq (P = 0 there),
    delta with zeros on the padding. The op layer gets the same tensor from the Triton backward's preprocess kernel
    (``pack_stats``) without these extra launches; this is the direct callers' path and the tests' reference."""
    B, Hq, Sq = lse.shape
    stats = torch.empty(statistics_shape(B, Hq, Sq), device=lse.device, dtype=torch.float32)
    rows = stats.shape[2] * STATS_ROWS
    log2 = torch.full((B, Hq, rows), float("inf"), device=lse.device, dtype=torch.float32)
    log2[..., :Sq] = torch.where(lse == float("-inf"), float("inf"), lse.float() * LOG2E)
    dl = torch.zeros((B, Hq, rows), device=lse.device, dtype=torch.float32)
    dl[..., :Sq] = delta
    stats[:, :, :, 0] = log2.view(B, Hq, -1, STATS_ROWS)
    stats[:, :, :, 1] = dl.view(B, Hq, -1, STATS_ROWS)
    return stats


def check_statistics_pack(stats: torch.Tensor, q: torch.Tensor) -> None:
    """ValueError unless ``stats`` is a contiguous fp32 tensor of :func:`statistics_shape` on q's device."""
    B, Hq, Sq, _ = q.shape
    if stats.shape != statistics_shape(B, Hq, Sq) or stats.dtype != torch.float32 or not stats.is_contiguous() or \
            stats.device != q.device:
        raise ValueError(f"cuda attention backward: stats must be a contiguous float32 "
                         f"{statistics_shape(B, Hq, Sq)} tensor on q's device (pack_statistics)")


def defines(head_dim: int, causal: bool, fp16: bool, variant: str = DEFAULT_VARIANT, dq_atomic: bool = False,
            window: bool = False, softcap: bool = False, upper_offset: bool = False, packed: bool = False,
            dq_stage: str | None = None, step: tuple | None = None) -> dict:
    """-D macros of one build (``causal``: the band's upper edge, ``upper_offset``: at an offset other than 0,
    ``window``: its lower edge, ``softcap``: the logit cap's derivative, ``packed``: variable-length batches,
    ``dq_stage``: the dQ staging of a ``dq_atomic`` build, one of :data:`DQ_STAGES`; None: :func:`pick_dq_stage`;
    ``step``: names of :data:`STEP_OPTIONS` (those of :data:`STEP_DQ_ONLY` count in ``dq_atomic`` builds only, none
    in the soft-cap builds of two consumers at head dim 128); None: :func:`pick_step`)."""
    defs = {"TW_HDIM": head_dim, "TW_STAGES": STAGES, "TW_CAUSAL": int(causal), "TW_FP16": int(fp16),
            "TW_CONSUMERS": VARIANTS[variant], "TW_DQ_ATOMIC": int(dq_atomic)}
    if window:  # only then: the dense builds keep their cache keys (and code)
        defs["TW_WINDOW"] = 1
    if softcap:
        defs["TW_SOFTCAP"] = 1
    if upper_offset:
        defs["TW_UPPER_OFFSET"] = 1
    if packed:
        defs["TW_VARLEN"] = 1
    if dq_atomic:  # the staging of dQ's partials: "split" adds the macro (the kernel's default is the 64-bit stores)
        stage = dq_stage or pick_dq_stage()
        if stage not in DQ_STAGES:
            raise ValueError(f"cuda attention backward: unknown dQ staging {stage!r}; expected one of "
                             f"{list(DQ_STAGES)}")
        if stage == "split":
            defs["TW_DQ_STAGE_SPLIT"] = 1
    step = check_step(pick_step(head_dim) if step is None else step, "cuda attention backward: step option")
    if softcap and head_dim == 128 and VARIANTS[variant] == 2:
        step = ()  # they spilled there (see STEP_DQ_ONLY)
    for name in step:
        if dq_atomic or name not in STEP_DQ_ONLY:  # only then: the other builds keep their cache keys
            defs[STEP_OPTIONS[name]] = 1
    return defs


def pick_variant() -> str:
    """The variant to run: ``TILEWRIGHT_CUDA_ATTN_BWD_VARIANT`` (a | b), else :data:`DEFAULT_VARIANT`."""
    name = os.environ.get(VARIANT_ENV) or DEFAULT_VARIANT
    if name not in VARIANTS:
        raise ValueError(f"{VARIANT_ENV}: unknown variant {name!r}; expected one of {sorted(VARIANTS)}")
    return name


def pick_dq_stage() -> str:
    """How the dQ-in-the-pass builds stage dQ's partials: ``TILEWRIGHT_CUDA_ATTN_BWD_DQ_STAGE`` (b64 | split), else
    :data:`DEFAULT_DQ_STAGE` ("split"). "split" trades the 64-bit stores' 2-way bank conflicts for twice the (32-bit)
    stores and a select each (the kernel's TW_DQ_STAGE_SPLIT); "b64" keeps the 64-bit stores (the A/B switch)."""
    stage = os.environ.get(DQ_STAGE_ENV) or DEFAULT_DQ_STAGE
    if stage not in DQ_STAGES:
        raise ValueError(f"{DQ_STAGE_ENV}: unknown staging {stage!r}; expected one of {list(DQ_STAGES)}")
    return stage


def check_step(names, what: str) -> tuple:
    """``names`` (step options) in :data:`STEP_OPTIONS`' order, each once; ValueError naming ``what`` for an unknown
    one."""
    names = tuple(names)
    for name in names:
        if name not in STEP_OPTIONS:
            raise ValueError(f"{what}: unknown {name!r}; expected some of {list(STEP_OPTIONS)}")
    return tuple(name for name in STEP_OPTIONS if name in names)


def pick_step(head_dim: int | None = None) -> tuple:
    """The dK / dV step's changes: ``TILEWRIGHT_CUDA_ATTN_BWD_STEP``, comma-separated names of :data:`STEP_OPTIONS`
    ("defer", "stsm", "lds64"; "none" or empty: none), else the build head dim's (:data:`DEFAULT_STEP_BY_HEAD_DIM`;
    ``head_dim`` None or another: :data:`DEFAULT_STEP`)."""
    value = os.environ.get(STEP_ENV)
    if value is None:
        build = kernel_head_dim(head_dim) if head_dim is not None else None
        return DEFAULT_STEP_BY_HEAD_DIM.get(build, DEFAULT_STEP)
    return check_step((n.strip() for n in value.split(",") if n.strip() not in ("", "none")), STEP_ENV)


def build_check_builds() -> list:
    """``tilewright build-check`` rows: (label, defines, dynamic smem[, markers]); the two-consumer build must also
    contain USETMAXREG."""
    rows = []
    for name, d, c, f, *options in BUILD_CHECK_BUILDS:
        var, dq_atomic = name.split("+")[0], name.endswith("+dq")
        window, capped, offset, packed, b64 = (list(options) + [False] * 5)[:5]
        step = options[5] if len(options) > 5 else DEFAULT_STEP
        label = f"dkdv {name} hdim{d} {'causal' if c else 'full'} {'fp16' if f else 'bf16'}"
        label += " window" * window + " softcap" * capped + " offset" * offset + " varlen" * packed
        label += " dq-b64" * b64 + "".join(f" {option}" for option in step)
        row = (label, defines(d, c, f, var, dq_atomic, window, capped, offset, packed,
                              "b64" if b64 else DEFAULT_DQ_STAGE, step), smem_bytes(d, var, dq_atomic, packed))
        markers = ("USETMAXREG",) if VARIANTS[var] == 2 else ()
        markers += ("UTMAREDG",) if dq_atomic else ()  # dQ's TMA reduce-adds
        rows.append(row + (markers,) if markers else row)
    return rows


SPLIT_ENV = "TILEWRIGHT_CUDA_ATTN_BWD_HEADS_PER_CTA"
# every switch the op layer's plan of a backward call reads, or the build of its bound dK / dV launch (ops/attention.py
# keys its plans and replays on them)
PLAN_SWITCHES = (ENV, VARIANT_ENV, DQ_ENV, SPLIT_ENV, DQ_STAGE_ENV, STEP_ENV)
SPLIT_MIN_GROUP = 4  # query heads a KV head; and keys, below which a split group measured no faster:
SPLIT_MIN_KEYS = 2560


def heads_per_cta(ctas: int, group: int, sms: int, keys: int) -> int:
    """Query heads of a GQA group one dK / dV CTA walks: the whole group, unless the grid (``ctas`` = key blocks x KV
    heads x batch) leaves SMs idle on a long sequence (``keys``) with a group of >= 4 heads - then two slices of it,
    each CTA writing fp32 partial dK / dV that are added up afterwards (:func:`new_partials`). Why: a 28 / 4-head
    layer at 3000 keys has 96 CTAs on 132 SMs, each walking all 7 query heads in turn. Measured (H200, fwd + bwd
    through the op, `perf/results/h200/attention/group_split_ab_2026-11-29_0138.csv`): two slices 0.935 -> 0.641 ms
    there (causal, head dim 96), 1.525 -> 1.066 at 32 / 4 x 4096, 2.94 -> 2.37 at 16 / 2 x 8192; at 2048 keys and
    below the partials' pass and the extra K / V loads cost more than the shorter chain saves (32 / 8 x 1024:
    0.457 -> 0.554); more slices than two measured no better and sometimes worse (28 / 4 x 3000: three 0.954).
    ``TILEWRIGHT_CUDA_ATTN_BWD_HEADS_PER_CTA`` (an integer) overrides the rule."""
    value = os.environ.get(SPLIT_ENV)
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{SPLIT_ENV}: {value!r} is not a positive integer")
        return min(group, int(value))
    if group < SPLIT_MIN_GROUP or ctas >= sms or keys < SPLIT_MIN_KEYS:
        return group
    return -(-group // 2)


def _group_slice(q, k, heads_per_cta) -> int:
    """The query heads a dK / dV CTA walks: the whole GQA group for None, else ``heads_per_cta`` - ValueError naming
    it outside [1, group]."""
    group = q.shape[1] // k.shape[1]
    heads = group if heads_per_cta is None else int(heads_per_cta)
    if not 1 <= heads <= group:
        raise ValueError(f"cuda attention backward: heads_per_cta {heads_per_cta} must be in [1, {group}] (the "
                         f"GQA group)")
    return heads


def new_partials(q, k, dk, heads: int | None):
    """A fresh fp32 buffer for a split group's partial dK / dV - (2 (dK, dV), slices, B, Hkv, Skv, build head dim)
    for dk's (B, Hkv, Skv, D) (a packed batch's (1, Hkv, total, D) view: B = 1) - or None when ``heads`` (query heads
    a CTA walks) is None or the whole group: no split."""
    group = q.shape[1] // k.shape[1]
    if heads is None or heads >= group:
        return None
    B, Hkv, Skv, _ = dk.shape
    return torch.empty((2, -(-group // heads), B, Hkv, Skv, kernel_head_dim(q.shape[-1])), device=q.device,
                       dtype=torch.float32)


def add_partials(partial: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> None:
    """dk / dv = the sum of a split group's fp32 partials over its slices (the head-dim columns dk has). One sum over
    both and one foreach copy: four torch calls where a sum and a copy each were eight (host time: this runs in
    every backward step of a split group)."""
    D = dk.shape[-1]
    summed = partial.sum(1)
    torch._foreach_copy_([dk, dv], [summed[0, ..., :D], summed[1, ..., :D]])


def dq_fits(dq, q) -> bool:
    """Whether the dQ kernel can write ``dq``: shaped like q, same dtype, unit last stride, 4-byte aligned rows."""
    return dq.shape == q.shape and dq.dtype == q.dtype and dq.stride(-1) == 1 and dq.data_ptr() % 4 == 0 and \
        all(s % 2 == 0 for s in dq.stride()[:3])


def dq_smem_bytes(head_dim: int) -> int:
    """The dQ kernel's dynamic shared memory: the resident Q + dO blocks, STAGES x (K + V) blocks, mbarriers, slack."""
    return 1024 + 2 * BLOCK_M * head_dim * 2 + 2 * STAGES * DQ_BLOCK_N * head_dim * 2 + (1 + 2 * STAGES) * 8


def dq_mode() -> str:
    """How the op layer computes dQ next to the CUDA dK / dV kernel: ``TILEWRIGHT_CUDA_ATTN_BWD_DQ`` =
    ``atomic`` (in the dK / dV pass, reductions into an fp32 workspace; variant b), ``kernel`` (the separate
    deterministic dQ kernel) or ``triton`` (Triton's dQ kernel); default :data:`DEFAULT_DQ_MODE`. ``atomic`` becomes
    ``kernel`` while ``torch.use_deterministic_algorithms(True)`` is on: the reductions' order varies run to run."""
    mode = os.environ.get(DQ_ENV) or DEFAULT_DQ_MODE
    if mode not in DQ_MODES:
        raise ValueError(f"{DQ_ENV}: unknown mode {mode!r}; expected one of {list(DQ_MODES)}")
    if mode == "atomic" and torch.are_deterministic_algorithms_enabled():
        return "kernel"
    return mode


# Below this many CTAs (key blocks x kv heads x batch) the dK / dV grid leaves most of the 132 SMs idle; Triton's
# backward (64-key blocks and a dQ grid over the query heads) spreads better: B1 16/4 512 hdim 128 causal, 16 CTAs,
# ran 0.70x Triton's; B1 28/4 3000 hdim 96 causal, 96 CTAs, ran 1.17x Triton's (H100).
MIN_CTAS = 96
# dQ's partial sums from every key block of a head land on that head's Sq rows: with many more keys than queries
# those reduce-adds contend (2 x 16 x 512:4096 hdim 128 ran 0.77x Triton's).
MAX_KEYS_PER_QUERY = 2


def enabled(head_dim: int, causal: bool, batch: int = 1, kv_heads: int = 1, sq: int = 1, skv: int = 1) -> bool:
    """Whether the op layer uses the kernels for a call of this shape and mask (where :func:`constraints` takes
    it): ``TILEWRIGHT_CUDA_ATTN_BWD=1`` always, ``=0`` never; unset, where the CUDA backward (variant b, dQ in the
    pass) measured faster than Triton's whole backward on H100: head dim 128 (1.24-1.31x, causal or not, GQA) and
    causal head dim 64 (1.27x), with at least :data:`MIN_CTAS` key-block CTAs and at most
    :data:`MAX_KEYS_PER_QUERY` keys per query; head dims padded onto the 128 build (multiples of 8 from 72 to 120:
    1.17-1.36x at 80, 96 and 112, causal or not, GQA). Not non-causal head dim 64 (0.90x at 8 heads x 8192: the
    elementwise work of a 64-wide head is as large as a 128-wide one's, its products half as large)."""
    value = os.environ.get(ENV)
    if value in ("0", "1"):
        return value == "1"
    if value:
        raise ValueError(f"{ENV}: {value!r} is not 0 or 1")
    ctas = -(-skv // block_n(DEFAULT_VARIANT)) * kv_heads * batch
    measured = 64 < head_dim <= 128 or (head_dim == 64 and causal)
    return measured and ctas >= MIN_CTAS and skv <= MAX_KEYS_PER_QUERY * sq


def constraints(do, q, k, v, dk, dv) -> tuple[bool, str]:
    """Whether the kernel takes these tensors at all, and why not: bf16 / fp16 CUDA tensors, head dim 64 or 128 for
    q, k, v and dO alike, GQA, 16-byte aligned TMA strides for q, k, v, dO, and dk / dv with a unit last stride and
    4-byte aligned rows. Every mask the op has (causal with either alignment, sliding windows) and the soft cap are
    taken."""
    if not all(isinstance(t, torch.Tensor) and t.is_cuda for t in (do, q, k, v, dk, dv)):
        return False, "CUDA tensors only"
    if q.dtype not in HALF_DTYPES or any(t.dtype != q.dtype for t in (do, k, v, dk, dv)):
        return False, f"dtype {q.dtype} (bfloat16 / float16, all equal)"
    if q.dim() != 4 or any(t.dim() != 4 for t in (do, k, v, dk, dv)):
        return False, "4-D (B, H, S, D) tensors only"
    B, Hq, Sq, D = q.shape
    if kernel_head_dim(D) is None or k.shape[-1] != D or v.shape[-1] != D or do.shape != q.shape:
        return False, (f"head dim {D} (the CUDA dK / dV kernel takes 64 and multiples of 8 from 72 to 128, equal for "
                       "q, k, v and dO)")
    if k.shape != v.shape or dk.shape != k.shape or dv.shape != v.shape or k.shape[0] != B:
        return False, "k, v, dk, dv must share one (B, Hkv, Skv, D) shape"
    Hkv, Skv = k.shape[1], k.shape[2]
    if Hkv == 0 or Hq % Hkv or min(B, Hq, Sq, Skv) == 0:
        return False, "empty problem or Hq not a multiple of Hkv"
    if B > 65535 or Hkv > 65535:
        return False, "more than 65535 batches or kv heads (grid limits)"
    if Sq + Skv >= MAX_BAND_SPAN:
        return False, "Sq + Skv >= 2^30 (the band's row + offset sums are 32-bit)"
    for t, name in ((q, "q"), (k, "k"), (v, "v"), (do, "grad_out")):
        lay, why = tma_dims_strides(t)
        if lay is None:
            return False, f"{name}: {why}"
    for t, name in ((dk, "dk"), (dv, "dv")):
        if t.stride(-1) != 1 or t.data_ptr() % 4 or any(s % 2 for s in t.stride()[:3]):
            return False, f"{name}: unit last stride and 4-byte aligned rows needed (paired stores)"
    if max(smem_bytes(kernel_head_dim(D), var) for var in VARIANTS) > SMEM_OPTIN_BYTES:  # pragma: no cover
        return False, f"head dim {D} needs more shared memory than sm_90 has"
    padded = "" if D in HEAD_DIMS else f" on the {kernel_head_dim(D)} build"
    return True, f"bf16/fp16, head dim {D}{padded}, TMA-aligned"


def kernel_head_dim(head_dim: int) -> int | None:
    """The build (TW_HDIM) a head dim runs on, or None: 64 and 128 as they are, a multiple of 8 from 72 to 127 on the
    128 build; nothing above 128 (dK + dV of a 256-wide head do not fit a consumer's registers)."""
    build = build_head_dim(head_dim)
    return build if build in HEAD_DIMS else None


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


def _check_statistics(q, lse, delta, scale: float, softcap: float = 0.0) -> None:
    """The row statistics both kernels read (contiguous fp32 (B, Hq, Sq) LSE and delta), a finite, positive scale
    and a finite, non-negative soft cap; ValueError naming what is wrong."""
    B, Hq, Sq, _ = q.shape
    for t, name in ((lse, "lse"), (delta, "delta")):
        if t.shape != (B, Hq, Sq) or t.dtype != torch.float32 or not t.is_contiguous():
            raise ValueError(f"cuda attention backward: {name} must be a contiguous float32 (B, Hq, Sq) tensor")
    if not (scale > 0.0 and scale < float("inf")):
        raise ValueError(f"cuda attention backward: scale {scale} must be finite and > 0")
    if not (softcap >= 0.0 and softcap < float("inf")):
        raise ValueError(f"cuda attention backward: softcap {softcap} must be finite and >= 0 (0: none)")


def _band_arguments(Sq: int, Skv: int, band: tuple, packed: Varlen | None) -> list:
    """The kernels' band_upper / band_lower (dense: the clamped KeyBand; packed: offsets from each sequence's
    bottom-right corner)."""
    edges = band_offsets(Sq, Skv, *band) if packed is None else packed_band_offsets(packed.max_q, packed.max_k, *band)
    return [ctypes.c_int32(x) for x in edges]


def _packed_arguments(packed: Varlen | None) -> list:
    """The trailing cu_q / cu_k pointers (null for dense builds, which do not read them)."""
    return [launch.pointer("CU_Q", None if packed is None else packed.cu_q),
            launch.pointer("CU_K", None if packed is None else packed.cu_k)]


def _prepare(do, q, k, v, lse, delta, dk, dv, causal: bool, scale: float, variant: str, dq_accum=None,
             band: tuple[int, int] = (0, None), softcap: float = 0.0, packed: Varlen | None = None, stats=None,
             heads: int | None = None, partial=None, dq_stage: str | None = None, step: tuple | None = None):
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    bn = block_n(variant)
    atomic = dq_accum is not None
    build = kernel_head_dim(D)
    # packed: each sequence has its own bottom-right offset, a runtime upper edge
    fn, maps = _function_and_maps(KERNEL, smem_bytes(build, variant, atomic, packed is not None),
                                  defines(build, causal, q.dtype == torch.float16, variant, atomic, band[1] is not None,
                                          softcap > 0, causal and (band[0] != 0 or packed is not None),
                                          packed is not None, dq_stage, step), q, k, v, do, bn)
    if atomic:  # the fp32 workspace in 32-column (128-byte) by 64-row boxes, the kernel's staging layout
        (dims, strides), _ = tma_dims_strides(dq_accum)
        with torch.cuda.device(q.device):
            tm_dq = launch.tag(launch.driver().encode_tiled("float32", dq_accum.data_ptr(), dims, strides,
                                                            (32, 64, 1, 1), 128), "DQ_ACCUM")
    else:
        tm_dq = launch.TensorMap()  # unused by the build: an empty map fills the parameter
    group = Hq // Hkv
    heads = heads or group
    grid = (-(-(Skv if packed is None else packed.max_k) // bn), Hkv * -(-group // heads),
            B if packed is None else packed.batch)
    # dense builds read the packed statistics (STATS), packed batches lse / delta themselves (null STATS)
    args = [*maps, tm_dq, launch.pointer("LSE", lse), launch.pointer("DELTA", delta),
            launch.pointer("STATS", stats if packed is None else None), launch.pointer("DK", dk),
            launch.pointer("DV", dv), *(ctypes.c_int64(s) for s in dk.stride()[:3]),
            *(ctypes.c_int64(s) for s in dv.stride()[:3]), ctypes.c_int32(Sq), ctypes.c_int32(Skv),
            ctypes.c_int32(Hq), ctypes.c_int32(Hq // Hkv), ctypes.c_float(scale * LOG2E), ctypes.c_float(scale),
            ctypes.c_int32(D), *_band_arguments(Sq, Skv, band, packed), *softcap_args(scale, softcap),
            ctypes.c_int32(heads), launch.pointer("DKV_PARTIAL", partial), *_packed_arguments(packed)]
    return fn, grid, args


def launch_dkdv(do, q, k, v, lse, delta, dk, dv, causal: bool, scale: float, variant: str | None = None,
                dq_accum: torch.Tensor | None = None, validate: bool = True, *, causal_offset: int = 0,
                window_offset: int | None = None, softcap: float = 0.0, packed: Varlen | None = None,
                stats: torch.Tensor | None = None, heads_per_cta: int | None = None) -> None:
    """dK and dV of ``softmax(scale q k^T [mask]) v`` into ``dk`` / ``dv`` (sm_90a kernel); the mask is the
    forward's band and ``softcap`` its logit cap (``causal``, ``causal_offset``, ``window_offset``, ``softcap``:
    attention_sm90.launch_attention).

    lse: the forward's natural-log LSE, delta: ``rowsum(dO * O)``, both contiguous fp32 (B, Hq, Sq). Raises
    ValueError (naming the rule) for tensors :func:`constraints` rejects, and for a scale that is not finite and
    positive. ``variant``: a | b (default :func:`pick_variant`). ``dq_accum``: a zeroed fp32 (B, Hq, Sq, D) workspace
    (any layout a TMA map can address: the op gives it dq's dim order, so its conversion is a streaming copy) that
    also receives dQ (``scale * dS K``, added by TMA reduce-adds: not bitwise reproducible run to run);
    two consumer warpgroups (variant b) only. ``validate=False``: the caller has checked the tensors against
    :func:`constraints` for this signature (the op layer, once per signature) - nothing is checked again.
    ``packed``: the tensors are (1, H, total, D) views of packed sequences with these offsets (flash-attn's varlen
    layout; the band's offsets relative to each sequence's bottom-right corner, as the packed forward takes them).
    ``stats``: lse and delta already in the dense kernel's layout (:func:`pack_statistics`; the op layer's come from
    the Triton preprocess), else made here; packed batches read lse / delta and take no ``stats``.
    ``heads_per_cta``: split each GQA group over CTAs this many query heads each (:func:`heads_per_cta`; default:
    the whole group), dk / dv then added up from fp32 partials."""
    if packed is not None and stats is not None:
        raise ValueError("cuda attention backward: stats are for dense calls; packed batches read lse / delta")
    if validate:
        ok, why = constraints(do, q, k, v, dk, dv)
        if not ok:
            raise ValueError(f"cuda attention backward: {why}")
        _check_statistics(q, lse, delta, scale, softcap)
        if packed is not None:
            check_packed(packed, q, "cuda attention backward")
        if stats is not None:
            check_statistics_pack(stats, q)
    if packed is None and stats is None:
        stats = pack_statistics(lse, delta)
    heads = _group_slice(q, k, heads_per_cta)
    partial = new_partials(q, k, dk, heads)
    variant = variant or pick_variant()
    if variant not in VARIANTS:
        raise ValueError(f"cuda attention backward: unknown variant {variant!r}; expected one of {sorted(VARIANTS)}")
    if dq_accum is not None and validate:
        if VARIANTS[variant] != 2:
            raise ValueError(f"cuda attention backward: dq_accum needs variant 'b' (two consumers), not {variant!r}")
        if dq_accum.shape != q.shape or dq_accum.dtype != torch.float32 or dq_accum.device != q.device or \
                tma_dims_strides(dq_accum)[0] is None:
            raise ValueError("cuda attention backward: dq_accum must be a float32 tensor shaped like q on q's device, "
                             "unit-stride in D, other strides multiples of 16 bytes (a TMA map)")
    band = (causal_offset if causal else 0, window_offset)
    stage = None if dq_accum is None else pick_dq_stage()  # the dQ staging switch names another build
    step = pick_step(q.shape[-1])  # and so do the step's options
    key = (q.device.index, q.dtype, bool(causal), float(scale), variant, band, float(softcap), stage, step,
           *((t.data_ptr(), t.shape, t.stride()) for t in (do, q, k, v, dk, dv)), lse.data_ptr(), delta.data_ptr(),
           None if stats is None else stats.data_ptr(), heads, None if partial is None else partial.data_ptr(),
           None if dq_accum is None else (dq_accum.data_ptr(), dq_accum.stride()), _packed_key(packed))
    launch.launch_cached(_prepared, key, lambda: _prepare(do, q, k, v, lse, delta, dk, dv, bool(causal),
                                                          float(scale), variant, dq_accum, band, float(softcap),
                                                          packed, stats, heads, partial, stage, step),
                         q.device, threads(variant), smem_bytes(kernel_head_dim(q.shape[-1]), variant,
                                                                dq_accum is not None, packed is not None))
    if partial is not None:
        add_partials(partial, dk, dv)


def _packed_key(packed: Varlen | None):
    return None if packed is None else (packed.cu_q.data_ptr(), packed.cu_k.data_ptr(), packed.cu_q.shape[0],
                                        packed.max_q, packed.max_k)


# The address roles of the bound launches (runtime.launch.BoundCudaLaunch), in the order their calls take them.
# + "STATS" (dense), + "DQ_ACCUM" with dQ in the pass, + "DKV_PARTIAL" with a split group
DKDV_ROLES = ("DO", "Q", "K", "V", "LSE", "DELTA", "DK", "DV")
DQ_ROLES = ("DO", "Q", "K", "V", "LSE", "DELTA", "DQ")
PACKED_ROLES = ("CU_Q", "CU_K")  # last, packed batches only


def bind_dkdv(do, q, k, v, lse, delta, dk, dv, causal: bool, scale: float, variant: str, dq_accum=None,
              band: tuple[int, int | None] = (0, None), softcap: float = 0.0, packed: Varlen | None = None,
              stats=None, heads_per_cta: int | None = None, partial=None):
    """The dK / dV kernel's launch for this call's signature with only the operands' addresses left open: a
    :class:`runtime.launch.BoundCudaLaunch` called with the addresses of :data:`DKDV_ROLES` (then, for a dense call,
    ``stats``' - :func:`pack_statistics`' layout, required then - then dq_accum's, then with ``heads_per_cta`` below
    the group the fp32 partials' (:func:`new_partials`; the caller adds them up: :func:`add_partials`), then those
    of :data:`PACKED_ROLES` for a packed batch), or None if it cannot be bound. The caller has checked the
    call (:func:`constraints`) and keys the result by the signature (shapes, strides, dtypes, alignment), causal,
    scale, ``band`` ((causal_offset, window_offset), as :func:`launch_dkdv` takes them), ``softcap`` and the
    packing: a call of another signature needs its own.
    Why: a new address set re-prepares :func:`launch_dkdv`'s launch (five tensor maps encoded, ~10 us each), and
    fresh activations bring new addresses every step."""
    if (stats is None) != (packed is not None):
        raise ValueError("cuda attention backward: a dense call binds with its packed statistics (pack_statistics), "
                         "a packed batch without")
    if (partial is None) != (_group_slice(q, k, heads_per_cta) == q.shape[1] // k.shape[1]):
        raise ValueError("cuda attention backward: a split group (heads_per_cta below it) binds with its partials")
    fn, grid, args = _prepare(do, q, k, v, lse, delta, dk, dv, bool(causal), float(scale), variant, dq_accum, band,
                              float(softcap), packed, stats, heads_per_cta, partial)
    roles = dict(zip(DKDV_ROLES, (do, q, k, v, lse, delta, dk, dv)))
    if stats is not None:
        roles["STATS"] = stats
    if dq_accum is not None:
        roles["DQ_ACCUM"] = dq_accum
    if partial is not None:
        roles["DKV_PARTIAL"] = partial
    if packed is not None:
        roles.update(CU_Q=packed.cu_q, CU_K=packed.cu_k)
    return launch.bind_cuda(fn, grid, threads(variant),
                            smem_bytes(kernel_head_dim(q.shape[-1]), variant, dq_accum is not None,
                                       packed is not None), args, roles, q.device)


def bind_dq(do, q, k, v, lse, delta, dq, causal: bool, scale: float, band: tuple[int, int | None] = (0, None),
            softcap: float = 0.0, packed: Varlen | None = None):
    """:func:`bind_dkdv` for the dQ kernel: called with the addresses of :data:`DQ_ROLES` (then
    :data:`PACKED_ROLES`')."""
    fn, grid, args = _prepare_dq(do, q, k, v, lse, delta, dq, bool(causal), float(scale), band, float(softcap),
                                 packed)
    roles = dict(zip(DQ_ROLES, (do, q, k, v, lse, delta, dq)))
    if packed is not None:
        roles.update(CU_Q=packed.cu_q, CU_K=packed.cu_k)
    return launch.bind_cuda(fn, grid, DQ_THREADS, dq_smem_bytes(kernel_head_dim(q.shape[-1])), args, roles,
                            q.device)


_prepared_dq: dict = {}


def _prepare_dq(do, q, k, v, lse, delta, dq, causal: bool, scale: float, band: tuple[int, int | None] = (0, None),
                softcap: float = 0.0, packed: Varlen | None = None):
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    build = kernel_head_dim(D)
    fn, maps = _function_and_maps(KERNEL_DQ, dq_smem_bytes(build),
                                  defines(build, causal, q.dtype == torch.float16, window=band[1] is not None,
                                          softcap=softcap > 0, upper_offset=causal and (band[0] != 0 or
                                                                                        packed is not None),
                                          packed=packed is not None, step=DEFAULT_STEP),  # (dK / dV's only)
                                  q, k, v, do, DQ_BLOCK_N)
    grid = (-(-(Sq if packed is None else packed.max_q) // BLOCK_M), Hq, B if packed is None else packed.batch)
    args = [*maps, launch.pointer("LSE", lse), launch.pointer("DELTA", delta), launch.pointer("DQ", dq),
            *(ctypes.c_int64(s) for s in dq.stride()[:3]), ctypes.c_int32(Sq), ctypes.c_int32(Skv),
            ctypes.c_int32(Hq), ctypes.c_int32(Hq // Hkv), ctypes.c_float(scale * LOG2E), ctypes.c_float(scale),
            ctypes.c_int32(D), *_band_arguments(Sq, Skv, band, packed), *softcap_args(scale, softcap),
            *_packed_arguments(packed)]
    return fn, grid, args


def launch_dq(do, q, k, v, lse, delta, dq, causal: bool, scale: float, validate: bool = True, *,
              causal_offset: int = 0, window_offset: int | None = None, softcap: float = 0.0,
              packed: Varlen | None = None) -> None:
    """dQ of ``softmax(scale q k^T [mask]) v`` into ``dq`` (sm_90a kernel; deterministic: each CTA owns its rows).
    Same inputs, mask, packing and rules as :func:`launch_dkdv`; dq is shaped like q (unit last stride, 4-byte
    aligned rows)."""
    if validate:
        ok, why = constraints(do, q, k, v, k, v)  # dk / dv stand-ins: k and v have their shape and layout rules
        if not ok:
            raise ValueError(f"cuda attention backward: {why}")
        if not dq_fits(dq, q):
            raise ValueError("cuda attention backward: dq must be shaped like q, same dtype, unit last stride, 4-byte "
                             "aligned rows")
        _check_statistics(q, lse, delta, scale, softcap)
        if packed is not None:
            check_packed(packed, q, "cuda attention backward")
    band = (causal_offset if causal else 0, window_offset)
    key = (q.device.index, q.dtype, bool(causal), float(scale), band, float(softcap),
           *((t.data_ptr(), t.shape, t.stride()) for t in (do, q, k, v, dq)), lse.data_ptr(), delta.data_ptr(),
           _packed_key(packed))
    launch.launch_cached(_prepared_dq, key, lambda: _prepare_dq(do, q, k, v, lse, delta, dq, bool(causal),
                                                                float(scale), band, float(softcap), packed),
                         q.device, DQ_THREADS, dq_smem_bytes(kernel_head_dim(q.shape[-1])))
