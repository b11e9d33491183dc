"""CPU tier for the cuBLAS routes of plain GEMMs (cublas_routes.py): the measured table's lookup, which calls the
router hands to cuBLAS (and which it never does: fused epilogues, residuals, fp32, other cards, the off switch), and
the replayable cuBLAS launch (ops/gemm._TorchGemm) on the views a replay hands it."""
from __future__ import annotations

import importlib

import pytest
import torch

from tilewright import cublas_routes, router
from tilewright.ops import _fast

gemm_ops = importlib.import_module("tilewright.ops.gemm")


class _FakeCuda(torch.Tensor):
    """A CPU tensor that claims to be on a GPU (the router's per-signature cache and the route's CUDA check)."""

    @property
    def is_cuda(self):
        return True


@pytest.fixture
def sm90(monkeypatch):
    monkeypatch.setattr(router, "_capability", lambda device: (9, 0))
    monkeypatch.setattr(cublas_routes, "capability", lambda device: (9, 0))
    monkeypatch.delenv("TILEWRIGHT_BACKEND", raising=False)
    monkeypatch.delenv("TILEWRIGHT_CUBLAS", raising=False)
    monkeypatch.setenv("TILEWRIGHT_CUDA", "0")  # the CUDA GEMM family off: Triton vs cuBLAS only
    router.invalidate()
    yield
    router.invalidate()


def _operands(M, N, K, dtype=torch.bfloat16, a_t=False, b_t=False):
    a = torch.empty((K, M) if a_t else (M, K), dtype=dtype)
    b = torch.empty((N, K) if b_t else (K, N), dtype=dtype)
    a, b = (a.t() if a_t else a), (b.t() if b_t else b)
    return a.as_subclass(_FakeCuda), b.as_subclass(_FakeCuda)


def test_table_lookup_takes_its_own_layout_then_any_and_never_extrapolates():
    assert all(lay in ("NN", "NT", "TN", "TT") and m > 0 and n > 0 and k > 0 and 0.3 < r < 2
               for lay, m, n, k, r in cublas_routes.TABLE)
    assert cublas_routes.nearest("TN", 1000, 3000, 1536)[:4] == ("TN", 1000, 3000, 1536)
    assert cublas_routes.nearest("NN", 1100, 2900, 1536)[:4] == ("NN", 1000, 3000, 1536)
    assert cublas_routes.nearest("NT", 1000, 3000, 1536)[0] in ("NN", "TN")  # no NT point that close: any layout
    assert cublas_routes.nearest("NN", 16, 64, 64) is None  # a decode shape: far from every point
    assert cublas_routes.nearest("NN", 0, 64, 64) is None
    a, b = _operands(8, 8, 8, a_t=True, b_t=True)
    assert cublas_routes.layout(a, b) == "TT" and cublas_routes.layout(*_operands(8, 8, 8)) == "NN"


def test_router_hands_measured_plain_gemms_to_cublas_only(sm90, monkeypatch):
    a, b = _operands(1000, 3000, 1536)  # measured 0.74x cuBLAS
    d = router.decide("gemm", a, b, None, None, None)
    assert d.backend == "torch" and "cuBLAS is faster here" in str(d), str(d)
    bias = torch.empty(3000, dtype=torch.bfloat16).as_subclass(_FakeCuda)
    assert router.decide("gemm", a, b, bias, None, None).backend == "torch"  # bias: addmm's epilogue
    # an activation: torch's own after cuBLAS, where the mainloop loses; an output dtype of its own stays ours
    assert router.decide("gemm", a, b, None, None, "gelu").backend == "torch"
    assert router.decide("gemm", a, b, None, None, (None, torch.float32)).backend == "triton"
    assert router.decide("gemm", *_operands(16, 4096, 4096, b_t=True), None, None, "gelu").backend == "triton"
    residual = torch.empty(1, 1000, 3000, dtype=torch.bfloat16).as_subclass(_FakeCuda)
    assert router.decide("gemm", a, b, None, residual, None).backend == "triton"
    big_a, big_b = _operands(16384, 11264, 2048, b_t=True)  # measured 1.03x: ours
    assert router.decide("gemm", big_a, big_b, None, None, None).backend == "triton"
    assert router.decide("gemm", *_operands(1000, 3000, 1536, dtype=torch.float32), None, None, None).backend \
        == "triton"
    monkeypatch.setenv("TILEWRIGHT_CUBLAS", "0")  # in the decision key: no invalidate needed
    assert router.decide("gemm", a, b, None, None, None).backend == "triton"
    monkeypatch.delenv("TILEWRIGHT_CUBLAS")
    monkeypatch.setattr(cublas_routes, "capability", lambda device: (10, 0))
    router.invalidate()
    assert router.decide("gemm", a, b, None, None, None).backend == "triton"  # measured on sm_90 only


def test_decode_and_small_plain_gemms_go_to_cublas_but_not_at_16_rows(sm90):
    """The H200 decode points (Triton wins at M <= 16, cuBLAS from 32 rows) and the small-problem rule for shapes
    no point covers: more than 16 rows and under 2^36 FLOPs go to cuBLAS; large or 16-row problems far from every
    point keep tilewright's kernels."""
    def backend(M, N, K, b_t=True):
        return router.decide("gemm", *_operands(M, N, K, b_t=b_t), None, None, None)

    assert backend(16, 4096, 4096).backend == "triton"  # measured 1.06x cuBLAS
    assert backend(1, 4096, 4096).backend == "triton"
    d = backend(128, 4096, 4096)  # measured 0.86x
    assert d.backend == "torch" and "NVIDIA H200" in str(d), str(d)
    d = backend(128, 1024, 1024)  # no point near: the small-problem rule
    assert d.backend == "torch" and "no measured point near" in str(d), str(d)
    assert backend(16, 256, 256).backend == "triton"  # 16 rows: the decode tiles win there
    assert backend(20000, 20000, 512, b_t=False).backend == "triton"  # far and large: ours
    big_k = backend(16384, 256, 65536)  # 2^39 FLOPs far from every point: ours
    assert big_k.backend == "triton", str(big_k)


def test_cublas_launch_reads_the_recorded_layout_from_a_replay_s_tensors():
    """A replay of ``linear`` hands the launch the caller's 3-D input and the (N, K) weight at the addresses the 2-D
    views had; the launch views them back and writes the caller's output."""
    x = torch.randn(2, 5, 7)
    w = torch.randn(3, 7)
    bias = torch.randn(3)
    a, b = x.reshape(10, 7), w.t()
    out = torch.empty(10, 3)
    launch = gemm_ops._TorchGemm(a, b, bias, out)
    launch(a, b, bias, out)
    torch.testing.assert_close(out, x.reshape(10, 7) @ w.t() + bias)
    out3 = torch.full((2, 5, 3), float("nan"))
    launch(x, w, bias, out3)  # the caller's tensors, other views of the same addresses
    torch.testing.assert_close(out3, torch.nn.functional.linear(x, w, bias))
    plain = gemm_ops._TorchGemm(a, b, out)
    out3.fill_(float("nan"))
    plain(x, w, out3)
    torch.testing.assert_close(out3, x @ w.t())


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("preact", [False, True])
def test_cublas_launch_applies_torch_s_activation_and_keeps_the_pre_activation(activation, preact):
    """The torch backend's launch with an activation: cuBLAS's output (bias through addmm) rounded to the dtype, then
    torch's activation into out - as the unfused F.gelu(F.linear(...)) - and the pre-activation output autograd
    keeps, bit for bit."""
    from tilewright.reference import activation_reference

    torch.manual_seed(3)
    a, b, bias = torch.randn(6, 7).bfloat16(), torch.randn(7, 5).bfloat16(), torch.randn(5).bfloat16()
    out = torch.full((6, 5), float("nan")).bfloat16()
    pre = torch.full((6, 5), float("nan")).bfloat16()
    tensors = (a, b, bias, out, pre) if preact else (a, b, bias, out)
    gemm_ops._TorchGemm(*tensors, activation=activation, preact=preact)(*tensors)
    z = torch.addmm(bias, a, b)
    assert torch.equal(out, activation_reference(z, activation))
    if preact:
        assert torch.equal(pre, z)
    out2 = torch.full((6, 5), float("nan")).bfloat16()
    gemm_ops._TorchGemm(a, b, out2, activation=activation)(a, b, out2)  # no bias: mm, activation in place
    assert torch.equal(out2, activation_reference(a @ b, activation))
    out3, pre3 = torch.full((6, 5), float("nan")).bfloat16(), torch.full((6, 5), float("nan")).bfloat16()
    gemm_ops._TorchGemm(a, b, out3, pre3, preact=True)(a, b, out3, pre3)  # a pre-activation without activation
    assert torch.equal(out3, a @ b) and torch.equal(pre3, a @ b)


def test_a_replay_calls_a_tensor_taking_launch_with_tensors():
    a, b = torch.randn(4, 6), torch.randn(6, 5)
    out = torch.empty(4, 5)
    launch = gemm_ops._TorchGemm(a, b, out)
    replay = _fast.build([(launch, {"a_ptr": a, "b_ptr": b, "c_ptr": out})],
                         {"a_ptr": (0, a), "b_ptr": (1, b)}, {"c_ptr": (0, out)})
    assert replay is not None
    a2, b2 = torch.randn(4, 6), torch.randn(6, 5)
    (got,) = replay(a2.device, a2, b2)
    torch.testing.assert_close(got, a2 @ b2)


def test_points_of_the_running_card_come_first(sm90, monkeypatch):
    """The H100 and H200 ratios of one shape differ: NN 16384 x 1024 x 1024 measured 0.97x cuBLAS on the H100 (ours
    kept) and 0.95x on the H200 (cuBLAS). The running card's point wins at equal distance, its layout still first."""
    h100, h200 = cublas_routes.CARD, "NVIDIA H200"
    assert cublas_routes.nearest("NN", 16384, 1024, 1024, h200)[4] == 0.95
    assert cublas_routes.nearest("NN", 16384, 1024, 1024, h100)[4] == 0.97
    assert cublas_routes.nearest("NN", 16384, 1024, 1024)[4] == 0.97  # no card: the table's first at that distance
    # a shape with only an H100 point of its layout near keeps it on an H200 (layout before card) ...
    assert cublas_routes.nearest("NN", 1000, 3000, 1536, h200)[:4] == ("NN", 1000, 3000, 1536)
    # ... and a card with no points of its own falls back to every card's
    assert cublas_routes.nearest("TN", 1000, 3000, 1536, "NVIDIA B200")[:4] == ("TN", 1000, 3000, 1536)
    assert cublas_routes.card_of(torch.device("cpu")) is None
    a, b = _operands(16384, 1024, 1024)
    for card, backend in ((h200, "torch"), (h100, "triton")):
        monkeypatch.setattr(cublas_routes, "card_of", lambda device, card=card: card)
        router.invalidate()
        d = router.decide("gemm", a, b, None, None, None)
        assert d.backend == backend and card in cublas_routes.cublas_preferred(a, b)[1], (card, str(d))


def test_a_point_measured_alike_on_both_cards_keeps_its_own_card():
    """TN 1024 x 4096 x 16384 measured 0.99x on the H100 and on the H200: each point is named by its own card (the
    reason a decision prints), not by whichever card's line came last."""
    same = [i for i, p in enumerate(cublas_routes.TABLE) if p == ("TN", 1024, 4096, 16384, 0.99)]
    assert [cublas_routes.TABLE_CARDS[i] for i in same] == [cublas_routes.CARD, "NVIDIA H200"]
    assert cublas_routes._nearest_index("TN", 1024, 4096, 16384, cublas_routes.CARD) == same[0]
    assert cublas_routes._nearest_index("TN", 1024, 4096, 16384, "NVIDIA H200") == same[1]
