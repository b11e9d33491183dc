"""GPU tier of the folded RMSNorm-GEMM's sums once a row block (cuda_fallback/rmsnorm_gemm_sm90, ``row_counts``: the
first column tile of each row block runs first, sums its rows' squares and publishes rstd through a counter; a later
tile of the row block takes it when published, else sums itself): outputs and rstd bit-equal to every tile summing,
on tails, every tile order and all three -roov tiles; counters poisoned before a launch (the launch zeroes them) and
reused across launches; a CUDA graph of the launch replayed on new inputs; the op's eager replay with the switch on
and off; the arguments it refuses."""
from __future__ import annotations

import importlib
import math

import pytest
import torch
from _cuda_gpu import cuda_family

import tilewright

pytestmark = pytest.mark.gpu
EPS = 1e-6
POISON = 1 << 20  # past the count a waiting tile waits for: a launch that did not zero would not wait


@pytest.fixture
def rn():
    return cuda_family("rmsnorm_gemm_sm90", (9,))


def _operands(M, N, K, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = (3 * torch.randn(M, K, device="cuda", generator=gen)).bfloat16()
    wg = (torch.randn(N, K, device="cuda", generator=gen) / math.sqrt(K)).bfloat16()
    bias = (0.1 * torch.randn(N, device="cuda", generator=gen)).bfloat16()
    return x, wg, bias


def _counts(rn, M, variant, value=POISON):
    return torch.full((-(-M // rn.READ_ONLY_VARIANTS[variant].bm),), value, device="cuda", dtype=torch.int32)


def _launch(rn, x, wg, bias, variant, counts, tile_order="grouped", out=None):
    M, N = x.shape[0], wg.shape[0]
    y = torch.full((M, N), float("nan"), device="cuda", dtype=x.dtype) if out is None else out[0]
    rstd = torch.full((M,), float("nan"), device="cuda") if out is None else out[1]
    rn.launch_cuda_rmsnorm_gemm(x, wg[0], wg.t(), y, rstd, EPS, bias=bias, variant=variant, tile_order=tile_order,
                                row_counts=counts)
    return y, rstd


@pytest.mark.parametrize("variant", ["coop128x256s3-xf-roov", "coop128x192s4-xf-roov", "pp128x128s5-xf-roov"])
@pytest.mark.parametrize("M,N,K", [(257, 304, 72), (1000, 3000, 1536), (3000, 5120, 1024), (129, 2056, 264)])
@pytest.mark.parametrize("tile_order", ["grouped", "row_major", "morton", "hilbert"])
def test_sums_once_is_bit_equal_to_every_tile_summing(rn, variant, M, N, K, tile_order):
    x, wg, bias = _operands(M, N, K, seed=M + N)
    every = _launch(rn, x, wg, bias, variant, None, tile_order)
    once = _launch(rn, x, wg, bias, variant, _counts(rn, M, variant), tile_order)
    torch.cuda.synchronize()
    assert not every[0].isnan().any() and not every[1].isnan().any()
    assert torch.equal(once[0], every[0]) and torch.equal(once[1], every[1])


def test_counters_are_zeroed_by_every_launch(rn):
    """One counter buffer for several launches, as a caller that keeps it would: each launch starts from zero (a
    stale count would let the waiting tiles read the rstd buffer before its row block's first tile wrote it)."""
    variant = "coop128x256s3-xf-roov"
    M, N, K = 2048, 4096, 1024
    counts = _counts(rn, M, variant)
    want = None
    for seed in range(3):
        x, wg, bias = _operands(M, N, K, seed=seed)
        every = _launch(rn, x, wg, bias, variant, None)
        once = _launch(rn, x, wg, bias, variant, counts)
        torch.cuda.synchronize()
        assert torch.equal(once[0], every[0]) and torch.equal(once[1], every[1]), seed
        assert want is None or not torch.equal(once[0], want)  # (new inputs, new outputs)
        want = once[0]


def test_a_cuda_graph_of_the_launch_replays_on_new_inputs(rn):
    """Captured, the counters' zeroing is a memset node before the cooperative kernel: every replay starts over."""
    variant = "coop128x192s4-xf-roov"
    M, N, K = 3000, 5120, 1024
    x, wg, bias = _operands(M, N, K)
    static_x = x.clone()
    counts = _counts(rn, M, variant)
    out = (torch.empty(M, N, device="cuda", dtype=x.dtype), torch.empty(M, device="cuda"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _launch(rn, static_x, wg, bias, variant, counts, out=out)  # (bound and built before the capture)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _launch(rn, static_x, wg, bias, variant, counts, out=out)
    for seed in range(1, 4):
        fresh, _, _ = _operands(M, N, K, seed=seed)
        static_x.copy_(fresh)
        graph.replay()
        every = _launch(rn, fresh, wg, bias, variant, None)
        torch.cuda.synchronize()
        assert torch.equal(out[0], every[0]) and torch.equal(out[1], every[1]), seed


@pytest.mark.parametrize("M,N,K", [(3000, 5120, 5120), (4096, 4096, 2048)])
def test_the_op_replays_sums_once_bit_equal_to_the_switch_off(monkeypatch, M, N, K):
    """The public op at folded shapes, without autograd: its first call folds - summing once a row block where
    ``sums_once_applies`` (the 192-column build: 3000 x 5120 x 5120; not the 256-column one at 4096 x 4096) - its
    second replays (a fresh counter buffer the replay allocates, zeroed by the launch); ``TILEWRIGHT_RMS_SUMS_ONCE=0``
    gives the same bits."""
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9):
        pytest.skip("the folded forward is the sm_90 GEMM's")
    from tilewright.cuda_fallback import rmsnorm_gemm_sm90 as rn
    from tilewright.ops import _fast

    rms = importlib.import_module("tilewright.ops.rms_norm_linear")
    monkeypatch.delenv(rn.SUMS_ONCE_ENV, raising=False)
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(M, K, device="cuda", generator=gen).bfloat16()
    g = (1 + 0.5 * torch.randn(K, device="cuda", generator=gen)).bfloat16()
    w = (torch.randn(N, K, device="cuda", generator=gen) / math.sqrt(K)).bfloat16()
    once = rn.sums_once_applies(M, N, K)
    assert once == (rn.folded_variant(M, N, K) == rn.FOLDED_WAVE_VARIANT)
    assert rn.folded_ready(x, w)[0]  # (its first-use self-check launches too: before the count below)
    launched = []  # the folded launches: with the row counters or not (other builds' self-checks launch too)
    real = rn.launch_cuda_rmsnorm_gemm

    def counting(*a, **k):
        if str(k.get("variant")) in rn.READ_ONLY_VARIANTS:
            launched.append(k.get("row_counts") is not None)
        return real(*a, **k)

    monkeypatch.setattr(rn, "launch_cuda_rmsnorm_gemm", counting)
    _fast.invalidate()
    with torch.no_grad():
        y1 = tilewright.rms_norm_linear(x, g, w, eps=EPS)
        y2 = tilewright.rms_norm_linear(x, g, w, eps=EPS)  # the replay: no launch through the Python path
        assert launched == [once], launched
        assert any(type(r) is rms._FoldedReplay for r in rms._replays.values())
        monkeypatch.setenv(rn.SUMS_ONCE_ENV, "0")
        y3 = tilewright.rms_norm_linear(x, g, w, eps=EPS)
        assert launched == [once, False], launched
    _fast.invalidate()
    assert torch.equal(y1, y2) and torch.equal(y1, y3)


def test_refused_arguments(rn):
    x, wg, bias = _operands(300, 600, 128)
    y, rstd = torch.empty(300, 600, device="cuda", dtype=x.dtype), torch.empty(300, device="cuda")
    counts = _counts(rn, 300, "coop128x256s3-xf-roov")
    launch = rn.launch_cuda_rmsnorm_gemm
    with pytest.raises(ValueError, match="-roov"):
        launch(x, wg[0], wg.t(), y, rstd, EPS, variant="coop128x256s3-xf-ro", row_counts=counts)
    with pytest.raises(ValueError, match="needs rstd"):
        launch(x, wg[0], wg.t(), y, None, EPS, variant="coop128x256s3-xf-roov", row_counts=counts)
    with pytest.raises(ValueError, match="int32"):
        launch(x, wg[0], wg.t(), y, rstd, EPS, variant="coop128x256s3-xf-roov", row_counts=counts.float())
    with pytest.raises(ValueError, match=">= 3"):
        launch(x, wg[0], wg.t(), y, rstd, EPS, variant="coop128x256s3-xf-roov", row_counts=counts[:2])
