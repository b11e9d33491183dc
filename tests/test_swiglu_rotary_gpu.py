"""GPU tier of swiglu and apply_rotary: bf16 / fp16 at model sizes against float64 within 2x torch's own same-dtype
error, the bound launch of a repeated signature on fresh data, and capture in a CUDA graph after the first call."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilewright

pytestmark = pytest.mark.gpu


def _err(got, want):
    return (got.double() - want).abs().max().item()


def _rotate_half_same_dtype(x, cos, sin):
    """Llama's eager formula in x's dtype (cos / sin: (S, D) full tables)."""
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    half = x.shape[-1] // 2
    return x * c + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * s


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,F_", [(4096, 5632), (999, 1000), (3, 17)])
def test_swiglu_matches_float64_within_twice_torch(dtype, M, F_):
    torch.manual_seed(0)
    x = (torch.randn(M, 2 * F_, device="cuda") * 3).to(dtype)
    dy = torch.randn(M, F_, device="cuda").to(dtype)
    for _ in range(2):  # the second call replays the bound launch
        x.normal_(0, 3)
        dy.normal_()
        xg = x.clone().requires_grad_()
        y = tilewright.swiglu(xg)
        y.backward(dy)
        xd = x.double().requires_grad_()
        ref = F.silu(xd[:, :F_]) * xd[:, F_:]
        ref.backward(dy.double())
        xt = x.clone().requires_grad_()
        own = F.silu(xt[:, :F_]) * xt[:, F_:]
        own.backward(dy)
        assert _err(y, ref) <= 2 * _err(own, ref)
        assert _err(xg.grad, xd.grad) <= 2 * _err(xt.grad, xd.grad)


def test_small_eager_swiglu_is_torchs_formula_with_the_aten_route_on(monkeypatch):
    """With the ATen route on (the suite turns it off), a small eager call on CUDA returns exactly torch's
    ``F.silu(gate) * up`` and its gradient; a large one - and any call with the route off - keeps the kernel
    (one-rounding numerics: at least as close to float64 as torch's)."""
    from tilewright.ops import _aten

    monkeypatch.delenv("TILEWRIGHT_ATEN_BELOW", raising=False)
    torch.manual_seed(3)
    x = torch.randn(512, 2 * 1000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(512, 1000, device="cuda", dtype=torch.bfloat16)
    y = tilewright.swiglu(x)
    y.backward(dy)
    xt = x.detach().clone().requires_grad_()
    own = F.silu(xt[:, :1000]) * xt[:, 1000:]
    own.backward(dy)
    assert torch.equal(y, own) and torch.equal(x.grad, xt.grad)
    assert y.grad_fn.name() == own.grad_fn.name()  # torch's C++ node, not tilewright's Python one
    monkeypatch.setattr(_aten, "COMPILED_ELEMENTWISE_MIN", x.numel())  # now "large": the kernel
    assert "Eager" in type(tilewright.swiglu(x).grad_fn).__name__


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("B,S,Hq,Hkv,D", [(2, 2048, 16, 4, 128), (1, 77, 28, 4, 96), (3, 5, 2, 1, 64)])
def test_rotary_on_the_qk_heads_of_a_qkv_output_matches_float64_within_twice_torch(dtype, B, S, Hq, Hkv, D):
    torch.manual_seed(1)
    qkv = torch.randn(B, S, (Hq + 2 * Hkv) * D, device="cuda").to(dtype)
    ang = torch.outer(torch.arange(S, device="cuda", dtype=torch.float32),
                      1.0 / 10000 ** (torch.arange(0, D, 2, device="cuda") / D))
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
    dy = torch.randn(B, S, Hq + Hkv, D, device="cuda").to(dtype)
    for _ in range(2):
        qkv.normal_()
        qk = qkv.view(B, S, Hq + 2 * Hkv, D)[:, :, :Hq + Hkv].detach().requires_grad_()
        out = tilewright.apply_rotary(qk, cos, sin)
        out.backward(dy)
        xd = qk.detach().double().requires_grad_()
        ref = _rotate_half_same_dtype(xd, cos.double(), sin.double())
        ref.backward(dy.double())
        xt = qk.detach().clone().requires_grad_()
        own = _rotate_half_same_dtype(xt, cos, sin)
        own.backward(dy)
        assert _err(out, ref) <= 2 * _err(own, ref) + 1e-6
        assert _err(qk.grad, xd.grad) <= 2 * _err(xt.grad, xd.grad) + 1e-6


def test_both_ops_capture_in_a_cuda_graph_after_the_first_call():
    torch.manual_seed(2)
    x = torch.randn(256, 2 * 384, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(2, 64, 6, 64, device="cuda", dtype=torch.bfloat16)
    cos = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)
    sin = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)
    tilewright.swiglu(x)
    tilewright.apply_rotary(q, cos, sin)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tilewright.swiglu(x)
        r = tilewright.apply_rotary(q, cos, sin)
    x.normal_()
    q.normal_()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, tilewright.swiglu(x))
    torch.testing.assert_close(r, tilewright.apply_rotary(q, cos, sin))
