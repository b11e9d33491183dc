"""CPU tier of tilewright.swiglu_linear: the pair it runs off the fused kernel (values and gradients against float64,
strided and 3-D inputs, a bias), its errors naming the argument, when the fused kernel applies and why not, and the
op under opcheck and torch.compile. The fused kernel's numerics are the GPU tier's (test_swiglu_linear_gpu.py)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright.ops.rms_norm_linear import rms_norm_swiglu_linear_op
from tilewright.ops.swiglu_linear import FUSED_ENV, fused_applies, swiglu_linear_op


def _rand(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def _reference(x, w, bias=None):
    h = F.linear(x, w, bias)
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def _err(got, want):
    return (got.double() - want).abs().max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("lead,K,F_", [((7,), 40, 24), ((2, 5), 64, 40), ((1,), 8, 8)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_float64_with_and_without_grad(dtype, lead, K, F_, with_bias):
    x = _rand((*lead, K), dtype, 0)
    w = _rand((2 * F_, K), dtype, 1, scale=K ** -0.5)
    bias = _rand((2 * F_,), dtype, 2) if with_bias else None
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    bd = bias.double().requires_grad_() if with_bias else None
    ref = _reference(xd, wd, bd)
    own = _reference(x, w, bias)  # torch's own same-dtype pipeline: the yardstick
    floor = {torch.float32: 1e-5, torch.float16: 2e-3}[dtype]
    with torch.no_grad():
        y = tilewright.swiglu_linear(x, w, bias)
    assert y.shape == (*lead, F_) and y.dtype == dtype
    assert _err(y, ref) <= max(2 * _err(own, ref), floor)
    # with autograd: the pair, whose gradients match
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    bg = bias.clone().requires_grad_() if with_bias else None
    y2 = tilewright.swiglu_linear(xg, wg, bg)
    dy = _rand(y2.shape, dtype, 3)
    y2.backward(dy)
    ref.backward(dy.double())
    gfloor = {torch.float32: 1e-4, torch.float16: 3e-2}[dtype]
    for got, want in ((xg.grad, xd.grad), (wg.grad, wd.grad), *(((bg.grad, bd.grad),) if with_bias else ())):
        assert torch.isfinite(got).all()
        assert _err(got, want) <= gfloor * max(1.0, want.abs().max().item())


def test_strided_input_and_weight_views():
    """x a column slice of wider rows, weight a transposed copy's transpose (not contiguous) - read through their
    strides."""
    base = _rand((9, 70), torch.float32, 4)
    x = base[:, 3:51]  # (9, 48), row stride 70
    w = _rand((48, 32), torch.float32, 5).t()  # (32, 48), column-major
    torch.testing.assert_close(tilewright.swiglu_linear(x, w), _reference(x, w))


@pytest.mark.parametrize("args,err,match", [
    (lambda: (torch.randn(4, 6), torch.randn(8, 5)), ValueError, "weight: expected \\(2F, K\\)"),
    (lambda: (torch.randn(4, 6), torch.randn(7, 6)), ValueError, "weight: its rows"),
    (lambda: (torch.randn(4, 6), torch.randn(8, 6), torch.randn(4)), ValueError, "bias: expected \\(8,\\)"),
    (lambda: (torch.randn(4, 6), torch.randn(8, 6, dtype=torch.float16)), TypeError, "weight: dtype"),
    (lambda: (torch.randn(4, 6), torch.randn(2, 4, 6)), ValueError, "weight: expected 2-D"),
    (lambda: (torch.randn(4, 6).int(), torch.randn(8, 6)), TypeError, "x: dtype"),
    (lambda: ([1.0], torch.randn(8, 6)), TypeError, "x: expected a torch.Tensor"),
    (lambda: (torch.randn(4, 6), torch.randn(8, 6), [0.0]), TypeError, "bias: expected a torch.Tensor"),
])
def test_bad_inputs_raise_naming_the_argument(args, err, match):
    with pytest.raises(err, match=match):
        tilewright.swiglu_linear(*args())


def test_fused_kernel_applies_only_on_sm90_cuda_and_says_why(monkeypatch):
    x, w = torch.randn(512, 256, dtype=torch.bfloat16), torch.randn(1024, 256, dtype=torch.bfloat16)
    ok, why = fused_applies(x, w)
    assert not ok and "CUDA" in why
    monkeypatch.setenv(FUSED_ENV, "0")
    assert fused_applies(x, w) == (False, f"{FUSED_ENV}=0")


def test_empty_dims_and_a_no_grad_call_through_the_op():
    with torch.no_grad():
        assert tilewright.swiglu_linear(torch.randn(0, 6), torch.randn(8, 6)).shape == (0, 4)
        y = tilewright.swiglu_linear(torch.randn(3, 0), torch.randn(8, 0))
    assert y.shape == (3, 4) and (y == 0).all()


def test_op_passes_opcheck_and_compiles():
    x = _rand((5, 16), torch.float32, 6)
    w = _rand((12, 16), torch.float32, 7)
    torch.library.opcheck(swiglu_linear_op, (x, w), test_utils=("test_schema", "test_faketensor",
                                                                    "test_aot_dispatch_static"))
    compiled = torch.compile(lambda t, ww: tilewright.swiglu_linear(t, ww) * 2, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), 2 * _reference(x, w))
    xg = x.clone().requires_grad_()
    out = compiled(xg, w)  # with grad: the pair's ops, traced
    out.sum().backward()
    xd = x.double().requires_grad_()
    (2 * _reference(xd, w.double())).sum().backward()
    assert _err(xg.grad, xd.grad) < 1e-4


# ------------------------------------------------------------------------------------------------ with the RMSNorm
def _norm_reference(x, g, w, eps, bias=None):
    return _reference(F.rms_norm(x, (x.shape[-1],), g, eps), w, bias)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("grad", [False, True])
def test_rms_norm_linear_swiglu_matches_float64(dtype, grad):
    x = _rand((3, 7, 48), dtype, 10, scale=2.0)
    g = (1 + 0.1 * _rand((48,), torch.float32, 11)).to(dtype)
    w = _rand((80, 48), dtype, 12, scale=48 ** -0.5)
    xd, gd, wd = (t.double().requires_grad_() for t in (x, g, w))
    ref = _norm_reference(xd, gd, wd, 1e-5)
    own = _norm_reference(x, g, w, 1e-5)
    floor = {torch.float32: 1e-5, torch.float16: 3e-3}[dtype]
    if not grad:
        with torch.no_grad():
            y = tilewright.rms_norm_linear(x, g, w, eps=1e-5, activation="swiglu")
        assert y.shape == (3, 7, 40) and _err(y, ref) <= max(2 * _err(own, ref), floor)
        return
    xs, gs, ws = (t.clone().requires_grad_() for t in (x, g, w))
    y = tilewright.rms_norm_linear(xs, gs, ws, eps=1e-5, activation="swiglu")
    assert _err(y, ref) <= max(2 * _err(own, ref), floor)
    dy = _rand(y.shape, dtype, 13)
    y.backward(dy)
    ref.backward(dy.double())
    gfloor = {torch.float32: 1e-4, torch.float16: 5e-2}[dtype]
    for got, want in ((xs.grad, xd.grad), (gs.grad, gd.grad), (ws.grad, wd.grad)):
        assert _err(got, want) <= gfloor * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(activation="gelu"), ValueError, "activation: unsupported 'gelu'"),
    (dict(activation=1), TypeError, "activation: expected a string"),
    (dict(weight=torch.randn(7, 6)), ValueError, "weight: with activation='swiglu'"),
    (dict(weight=torch.randn(8, 5)), ValueError, "weight: expected shape"),
    (dict(eps=-1.0), ValueError, "eps: must be"),
])
def test_rms_norm_linear_swiglu_bad_inputs_name_the_argument(kwargs, err, match):
    args = dict(x=torch.randn(4, 6), norm_weight=torch.ones(6), weight=torch.randn(8, 6), activation="swiglu")
    args.update(kwargs)
    with pytest.raises(err, match=match):
        tilewright.rms_norm_linear(args.pop("x"), args.pop("norm_weight"), args.pop("weight"), **args)


def test_rms_norm_swiglu_op_passes_opcheck_and_compiles():
    x, g, w = _rand((5, 16), torch.float32, 14), 1 + 0.1 * _rand((16,), torch.float32, 15), \
        _rand((12, 16), torch.float32, 16)
    torch.library.opcheck(rms_norm_swiglu_linear_op, (x, g, w, 1e-6),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))
    compiled = torch.compile(lambda t: tilewright.rms_norm_linear(t, g, w, activation="swiglu"), fullgraph=True,
                             backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), _norm_reference(x, g, w, 1e-6), atol=1e-5, rtol=1e-5)


def test_rms_norm_linear_module_with_swiglu():
    m = tilewright.nn.RMSNormLinear(16, 24, bias=False, eps=1e-5, activation="swiglu")
    with torch.no_grad():
        m.norm_weight.copy_(1 + 0.1 * _rand((16,), torch.float32, 20))
    x = _rand((2, 3, 16), torch.float32, 21)
    torch.testing.assert_close(m(x), _norm_reference(x, m.norm_weight, m.weight, 1e-5), atol=1e-5, rtol=1e-5)
    assert "activation='swiglu'" in repr(m)
    with pytest.raises(ValueError, match="out_features: with activation='swiglu'"):
        tilewright.nn.RMSNormLinear(16, 25, activation="swiglu")
    with pytest.raises(ValueError, match="activation: unsupported 'relu'"):
        tilewright.nn.RMSNormLinear(16, 24, activation="relu")
