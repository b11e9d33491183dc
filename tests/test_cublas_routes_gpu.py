"""GPU tier (run on the device): plain GEMMs the router hands to cuBLAS (cublas_routes.py) - the op's answer is
cuBLAS's own, bit for bit, on the full path and on its eager replay, with and without a bias, through matmul, linear
and the backward's GEMMs; an activation there is torch's own after cuBLAS, a residual stays fused."""
import importlib

import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright import router

pytestmark = pytest.mark.gpu
DEV = "cuda"
gemm_ops = importlib.import_module("tilewright.ops.gemm")


@pytest.fixture(autouse=True)
def _sm90_only():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the cuBLAS table is measured on sm_90")
    router.invalidate()


def test_routed_matmul_and_linear_are_cublas_bit_for_bit_and_replay():
    M, N, K = 1000, 3000, 1536  # measured 0.74x cuBLAS (NN), 0.65x (TN)
    a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16) / K**0.5
    w = torch.randn(N, K, device=DEV, dtype=torch.bfloat16) / K**0.5
    bias = torch.randn(N, device=DEV, dtype=torch.bfloat16)
    x3 = torch.randn(2, 500, K, device=DEV, dtype=torch.bfloat16)
    assert router.decide("gemm", a, b, None, None, None).backend == "torch"
    for _ in range(3):  # full path, then replays (fresh outputs each call)
        assert torch.equal(tilewright.matmul(a, b), torch.mm(a, b))
        assert torch.equal(tilewright.matmul(a.t().contiguous().t(), b), torch.mm(a, b))
        assert torch.equal(tilewright.linear(x3, w, bias), F.linear(x3, w, bias))
        assert torch.equal(tilewright.linear(x3, w), F.linear(x3, w))
    # an activation: cuBLAS then torch's own gelu here (the fused kernel lost to that pair in this region) - the
    # unfused pair's bits, on the full path and its replays; a residual stays fused
    for _ in range(3):
        assert torch.equal(tilewright.linear(x3, w, bias, activation="gelu"), F.gelu(F.linear(x3, w, bias)))
        assert torch.equal(tilewright.linear(x3, w, activation="silu"), F.silu(F.linear(x3, w)))
    assert "backend=torch" in router.explain("gemm", a, b, None, None, "gelu")
    res = torch.randn(2, 500, N, device=DEV, dtype=torch.bfloat16)
    y = tilewright.linear(x3, w, bias, activation="gelu", residual=res)
    ref = F.gelu(F.linear(x3.double(), w.double(), bias.double())) + res.double()
    torch_err = ((F.gelu(F.linear(x3, w, bias)) + res).double() - ref).abs().max().item()
    assert (y.double() - ref).abs().max().item() <= 2 * torch_err + 1e-3


def test_routed_activation_trains_like_torch():
    """With autograd recording, the cuBLAS + torch-activation launch also writes the pre-activation the backward
    reads: forward bits and gradients equal the unfused torch pair's."""
    M, N, K = 128, 4096, 4096  # decode: cuBLAS 1.16x tilewright's own pick here (H200)
    x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(N, K, device=DEV, dtype=torch.bfloat16) / K**0.5).requires_grad_()
    bias = torch.randn(N, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(M, N, device=DEV, dtype=torch.bfloat16)
    for _ in range(2):
        for t in (x, w, bias):
            t.grad = None
        y = tilewright.linear(x, w, bias, activation="gelu")
        y.backward(dy)
        got = [y.detach(), x.grad, w.grad, bias.grad]
        for t in (x, w, bias):
            t.grad = None
        y_t = F.gelu(F.linear(x, w, bias))
        y_t.backward(dy)
        assert torch.equal(got[0], y_t.detach())
        for g, want in zip(got[1:], (x.grad, w.grad, bias.grad)):
            err = ((g.float() - want.float()).norm() / want.float().norm()).item()
            assert err < 1e-2, err  # the activation's gradient is tilewright's kernel, from the same pre-activation


def test_routed_backward_gemms_match_torch():
    M, N, K = 1000, 3000, 1536
    x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(N, K, device=DEV, dtype=torch.bfloat16) / K**0.5).requires_grad_()
    dy = torch.randn(M, N, device=DEV, dtype=torch.bfloat16)
    for _ in range(3):
        x.grad = w.grad = None
        tilewright.linear(x, w).backward(dy)
        gx, gw = x.grad, w.grad
        x.grad = w.grad = None
        F.linear(x, w).backward(dy)
        # dX = dY @ W and dW = dY^T @ X are cuBLAS calls on both sides (same operands, same layouts)
        assert torch.equal(gx, x.grad) and torch.equal(gw, w.grad)


def test_cublas_off_switch(monkeypatch):
    a = torch.randn(1000, 1536, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(1536, 3000, device=DEV, dtype=torch.bfloat16)
    monkeypatch.setenv("TILEWRIGHT_CUBLAS", "0")
    assert router.decide("gemm", a, b, None, None, None).backend != "torch"
    ref = torch.mm(a.double(), b.double())
    err = (tilewright.matmul(a, b).double() - ref).abs().max().item()
    assert err <= 2 * (torch.mm(a, b).double() - ref).abs().max().item() + 1e-3
