"""Config spaces for the Triton kernels, and the pruning that keeps a sweep short and sensible.

A config is a ``triton.Config`` over BLOCK_M/N/K, GROUP, TILE_ORDER, num_warps and num_stages. The lists are kept
short on purpose: Triton's on-disk autotune cache is keyed on the whole list, and every entry costs a compile and a
benchmark on first use of a shape bucket.
"""
from __future__ import annotations

import itertools

import triton

from .._codes import TILE_ORDERS

ROW_MAJOR, GROUPED, MORTON, HILBERT = (TILE_ORDERS[k] for k in ("row_major", "grouped", "morton", "hilbert"))

# The keyword arguments of every GEMM config (the kernel's tunable constexprs); num_warps and num_stages ride beside
# them. The tuning cache holds configs as JSON and checks a stored one against this list before a launch uses it.
GEMM_CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP", "TILE_ORDER", "EPI_SPLIT", "TMA_LOADS", "PERSISTENT",
                    "FLATTEN", "SPLIT_K")
# Keys a stored config may lack (tables and caches written before the key existed), with the value they mean.
GEMM_CONFIG_DEFAULTS = {"SPLIT_K": 1}

# Shared memory per block on sm_90 (227 KB opt-in); sm_80 has 163 KB, sm_89/sm_120 99 KB. The pruner takes the
# device's number when there is a device.
from .._env import REFERENCE_SMS, SMEM_OPTIN_BYTES

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) for problems with many tiles: wgmma-sized tiles.
_LARGE_TILES = [
    (128, 256, 64, 8, 3),
    (128, 256, 64, 8, 4),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
]
_LARGE_ORDERS = [(GROUPED, 8), (MORTON, 8), (HILBERT, 8), (ROW_MAJOR, 8)]
# (PERSISTENT, FLATTEN): #SMs programs looping over tiles, with or without the tile and K loops fused into one
# pipeline, or one program per tile (the hardware scheduler hands out tiles; no tail imbalance inside a program).
_SCHEDULES = [(True, False), (True, True), (False, False)]

# Decode-like problems (M <= 64): memory bound on reading B once, so small BLOCK_N gives enough programs to keep
# every SM streaming, and a deep pipeline keeps enough bytes in flight per SM.
_SMALL_M_TILES = [  # (tiles that spilled with pointer loads and an epilogue were dropped: 16x32x512, 64x64x256)
    (16, 64, 128, 4, 4),
    (16, 32, 256, 4, 4),
    (32, 32, 256, 4, 4),
    (64, 64, 128, 4, 4),
    (64, 128, 64, 4, 4),
    (128, 32, 128, 4, 4),
    # Deeper rings and a wider N tile, from a decode sweep on the H200 (M 1-128, pointer loads; 6-8 stages keep
    # 150-200 KB of B in flight per SM): 16x32x256 s6 ran 14.7 us at 16 x 4096 x 4096 (s4: 15.4), 64x32x128 s8
    # 15.3 us at 64 x 4096 x 4096, 64x64x128 s6 17.0 us at 128 x 4096 x 4096 (the space's best before: 21.4),
    # 16x128x128 37.7 us at 16 x 14336 x 4096 (perf/results/h200/gemm/decode_sweep_2026-11-28.txt).
    (16, 32, 256, 4, 6),
    (16, 128, 128, 4, 4),
    (64, 32, 128, 4, 8),
    (64, 64, 128, 4, 6),
]

# Split-K (SPLIT_K programs share one tile's K loop; gemm._split_k_combine adds their fp32 partial tiles in a fixed
# order, so results are bitwise reproducible): for problems whose output tiles cannot fill the SMs but whose K is
# long - the weight gradients of a training step (M = N = d_model, K = batch x sequence: 1024 x 1024 x 16384 ran
# 0.36x cuBLAS in the H100 prefill breakdown of 2026-11-26) and M = 512 rows (512 x 2048 x 5632: 0.71x). Tiles of at
# most 128 x 128 over 8 warps (64 accumulator values a thread) keep the partial tiles' reload beside the accumulator
# spill-free: 128 x 128 over 4 warps spilled 36 bytes with the full epilogue (sm_90, tests/test_triton_gemm_aot.py).
_SPLIT_K_TILES = [
    (128, 128, 64, 8, 4),
    (64, 128, 64, 4, 4),
]
SPLIT_KS = (2, 4, 8)
# Each split needs this many K steps at least, or the partial-tile traffic outweighs the parallelism it buys.
SPLIT_K_MIN_STEPS = 4
# The fp32 partial tiles of one launch live in a per-stream workspace of this size (gemm.split_k_workspace); the
# pruner keeps configs whose tiles x SPLIT_K x BLOCK_M x BLOCK_N x 4 bytes fit, and one arrival counter per tile.
SPLIT_K_WORKSPACE_BYTES = 32 << 20
SPLIT_K_MAX_TILES = 4096

# Below this many 128 x 128 tiles (one wave of the reference card's SMs) a problem with M > 256 also gets the
# small-tile list, whose 64-row tiles double the programs (see prune_gemm_configs).
FEW_TILES = REFERENCE_SMS

# fp32 operands: the dot runs as FFMA chains on the CUDA cores (no wgmma), each thread holding its slice of the
# accumulator plus the BLOCK_K slice sum (gemm._mma), so tiles stay small: these two compile without spills for every
# epilogue and the RMSNorm prologue, with TMA or pointer loads (larger ones spilled 16-2,700 bytes, sm_90, ptxas 12.9).
_FP32_TILES = [
    (32, 32, 32, 4, 3),
    (64, 64, 32, 4, 3),
]

# Under TRITON_INTERPRET=1 each (program x K step) costs ~2-3 ms whatever the tile: big tiles, one config.
INTERPRETER_CONFIG = triton.Config(
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP": 2, "TILE_ORDER": GROUPED, "EPI_SPLIT": 2,
     "TMA_LOADS": True, "PERSISTENT": True, "FLATTEN": False, "SPLIT_K": 1},
    num_warps=4, num_stages=2)


def gemm_configs() -> list[triton.Config]:
    """The full GEMM config list (large tiles x tile orders, plus small-M tiles)."""
    configs = []
    for (bm, bn, bk, warps, stages), (order, group) in itertools.product(_LARGE_TILES, _LARGE_ORDERS):
        # 128x256 / 256x128 accumulators take 128 registers a thread: their epilogue runs in 4 chunks, 128x128 in 2
        # (the splits that compile without spills with every epilogue; tests/test_triton_gemm_aot.py checks).
        split = 4 if bm * bn > 128 * 128 else 2
        for persistent, flatten in _SCHEDULES:
            configs.append(_config(bm, bn, bk, warps, stages, order=order, group=group, split=split,
                                   persistent=persistent, flatten=flatten, tma=True))
    # Pointer loads for large M: the only path for unaligned operands (tiles <= 128x128, see the pruner).
    for persistent in (True, False):
        configs.append(_config(128, 128, 64, 8, 4, split=2, persistent=persistent, tma=False))
    # Small M: pointer loads often beat TMA there (measured: decode16 8.6 us with pointers, 12.1 us with TMA, on
    # H200 for 16x32x256 tiles), so both are in the space.
    for (bm, bn, bk, warps, stages), persistent, tma in itertools.product(_SMALL_M_TILES, (True, False),
                                                                           (True, False)):
        configs.append(_config(bm, bn, bk, warps, stages, persistent=persistent, tma=tma))
    for (bm, bn, bk, warps, stages), persistent, tma in itertools.product(_FP32_TILES, (True, False), (True, False)):
        configs.append(_config(bm, bn, bk, warps, stages, persistent=persistent, tma=tma))
    # Split-K: one program per (tile, split) - the hardware scheduler balances the uneven finish of the last
    # arrivals, which run the epilogue - with TMA loads, or pointer loads for operands TMA cannot describe.
    for (bm, bn, bk, warps, stages), split_k, tma in itertools.product(_SPLIT_K_TILES, SPLIT_KS, (True, False)):
        configs.append(_config(bm, bn, bk, warps, stages, split=2 if bm * bn > 64 * 128 else 1, persistent=False,
                               tma=tma, split_k=split_k))
    return configs


def split_k_fits(M: int, N: int, K: int, cfg: triton.Config) -> bool:
    """Whether ``cfg``'s SPLIT_K can serve an (M, N, K) problem: every split gets SPLIT_K_MIN_STEPS K steps, the
    partial tiles fit the workspace and the tiles the counters. True for SPLIT_K == 1."""
    kw = cfg.kwargs
    split_k = kw.get("SPLIT_K", 1)
    if split_k == 1:
        return True
    tiles = triton.cdiv(M, kw["BLOCK_M"]) * triton.cdiv(N, kw["BLOCK_N"])
    return (K >= split_k * SPLIT_K_MIN_STEPS * kw["BLOCK_K"] and tiles <= SPLIT_K_MAX_TILES
            and tiles * split_k * kw["BLOCK_M"] * kw["BLOCK_N"] * 4 <= SPLIT_K_WORKSPACE_BYTES)


# Largest BLOCK_M * BLOCK_N for the fp16 RMSNorm prologue (prune_gemm_configs): the 128x256 tile computed wrong rows
# and NaN there (deterministically with the g scale loaded from memory, now and then with it reduced in-kernel); the
# root cause inside the compiler is not isolated, so the tile is excluded instead of guessed at.
_RESCALE_G_MAX_TILE = 128 * 128


def _is_fp32_tile(cfg: triton.Config) -> bool:
    kw = cfg.kwargs
    return (kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], cfg.num_warps, cfg.num_stages) in _FP32_TILES


def _config(bm, bn, bk, warps, stages, *, order=GROUPED, group=8, split=1, persistent=True, flatten=False,
            tma=True, split_k=1) -> triton.Config:
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP": group, "TILE_ORDER": order,
                          "EPI_SPLIT": split, "TMA_LOADS": tma, "PERSISTENT": persistent, "FLATTEN": flatten,
                          "SPLIT_K": split_k},
                         num_warps=warps, num_stages=stages)


def gemm_smem_bytes(cfg: triton.Config, in_bytes: int, out_bytes: int, tma_store: bool) -> int:
    """Shared memory a config needs: the operand ring plus the epilogue staging tile for a TMA store."""
    kw = cfg.kwargs
    ring = cfg.num_stages * (kw["BLOCK_M"] * kw["BLOCK_K"] + kw["BLOCK_K"] * kw["BLOCK_N"]) * in_bytes
    epilogue = kw["BLOCK_M"] * kw["BLOCK_N"] // kw["EPI_SPLIT"] * out_bytes if tma_store else 0
    return ring + epilogue


def prune_gemm_configs(configs, M: int, N: int, K: int, in_bytes: int, out_bytes: int, tma_store: bool,
                       smem_limit: int = SMEM_OPTIN_BYTES, use_tma: bool = True,
                       periodic_residual: bool = False, precise_acc: bool = False,
                       rescale_g: bool = False, norm: bool = False,
                       fallback: bool = True) -> list[triton.Config]:
    """Drop configs that cannot fit shared memory or are silly for the shape.

    * M <= 64: only the small-tile list (a 128-row tile would be >= 50% padding);
    * 64 < M <= 256: both lists (large tiles leave most SMs idle when there are few tile rows);
    * M > 256: the large-tile list, plus the small list's tiles of >= 64 rows while 128 x 128 tiles would not fill
      one wave of ``FEW_TILES`` SMs (M = 512: 512 x 2048 has 64 such tiles for 132 SMs, and its best large tile ran
      0.66x cuBLAS in the H100 sweep of 2026-11-26, 512 x 2048 x 5632 0.40x);
    * with a single row or column of tiles every tile order is the same, so only GROUPED survives;
    * BLOCK_N or BLOCK_K far beyond the problem's N or K are dropped;
    * the pointer path (no TMA) and a broadcast (periodic) residual, which needs an integer division per row in the
      epilogue, keep 128-row tiles at <= 128x128 with 8 warps: larger ones spill (tests/test_triton_gemm_aot.py);
    * FP8 precise accumulation holds a second accumulator: at most 64 accumulator values per thread;
    * fp32 operands (``in_bytes == 4``) use only the FFMA tiles (``_FP32_TILES``), and 16-bit/FP8 operands never do;
    * the fp16 RMSNorm prologue (``rescale_g``) keeps tiles of at most 128x128: with 128x256 tiles it gave wrong
      rows or NaN on sm_90 (Triton 3.6, H100: every fp16 case with N not a multiple of 8 in one sweep, found by the
      GPU fuzzer; bf16 and 128x128 tiles correct), see ``_RESCALE_G_MAX_TILE``;
    * split-K (``SPLIT_K`` > 1) only where the problem's 128 x 128 tiles would not fill one wave, never with the RMSNorm
      prologue (``norm``: its row sums of squares need the whole K) or FP8 precise accumulation, and only where
      :func:`split_k_fits` (enough K steps per split, the partial tiles fit the workspace).
    """
    kept = []
    few_tiles = triton.cdiv(M, 128) * triton.cdiv(N, 128) < FEW_TILES
    for cfg in configs:
        kw = cfg.kwargs
        if kw.get("SPLIT_K", 1) > 1 and (not few_tiles or norm or precise_acc or not split_k_fits(M, N, K, cfg)):
            continue
        if _is_fp32_tile(cfg) != (in_bytes == 4):
            continue
        if in_bytes == 4:
            if not use_tma and kw["TMA_LOADS"]:
                continue
            kept.append(cfg)
            continue
        is_small_tile = kw["BLOCK_M"] <= 64 or kw["BLOCK_N"] < 128
        if (is_small_tile and M > 256 and not (few_tiles and kw["BLOCK_M"] >= 64)) or (not is_small_tile and M <= 64):
            continue
        if gemm_smem_bytes(cfg, in_bytes, out_bytes, tma_store) > smem_limit:
            continue
        if not use_tma and kw["TMA_LOADS"]:  # descriptors not allowed: the pointer twins of these configs serve
            continue
        pointer = not kw["TMA_LOADS"]
        if (pointer or periodic_residual) and kw["BLOCK_M"] * kw["BLOCK_N"] > 128 * 128:
            continue
        if (pointer or periodic_residual) and kw["BLOCK_M"] >= 128 and cfg.num_warps < 8:
            continue
        if precise_acc and kw["BLOCK_M"] * kw["BLOCK_N"] > 64 * 32 * cfg.num_warps:
            continue
        if rescale_g and kw["BLOCK_M"] * kw["BLOCK_N"] > _RESCALE_G_MAX_TILE:
            continue
        if kw["BLOCK_N"] > 2 * max(triton.next_power_of_2(N), 16) or kw["BLOCK_K"] > 2 * max(triton.next_power_of_2(K), 16):
            continue
        tiles_m = triton.cdiv(M, kw["BLOCK_M"])
        tiles_n = triton.cdiv(N, kw["BLOCK_N"])
        if min(tiles_m, tiles_n) <= 1 and kw["TILE_ORDER"] != GROUPED:
            continue
        kept.append(cfg)
    if not kept and fallback:  # never return nothing (fallback=False: check whether given configs survive)
        kept = [min(configs, key=lambda c: gemm_smem_bytes(c, in_bytes, out_bytes, tma_store))]
    return kept


def fit_shared_memory(cfg: triton.Config, in_bytes: int, out_bytes: int, tma_store: bool,
                      smem_limit: int = SMEM_OPTIN_BYTES) -> triton.Config:
    """``cfg``, or the nearest config that fits ``smem_limit``: fewer pipeline stages (down to 2), then a halved
    BLOCK_K. The defaults below are sized for 16-bit operands; fp32 operands double the ring (128x128x64 with 4
    stages asked 262,160 bytes of 232,448 on H100, found by the GPU fuzzer)."""
    while gemm_smem_bytes(cfg, in_bytes, out_bytes, tma_store) > smem_limit - _SMEM_SLACK:
        kw, stages = dict(cfg.kwargs), cfg.num_stages
        if stages > 2:
            stages -= 1
        elif kw["BLOCK_K"] > 16:
            kw["BLOCK_K"] //= 2
        else:
            break
        cfg = triton.Config(kw, num_warps=cfg.num_warps, num_stages=stages)
    return cfg


# Triton keeps a few barriers and scratch words beside the operand ring and the store tile.
_SMEM_SLACK = 1024


def default_split_k(M: int, N: int, K: int) -> int:
    """SPLIT_K for an untuned M > 256 problem with 128 x 128 tiles: the largest of :data:`SPLIT_KS` whose (tile,
    split) units stay within 1.5 waves of ``FEW_TILES`` SMs and that :func:`split_k_fits`; 1 where the tiles alone
    come near a wave (split-K then only adds the partial tiles' traffic)."""
    tiles = triton.cdiv(M, 128) * triton.cdiv(N, 128)
    best = 1
    for split_k in SPLIT_KS:
        if tiles * split_k <= 1.5 * FEW_TILES and split_k_fits(M, N, K, _config(128, 128, 64, 8, 4, split_k=split_k)):
            best = split_k
    return best


def default_gemm_config(M: int, N: int, K: int, *, use_tma: bool = True, periodic_residual: bool = False,
                        precise_acc: bool = False, rescale_g: bool = False, in_bytes: int = 2, out_bytes: int = 2,
                        tma_store: bool = True,
                        smem_limit: int = SMEM_OPTIN_BYTES) -> triton.Config:
    """A good untuned config for the shape: the only config for M <= 256 (see triton_kernels/gemm.SMALL_M) unless
    `tilewright tune` stored a winner, and for any shape that has no measured config unless ``TILEWRIGHT_AUTOTUNE=full``.

    Small M reads B once and is memory bound: pointer loads with narrow, deep tiles were fastest on H200 for M <= 32
    (perf/results/h200/gemm_experiments_20261126-0140.log: 16x4096x4096 in 8.6 us with 16x32x256 tiles = 1.04x
    cuBLAS; bench 2026-11-26: 1.01x). For 32 < M <= 256 the CUDA-graph timings of perf/results/h200/logs/
    gemm_diag_tune_2026-11-26.log put 64x64x128 tiles, one per program, with TMA loads and store first: 13.9 us
    against 15.8 us with pointer loads (persistent or not) and 12.8 us for cuBLAS on 128x4096x4096.
    """
    if in_bytes == 4:  # FFMA tiles (see _FP32_TILES)
        bm, bn, bk, warps, stages = _FP32_TILES[0] if M <= 32 else _FP32_TILES[1]
        cfg = _config(bm, bn, bk, warps, stages, persistent=not use_tma, tma=use_tma)
    elif M <= 16:
        cfg = _config(16, 32, 256, 4, 4, tma=False)
    elif M <= 32:
        cfg = _config(32, 32, 256, 4, 4, tma=False)
    elif M <= 256:
        cfg = _config(64, 64, 128, 4, 4, persistent=not use_tma, tma=use_tma)
    elif not precise_acc and not rescale_g and (split_k := default_split_k(M, N, K)) > 1:
        cfg = _config(128, 128, 64, 8, 4, split=2, persistent=False, tma=use_tma, split_k=split_k)
    elif use_tma and not periodic_residual and not precise_acc and not rescale_g:
        cfg = _config(128, 256, 64, 8, 3, split=4)
    else:
        cfg = _config(128, 128, 64, 8, 4, split=2, tma=use_tma)
    return fit_shared_memory(cfg, in_bytes, out_bytes, tma_store and cfg.kwargs["TMA_LOADS"], smem_limit)
