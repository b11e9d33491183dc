"""ops/_eager.call_op: eager calls skip the custom-op dispatcher - the implementation directly without autograd, the
op's eager autograd.Function (its own setup_context and backward) with it; tracing (FakeTensor / compile, functorch)
and tensor subclasses go through the registered op."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

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


class _PassThroughMode(TorchDispatchMode):
    """A dispatch mode that changes nothing but makes every call "traced" (ops/_eager.traced) while the op's autograd
    kernel runs (the mode sits below the Autograd key, so it is still on the stack there)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


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
    # (the op's output itself: a same-shape result is not re-viewed, ops/_checks.output_view)
    assert type(y.grad_fn).__name__.startswith("Eager_tilewright_gemm")
    g = torch.randn_like(y)
    da, db = torch.autograd.grad(y, (a, b), g, create_graph=True)
    # the registered op through torch's own autograd kernel (its generated Function; a dispatch mode sends the call
    # there) gives the same gradients, first and second order
    a2, b2 = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
    with _PassThroughMode():
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


# ---- the ops' own dispatch (ops/_eager.register_fast_dispatch): what torch.compile'd graphs call ----
OPS = ("gemm", "rms_norm_linear", "rms_norm_backward", "flash_attn_fwd", "flash_attn_bwd", "scaled_mm",
       "rms_norm_linear_inference", "rms_norm_linear_sumsq", "rms_norm_linear_sumsq_inference")


def test_every_op_has_the_lean_autograd_kernel_for_cpu_and_cuda():
    for name in OPS:
        table = torch._C._dispatch_dump_table(f"tilewright::{name}")
        for key in ("AutogradCPU", "AutogradCUDA"):
            line = next(ln for ln in table.splitlines() if ln.startswith(key + ":"))
            assert "tilewright/ops/_eager.py" in line, (name, line)


@pytest.fixture
def backend_wrapper_calls(monkeypatch):
    """Counts entries into custom_op's backend wrapper (its alias check runs on every call that reaches it)."""
    import torch._library.utils as lib_utils

    calls = []
    check = lib_utils._c_check_aliasing_constraint
    monkeypatch.setattr(lib_utils, "_c_check_aliasing_constraint", lambda *a, **k: calls.append(1) or check(*a, **k))
    return calls


def test_dispatched_op_without_grad_skips_the_custom_op_chain(backend_wrapper_calls):
    a, b = _ab()
    y = torch.ops.tilewright.gemm.default(a, b, None, None, None, torch.float16, False, "torch")[0]
    assert backend_wrapper_calls == []
    torch.testing.assert_close(y.float(), a.float() @ b.float(), rtol=2e-3, atol=2e-3)
    with _PassThroughMode():  # positive control: a traced call still takes custom_op's own chain
        y2 = torch.ops.tilewright.gemm.default(a, b, None, None, None, torch.float16, False, "torch")[0]
    assert backend_wrapper_calls and torch.equal(y, y2)


def test_dispatched_op_with_grad_matches_the_public_function(backend_wrapper_calls):
    a, b = _ab(requires_grad=True)
    b.requires_grad_(True)
    bias = torch.randn(8, dtype=torch.float16, requires_grad=True)
    y, _ = torch.ops.tilewright.gemm.default(a, b, bias, None, "silu", torch.float16, True, "torch")
    assert backend_wrapper_calls == [] and type(y.grad_fn).__name__.startswith("Eager_tilewright_gemm")
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, (a, b, bias), g)
    a2, b2, bias2 = (t.detach().requires_grad_(True) for t in (a, b, bias))
    y2 = tilewright.matmul(a2, b2, bias=bias2, activation="silu", backend="torch")
    assert torch.equal(y, y2)
    for got, want in zip(grads, torch.autograd.grad(y2, (a2, b2, bias2), g)):
        assert torch.equal(got, want)


def test_dispatched_op_under_fake_tensor_mode_uses_the_fake_impl():
    with FakeTensorMode():
        a = torch.empty(8, 16, dtype=torch.float16, requires_grad=True)
        b = torch.empty(16, 8, dtype=torch.float16)
        y = torch.ops.tilewright.gemm.default(a, b, None, None, None, torch.float16, False, "torch")[0]
    assert y.shape == (8, 8) and y.requires_grad
