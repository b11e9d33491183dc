"""Tile orders ("swizzles"): which output tile a program computes for a linear tile index.

A persistent GEMM walks tile indices 0..num_tiles-1 (program p takes p, p + P, p + 2P, ...). The order in which
tiles are visited decides how much of A's row panels and B's column panels the L2 cache still holds when the next
tile needs them. Four orders are offered and the autotuner picks:

* ``ROW_MAJOR``  - tile (m, n) in row-major order. Best only when one of the operands fits in L2 anyway.
* ``GROUPED``    - Triton tutorial order: bands of ``GROUP`` tile-rows, visited column by column inside a band,
                   so ``GROUP`` A panels are reused across the band.
* ``MORTON``     - bands of ``GROUP`` tile-rows cut into GROUP x GROUP squares, each visited in Z-order.
* ``HILBERT``    - the same squares, visited along a Hilbert curve (neighbours in the curve share a panel).

Morton/Hilbert only tile full GROUP x GROUP squares with the curve; the partial squares at the right edge and the
partial band at the bottom fall back to the grouped order, which keeps every order a bijection over the tiles of any
grid (tested as a property in tests/test_tile_order.py). ``GROUP`` must be a power of two for the curves.

Every function is written with arithmetic and ``tl.where`` only, so it works on scalars (inside a kernel's
persistent loop) and on blocks of tile indices (the property test evaluates a whole grid in one program).
"""
import triton
import triton.language as tl

from .._codes import TILE_ORDERS

ROW_MAJOR = TILE_ORDERS["row_major"]
GROUPED = TILE_ORDERS["grouped"]
MORTON = TILE_ORDERS["morton"]
HILBERT = TILE_ORDERS["hilbert"]
TILE_ORDER_NAMES = {v: k for k, v in TILE_ORDERS.items()}


@triton.jit
def _morton_decode(d, LOG2_SIDE: tl.constexpr):
    """Z-order index -> (row, col) inside a 2^L x 2^L square: even bits are the column, odd bits the row."""
    row = d * 0
    col = d * 0
    for b in tl.static_range(LOG2_SIDE):
        col |= ((d >> (2 * b)) & 1) << b
        row |= ((d >> (2 * b + 1)) & 1) << b
    return row, col


@triton.jit
def _hilbert_decode(d, LOG2_SIDE: tl.constexpr):
    """Hilbert index -> (row, col) inside a 2^L x 2^L square (the classic d2xy walk, branch-free)."""
    x = d * 0
    y = d * 0
    t = d
    for level in tl.static_range(LOG2_SIDE):
        s = 1 << level
        rx = (t >> 1) & 1
        ry = (t ^ rx) & 1
        # Reflect, then transpose, the sub-square when the curve enters it from the other side.
        flip = (ry == 0) & (rx == 1)
        x = tl.where(flip, s - 1 - x, x)
        y = tl.where(flip, s - 1 - y, y)
        swap = ry == 0
        x, y = tl.where(swap, y, x), tl.where(swap, x, y)
        x += s * rx
        y += s * ry
        t = t >> 2
    return y, x


@triton.jit
def tile_coords(tile_id, num_pid_m, num_pid_n, TILE_ORDER: tl.constexpr, GROUP: tl.constexpr):
    """Map a linear tile index to (pid_m, pid_n) in the chosen order. Bijective for every grid shape."""
    if TILE_ORDER == 0:
        pid_m = tile_id // num_pid_n
        pid_n = tile_id % num_pid_n
    else:
        tiles_per_band = GROUP * num_pid_n
        band = tile_id // tiles_per_band
        first_m = band * GROUP
        band_rows = tl.minimum(num_pid_m - first_m, GROUP)
        local = tile_id - band * tiles_per_band
        # Grouped order inside the band: walk down the band's rows, then to the next column.
        grouped_m = first_m + local % band_rows
        grouped_n = local // band_rows
        if TILE_ORDER == 1:
            pid_m = grouped_m
            pid_n = grouped_n
        else:
            LOG2_G: tl.constexpr = GROUP.bit_length() - 1
            tiles_per_square = band_rows * GROUP
            square = local // tiles_per_square
            first_n = square * GROUP
            inside = local - square * tiles_per_square
            if TILE_ORDER == 2:
                r, c = _morton_decode(inside, LOG2_G)
            else:
                r, c = _hilbert_decode(inside, LOG2_G)
            full = (band_rows == GROUP) & (num_pid_n - first_n >= GROUP)
            pid_m = tl.where(full, first_m + r, grouped_m)
            pid_n = tl.where(full, first_n + c, grouped_n)
    return pid_m, pid_n
