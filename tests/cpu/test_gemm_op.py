"""CPU tier: the gemm op's torch integration (autograd, opcheck, torch.compile), input checks and the router."""
import pytest
import torch

import tilewright
from tilewright import router
from tilewright.ops.gemm import gemm_op

pytestmark = pytest.mark.interpreter


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_gradients_match_torch(activation):
    B, S, K, N = 2, 9, 24, 20
    x = torch.randn(B, S, K, requires_grad=True)
    w = torch.randn(N, K, requires_grad=True)
    bias = torch.randn(N, requires_grad=True)
    pos = torch.randn(S, N, requires_grad=True)  # pos_embed residual, broadcast over B
    out = tilewright.linear(x, w, bias, residual=pos, activation=activation)
    grad = torch.randn_like(out)
    out.backward(grad)
    got = [t.grad.clone() for t in (x, w, bias, pos)]

    refs = [t.detach().double().requires_grad_() for t in (x, w, bias, pos)]
    y = torch.nn.functional.linear(refs[0], refs[1], refs[2])
    y = tilewright.reference.activation_reference(y, activation) + refs[3]
    y.backward(grad.double())
    for name, g, r in zip(("x", "weight", "bias", "pos"), got, refs):
        assert g.shape == r.shape, name
        assert torch.allclose(g.double(), r.grad, rtol=1e-4, atol=1e-4), (name, (g.double() - r.grad).abs().max())


def test_gradients_fp16_full_residual_matmul():
    a = torch.randn(33, 40, dtype=torch.float16, requires_grad=True)
    b = torch.randn(40, 24, dtype=torch.float16, requires_grad=True)
    r = torch.randn(33, 24, dtype=torch.float16, requires_grad=True)
    out = tilewright.matmul(a, b, residual=r, activation="relu")
    g = torch.randn_like(out)
    out.backward(g)
    ref = [t.detach().double().requires_grad_() for t in (a, b, r)]
    (torch.relu(ref[0] @ ref[1]) + ref[2]).backward(g.double())
    for t, rt in zip((a, b, r), ref):
        scale = rt.grad.abs().max().item()
        assert (t.grad.double() - rt.grad).abs().max().item() <= 2e-3 * scale + 1e-3


def _opcheck_samples():
    a = torch.randn(12, 16)
    b = torch.randn(16, 8)
    bias = torch.randn(8)
    res = torch.randn(3, 4, 8)  # (R0, P, N) form with R0 * P == M
    yield (a, b, None, None, None, torch.float32, False, None)
    yield (a, b, bias, res, "gelu", torch.float32, True, None)
    yield (a.half(), b.half(), bias.half(), res, "silu", torch.float16, False, "triton")
    yield (a.requires_grad_(), b, bias, None, "relu", torch.float32, True, None)


@pytest.mark.parametrize("args", list(_opcheck_samples()))
def test_opcheck(args):
    torch.library.opcheck(gemm_op, args)


def test_torch_compile_fullgraph_no_graph_break():
    lin = tilewright.nn.Linear(16, 32, activation="gelu")

    def block(x, pos):
        h = lin(x, residual=pos)
        return (h * 2).sum()

    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 5, 16, requires_grad=True)
    pos = torch.randn(5, 32)
    loss = compiled(x, pos)
    loss.backward()
    ref = block(x.detach(), pos)
    assert torch.allclose(loss, ref, rtol=1e-5)
    assert x.grad is not None and torch.isfinite(x.grad).all()


# ---- input checks: each names the argument ----

@pytest.mark.parametrize("call, exc, needle", [
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(8, 3).half()), TypeError, "b:"),
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(7, 3)), ValueError, "b:"),
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(2, 8, 3)), ValueError, "b:"),
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(8)), ValueError, "b:"),
    (lambda: tilewright.matmul(torch.randn(4, 8).int(), torch.randn(8, 3)), TypeError, "a:"),
    (lambda: tilewright.matmul([[1.0]], torch.randn(1, 3)), TypeError, "a:"),
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(8, 3), activation="tanh"), ValueError, "activation"),
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(8, 3), bias=torch.randn(4)), ValueError, "bias"),
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(8, 3), bias=torch.randn(3).half()), TypeError, "bias"),
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(8, 3), residual=torch.randn(5, 3)), ValueError,
     "residual"),
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(8, 3), residual=torch.randn(2, 4, 3)), ValueError,
     "residual"),
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(8, 3), out_dtype=torch.int32), TypeError, "out_dtype"),
    (lambda: tilewright.matmul(torch.randn(4, 8), torch.randn(8, 3), backend="cudnn"), ValueError, "backend"),
    (lambda: tilewright.linear(torch.randn(4, 8), torch.randn(8, 3)), ValueError, "weight:"),
    (lambda: tilewright.linear(torch.randn(4, 8), torch.randn(3, 8, 1)), ValueError, "weight:"),
    (lambda: tilewright.nn.Linear(4, 4, activation="tanh"), ValueError, "activation"),
])
def test_input_checks(call, exc, needle):
    with pytest.raises(exc, match=needle):
        call()


def test_device_mix_is_rejected():
    meta_b = torch.randn(8, 3, device="meta")
    with pytest.raises(ValueError, match="b: on device meta"):
        tilewright.matmul(torch.randn(4, 8), meta_b)


# ---- router ----

def test_router_explain_and_forcing(monkeypatch):
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    text = tilewright.explain("gemm", a, b)
    assert "backend=triton" in text and "TRITON_INTERPRET=1" in text
    assert "forced by backend= argument" in router.explain("gemm", a, b, backend="torch")
    with tilewright.use_backend("torch"):
        assert router.dispatch("gemm", a, b) == "torch"
        assert torch.allclose(tilewright.matmul(a, b), a @ b, atol=1e-5)
    monkeypatch.setenv("TILEWRIGHT_BACKEND", "torch")
    assert "TILEWRIGHT_BACKEND" in router.explain("gemm", a, b)
    monkeypatch.setenv("TILEWRIGHT_BACKEND", "nope")
    with pytest.raises(ValueError, match="TILEWRIGHT_BACKEND"):
        router.dispatch("gemm", a, b)


def test_router_without_interpreter_picks_torch_on_cpu(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    assert router.dispatch("gemm", a, b) == "torch"
    with pytest.raises(ValueError, match="TRITON_INTERPRET is not set"):
        router.dispatch("gemm", a, b, backend="triton")
    with pytest.raises(ValueError, match="unknown op"):
        router.dispatch("conv", a)


def test_forced_cuda_that_declines_raises_instead_of_substituting(monkeypatch):
    """A forced backend is never silently replaced: if the CUDA kernel declines a call, the op says so."""
    from tilewright import backends

    a, b = torch.randn(8, 16), torch.randn(16, 8)
    real_decide = router.decide
    declining = backends.Backend("gemm", "cuda", "declining", lambda *t: (True, "fits"),
                                 launch=lambda *args, **kwargs: False)

    def fake_decide(op, *tensors, backend=None):
        if backend == "cuda":
            return router.Decision(op, "cuda", ["forced by backend= argument"], forced=True, record=declining)
        return real_decide(op, *tensors, backend=backend)

    monkeypatch.setattr(router, "decide", fake_decide)
    with pytest.raises(ValueError, match="backend 'cuda' was forced"):
        tilewright.matmul(a, b, backend="cuda")
    assert torch.allclose(tilewright.matmul(a, b), a @ b, atol=1e-5)  # unforced: the router's choice still runs
