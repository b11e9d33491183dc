"""ops/_eager.call_op: eager calls skip the custom-op dispatcher - the implementation directly without autograd, the
op's eager autograd.Function (its own setup_context and backward) with it; tracing (FakeTensor / compile, functorch)
and tensor subclasses go through the registered op."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tilewright
from tilewright.ops import _eager
from tilewright.ops.gemm import gemm_op


@pytest.fixture
def spy(monkeypatch):
    calls = []
    original = _eager.call_op

    def recording(op, *args, **kwargs):
        impl = getattr(op, "_init_fn")
        direct = {"n": 0}

        def impl_spy(*a):
            direct["n"] += 1
            return impl(*a)

        monkeypatch.setattr(op, "_init_fn", impl_spy)
        try:
            out = original(op, *args, **kwargs)
        finally:
            monkeypatch.setattr(op, "_init_fn", impl)
        calls.append("direct" if direct["n"] else "op")
        return out

    monkeypatch.setattr("tilewright.ops.gemm.call_op", recording)
    return calls


def _ab(requires_grad=False):
    a = torch.randn(8, 16, dtype=torch.float16, requires_grad=requires_grad)
    b = torch.randn(16, 8, dtype=torch.float16)
    return a, b


def test_plain_eager_call_is_direct_and_correct(spy):
    a, b = _ab()
    y = tilewright.matmul(a, b, backend="torch")
    assert spy == ["direct"]
    torch.testing.assert_close(y.float(), a.float() @ b.float(), rtol=2e-3, atol=2e-3)


def test_autograd_uses_the_eager_function_with_the_ops_backward(spy):
    a, b = _ab(requires_grad=True)
    b.requires_grad_(True)
    y = tilewright.matmul(a, b, activation="gelu", backend="torch")
    assert spy == ["direct"]
    assert type(y.grad_fn.next_functions[0][0]).__name__.startswith("Eager_tilewright_gemm")
    g = torch.randn_like(y)
    da, db = torch.autograd.grad(y, (a, b), g, create_graph=True)
    # the registered op (dispatcher + torch's generated Function) gives the same gradients, first and second order
    a2, b2 = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
    y2 = gemm_op(a2, b2, None, None, "gelu", torch.float16, True, "torch")[0]
    assert "Eager" not in type(y2.grad_fn).__name__ and "Eager" not in str(y2.grad_fn.next_functions)
    da2, db2 = torch.autograd.grad(y2, (a2, b2), g, create_graph=True)
    assert torch.equal(y, y2) and torch.equal(da, da2) and torch.equal(db, db2)
    h = torch.randn_like(da)
    assert torch.equal(torch.autograd.grad(da, a, h)[0], torch.autograd.grad(da2, a2, h)[0])


def test_functorch_transform_goes_through_the_op(monkeypatch):
    used = []
    impl = gemm_op._init_fn
    monkeypatch.setattr(gemm_op, "_init_fn", lambda *a: used.append("direct") or impl(*a))
    a, b = _ab()
    out = torch.func.vmap(lambda x: _eager.call_op(gemm_op, x, b, None, None, None, torch.float16, False,
                                                   "torch")[0])(a.view(2, 4, 16))
    assert out.shape == (2, 4, 8) and used == []


def test_no_grad_mode_is_direct_even_with_requires_grad(spy):
    a, b = _ab(requires_grad=True)
    with torch.no_grad():
        tilewright.matmul(a, b, backend="torch")
    assert spy == ["direct"]


def test_fake_tensor_mode_goes_through_the_op():
    with FakeTensorMode():
        a = torch.empty(8, 16, dtype=torch.float16)
        b = torch.empty(16, 8, dtype=torch.float16)
        y = _eager.call_op(gemm_op, a, b, None, None, None, torch.float16, False, "torch")[0]
    assert y.shape == (8, 8)  # the fake impl answered: the real kernel never ran on fake tensors


def test_subclass_goes_through_the_op(monkeypatch):
    used = []
    monkeypatch.setattr(gemm_op, "_init_fn", lambda *a: used.append("direct"))

    class Sub(torch.Tensor):
        pass

    a = torch.randn(8, 16, dtype=torch.float16).as_subclass(Sub)
    b = torch.randn(16, 8, dtype=torch.float16)
    try:
        _eager.call_op(gemm_op, a, b, None, None, None, torch.float16, False, "torch")
    except Exception:  # noqa: BLE001 - the op may reject the subclass; what matters is the direct path was not taken
        pass
    assert used == []
