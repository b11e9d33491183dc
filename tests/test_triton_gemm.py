"""CPU tier: the Triton GEMM under TRITON_INTERPRET=1 against float64 references.

Error rule (flash-attn convention): tilewright's max error vs the fp64 reference must be no worse than twice
torch's own same-dtype computation's error (plus a tiny absolute floor for exact cases).
"""
import pytest
import torch
import triton

import tilewright
from tilewright._codes import ACTIVATIONS as ACTIVATION_CODES
from tilewright.reference import gemm_reference
from tilewright.triton_kernels import gemm as tg
from tilewright.triton_kernels.tile_order import TILE_ORDERS

pytestmark = pytest.mark.interpreter
ACTIVATIONS = [None, "relu", "gelu", "gelu_tanh", "silu"]


def _err(x, ref):
    return (x.double() - ref).abs().max().item()


def _check_close(out, inputs, **epilogue):
    """out vs fp64 reference, bounded by 2x the error of torch's own computation in out's dtype."""
    ref = gemm_reference(*[t.double() if t is not None else None for t in inputs], **epilogue)
    torch_same = gemm_reference(*inputs, **epilogue)
    assert torch.isfinite(out).all(), "non-finite output (unwritten or wrong)"
    bound = 2 * _err(torch_same, ref) + 1e-5 * ref.abs().max().item() + 1e-6
    assert _err(out, ref) <= bound, (_err(out, ref), bound)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_epilogues_odd_shape(dtype, activation):
    M, K, N = 67, 45, 93  # tails in every dim (tiles are 64x64x32 under the interpreter)
    a, b = torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)
    bias, res = torch.randn(N, dtype=dtype), torch.randn(M, N, dtype=dtype)
    out = tilewright.matmul(a, b, bias=bias, residual=res, activation=activation)
    assert out.shape == (M, N) and out.dtype == dtype
    _check_close(out, (a, b, bias, res), activation=activation)


@pytest.mark.parametrize("use_tma", [True, False])
@pytest.mark.parametrize("a_t,b_t", [(False, False), (True, False), (False, True), (True, True)])
def test_layouts_and_paths(use_tma, a_t, b_t):
    """Both operand layouts (K-major and MN-major) through the descriptor path and the pointer path."""
    M, K, N = 40, 72, 56  # 16-byte aligned strides in every layout so the TMA path is legal
    a = torch.randn(K, M, dtype=torch.float16).t() if a_t else torch.randn(M, K, dtype=torch.float16)
    b = torch.randn(N, K, dtype=torch.float16).t() if b_t else torch.randn(K, N, dtype=torch.float16)
    out = torch.full((M, N), float("nan"), dtype=torch.float16)  # poisoned
    tg.launch_gemm(a, b, out, use_tma=use_tma)
    _check_close(out, (a, b))


def test_unaligned_falls_back_to_pointer_path():
    a = torch.randn(33, 37, dtype=torch.float16)  # 37 * 2 bytes: row stride not a multiple of 16
    b = torch.randn(37, 29, dtype=torch.float16)
    assert not tg.tma_compatible(a)
    _check_close(tilewright.matmul(a, b), (a, b))


def test_non_contiguous_strided_views():
    base = torch.randn(80, 90, dtype=torch.float32)
    a = base[::2, 1:40]  # strides (180, 1), offset base
    b = torch.randn(60, 50, dtype=torch.float32)[::1, ::2][:39]  # column stride 2: pointer path only
    _check_close(tilewright.matmul(a, b), (a, b))


@pytest.mark.parametrize("order", list(TILE_ORDERS))
def test_persistent_loop_and_tile_orders(order):
    """Small tiles and 3 programs over a 5x7 tile grid: every program walks several tiles in each order."""
    M, K, N = 80, 48, 112  # 16x16 tiles -> 5 x 7 tiles
    a, b = torch.randn(M, K), torch.randn(K, N)
    bias = torch.randn(N)
    cfg = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP": 4, "TILE_ORDER": TILE_ORDERS[order],
                         "EPI_SPLIT": 2 if order != "row_major" else 1, "PERSISTENT": True, "TMA_LOADS": True,
                         "FLATTEN": order == "hilbert"},
                        num_warps=4, num_stages=2)
    out = torch.full((M, N), float("nan"))
    tg.launch_gemm(a, b, out, bias=bias, config=cfg, num_programs=3)
    _check_close(out, (a, b, bias))


@pytest.mark.parametrize("M", [1, 3, 16])
def test_decode_shapes(M):
    a, b = torch.randn(M, 130, dtype=torch.float16), torch.randn(130, 70, dtype=torch.float16)
    _check_close(tilewright.matmul(a, b), (a, b))


def test_pos_embed_broadcast_over_batch():
    B, S, K, N = 3, 20, 32, 48
    x = torch.randn(B, S, K, dtype=torch.float16)
    w = torch.randn(N, K, dtype=torch.float16)
    pos = torch.randn(S, N, dtype=torch.float16)
    out = tilewright.linear(x, w, residual=pos)
    assert out.shape == (B, S, N)
    ref = (x.double() @ w.double().t()) + pos.double()
    torch_err = _err(x @ w.t() + pos, ref)
    assert _err(out, ref) <= 2 * torch_err + 1e-6


@pytest.mark.parametrize("res_shape", [(24,), (2, 1, 24), (1, 10, 24), (2, 10, 24), (2, 10, 1)])
def test_residual_broadcasts(res_shape):
    x = torch.randn(2, 10, 16)
    b = torch.randn(16, 24)
    res = torch.randn(res_shape)
    out = tilewright.matmul(x, b, residual=res)
    ref = x.double() @ b.double() + res.double()
    assert _err(out, ref) < 1e-4


def test_out_dtype_and_fp32_residual():
    a, b = torch.randn(20, 40, dtype=torch.float16), torch.randn(40, 24, dtype=torch.float16)
    res = torch.randn(20, 24)
    out = tilewright.matmul(a, b, residual=res, out_dtype=torch.float32)
    assert out.dtype == torch.float32
    ref = a.double() @ b.double() + res.double()
    assert _err(out, ref) < 1e-3  # fp32 output: only fp32 accumulation error


def test_batched_and_1d_inputs():
    a = torch.randn(2, 3, 5, 16)
    b = torch.randn(16, 8)
    assert torch.allclose(tilewright.matmul(a, b), a @ b, atol=1e-4)
    v = torch.randn(16)
    assert tilewright.matmul(v, b).shape == (8,)
    assert torch.allclose(tilewright.matmul(v, b), v @ b, atol=1e-4)


@pytest.mark.parametrize("shape", [(0, 8, 5), (6, 8, 0), (6, 0, 5)])
def test_empty_dims_match_torch(shape):
    M, K, N = shape
    a, b, bias = torch.randn(M, K), torch.randn(K, N), torch.randn(N)
    out = tilewright.matmul(a, b, bias=bias, activation="relu")
    expected = torch.relu(a @ b + bias)
    assert out.shape == expected.shape
    assert torch.equal(out, expected)


def test_nan_propagates_like_torch():
    a, b = torch.randn(8, 16), torch.randn(16, 8)
    a[3, 5] = float("nan")
    out = tilewright.matmul(a, b)
    assert torch.isnan(out[3]).all() and not torch.isnan(out[:3]).any()


def test_nn_linear_matches_torch():
    lin = torch.nn.Linear(24, 40)
    tw = tilewright.nn.Linear.from_linear(lin, activation="gelu")
    x = torch.randn(2, 7, 24)
    assert torch.allclose(tw(x), torch.nn.functional.gelu(lin(x)), atol=1e-5)
    own = tilewright.nn.Linear(24, 40, activation="silu")
    own.load_state_dict(lin.state_dict())
    res = torch.randn(7, 40)
    assert torch.allclose(own(x, residual=res), torch.nn.functional.silu(lin(x)) + res, atol=1e-5)


# ------------------------------------------------------------------------------------------------ split-K
def _split_k_config(split_k, tma=True, persistent=False, block=(64, 64, 32)):
    from tilewright.autotune.space import _config

    return _config(*block, 4, 2, persistent=persistent, tma=tma, split_k=split_k)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("split_k,tma,persistent,a_t,b_t", [
    (2, True, False, False, False), (4, False, False, True, False), (3, True, True, False, True),
    (8, True, False, True, True), (5, False, True, False, False),
])
def test_split_k_matches_the_reference_with_every_epilogue(dtype, split_k, tma, persistent, a_t, b_t):
    """Split-K: odd M/N/K tails, every operand layout, TMA and pointer loads, one program per (tile, split) and the
    persistent loop over them (3 programs for 2 x 2 tiles x splits), splits of unequal length and splits with no K
    step at all (8 splits of 9 steps: the last gets none), and the full epilogue (bias, activation, residual,
    pre-activation) run once per tile by the last split to arrive."""
    torch.manual_seed(split_k)
    M, N, K = 72, 88, 8 * 32 + 8  # 2 x 2 tiles of 64 x 64 with tails, 9 K steps of 32 (16-byte rows: TMA-legal)
    a = torch.randn(K, M, dtype=dtype).t() if a_t else torch.randn(M, K, dtype=dtype)
    b = torch.randn(N, K, dtype=dtype).t() if b_t else torch.randn(K, N, dtype=dtype)
    bias, res = torch.randn(N, dtype=dtype), torch.randn(1, M, N, dtype=dtype)
    out = torch.full((M, N), float("nan"), dtype=dtype)
    preact = torch.full((M, N), float("nan"), dtype=dtype)
    tg.launch_gemm(a, b, out, bias=bias, residual=res, activation=ACTIVATION_CODES["gelu"], preact=preact,
                   use_tma=tma, config=_split_k_config(split_k, tma, persistent),
                   num_programs=3 if persistent else None)
    _check_close(out, (a, b, bias, res[0]), activation="gelu")
    _check_close(preact, (a, b, bias))


def test_split_k_is_bitwise_reproducible_and_leaves_its_counters_at_zero():
    """The last split adds the partial tiles in split order whoever arrives last: two launches give the same bits,
    and every arrival counter is back at zero for the next launch (no memset between launches)."""
    torch.manual_seed(1)
    a, b = torch.randn(70, 600, dtype=torch.float16), torch.randn(600, 130, dtype=torch.float16)
    outs = []
    for _ in range(2):
        out = torch.full((70, 130), float("nan"), dtype=torch.float16)
        tg.launch_gemm(a, b, out, config=_split_k_config(4))
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    _check_close(outs[0], (a, b))
    _, arrivals = tg.split_k_workspace(a.device)
    assert int(arrivals.abs().sum()) == 0


def test_split_k_pruning_keeps_it_where_tiles_are_few_and_k_is_long():
    from tilewright.autotune import space

    def kept(M, N, K, **kw):
        return [c for c in space.prune_gemm_configs(space.gemm_configs(), M, N, K, 2, 2, True, **kw)
                if c.kwargs["SPLIT_K"] > 1]

    weight_grad = kept(1024, 1024, 16384)  # 64 tiles of 128 x 128 for 132 SMs, 256 K steps
    assert {c.kwargs["SPLIT_K"] for c in weight_grad} == set(space.SPLIT_KS)
    assert not kept(8192, 8192, 8192)  # thousands of tiles: no split
    assert not kept(1024, 1024, 256)  # 4 K steps: nothing to split
    assert not kept(1024, 1024, 16384, norm=True)  # the RMSNorm prologue needs all of K in one program
    assert not kept(1024, 1024, 16384, precise_acc=True)
    # the partial tiles must fit the workspace: 64 tiles x 8 splits x 64 KB = 32 MB fits, a larger problem does not
    for cfg in weight_grad:
        kw = cfg.kwargs
        tiles = triton.cdiv(1024, kw["BLOCK_M"]) * triton.cdiv(1024, kw["BLOCK_N"])
        assert tiles * kw["SPLIT_K"] * kw["BLOCK_M"] * kw["BLOCK_N"] * 4 <= space.SPLIT_K_WORKSPACE_BYTES


def test_a_split_k_config_that_cannot_serve_the_shape_runs_unsplit():
    """A split-K winner of a nearby bucket at a shape with too few K steps for its splits runs the same tile with
    SPLIT_K = 1 (and is right)."""
    a, b = torch.randn(40, 64, dtype=torch.float16), torch.randn(64, 24, dtype=torch.float16)
    plan = tg._make_plan(a, b, torch.empty(40, 24, dtype=torch.float16), None, None, 0, None, None,
                         _split_k_config(8), None, None, None)
    assert plan.static["SPLIT_K"] == 1 and not plan.split_k
    out = torch.full((40, 24), float("nan"), dtype=torch.float16)
    tg.launch_gemm(a, b, out, config=_split_k_config(8))
    _check_close(out, (a, b))


def test_the_autotuners_launches_get_the_split_k_workspace(monkeypatch):
    """TILEWRIGHT_AUTOTUNE=full: the sweep (no fixed config) may pick a split-K config, so its launches are handed
    the workspace, never the placeholder (a SPLIT_K > 1 launch on the placeholder would add partials into out)."""
    seen = []
    real = tg.split_k_workspace
    monkeypatch.setattr(tg, "split_k_workspace", lambda device, stream=None: seen.append(device) or real(device))
    a, b = torch.randn(40, 64, dtype=torch.float16), torch.randn(64, 24, dtype=torch.float16)
    out = torch.full((40, 24), float("nan"), dtype=torch.float16)
    tg.launch_gemm(a, b, out)  # the interpreter launches through the (one-config) autotuner: no fixed config
    assert seen, "an autotuned launch ran without the split-K workspace"
    _check_close(out, (a, b))
