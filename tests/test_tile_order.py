"""Property test: every tile order maps tile indices 0..T-1 onto the T tiles of the grid exactly once."""
import pytest
import torch
import triton
import triton.language as tl

from tilewright.triton_kernels.tile_order import TILE_ORDERS, tile_coords

pytestmark = pytest.mark.interpreter


@triton.jit
def _coords_kernel(out_m, out_n, num_pid_m, num_pid_n, BLOCK: tl.constexpr, TILE_ORDER: tl.constexpr,
                   GROUP: tl.constexpr):
    # A whole grid's tile indices in one program: tile_coords works on blocks as well as scalars.
    t = tl.arange(0, BLOCK)
    mask = t < num_pid_m * num_pid_n
    pm, pn = tile_coords(tl.minimum(t, num_pid_m * num_pid_n - 1), num_pid_m, num_pid_n, TILE_ORDER, GROUP)
    tl.store(out_m + t, pm, mask=mask)
    tl.store(out_n + t, pn, mask=mask)


def _coords(order, gm, gn, group):
    block = triton.next_power_of_2(gm * gn)
    pm = torch.full((block,), -1, dtype=torch.int32)
    pn = torch.full((block,), -1, dtype=torch.int32)
    _coords_kernel[(1,)](pm, pn, gm, gn, BLOCK=block, TILE_ORDER=TILE_ORDERS[order], GROUP=group)
    return pm[: gm * gn].tolist(), pn[: gm * gn].tolist()


@pytest.mark.parametrize("order", list(TILE_ORDERS))
@pytest.mark.parametrize("grid", [(1, 1), (1, 13), (13, 1), (8, 8), (5, 7), (16, 9), (17, 33), (32, 32)])
@pytest.mark.parametrize("group", [4, 8])
def test_tile_order_is_bijection(order, grid, group):
    gm, gn = grid
    pm, pn = _coords(order, gm, gn, group)
    assert all(0 <= m < gm for m in pm) and all(0 <= n < gn for n in pn)
    assert len(set(zip(pm, pn))) == gm * gn


def test_curves_are_local():
    """Hilbert steps move to an adjacent tile inside each full square; Morton starts with a 2x2 Z."""
    pm, pn = _coords("hilbert", 8, 8, 8)
    steps = [abs(pm[i + 1] - pm[i]) + abs(pn[i + 1] - pn[i]) for i in range(63)]
    assert steps == [1] * 63
    pm, pn = _coords("morton", 8, 8, 8)
    assert list(zip(pm[:4], pn[:4])) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    pm, pn = _coords("row_major", 3, 4, 8)
    assert list(zip(pm[:5], pn[:5])) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
