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


# ---- issue 12: inputs that used to give a wrong answer or a raw internal error ----------------------------------------
def _strided_vectors(N):
    """A sliced (stride 2), an expanded (stride 0) and a storage-offset bias: each read as ptr + n gave garbage."""
    yield "sliced", torch.randn(2 * N)[::2]
    yield "expanded", torch.randn(1).expand(N)
    yield "offset", torch.randn(N + 3)[3:]


@pytest.mark.parametrize("entry", ["matmul", "linear", "nn.Linear"])
def test_non_contiguous_bias_is_read_through_its_strides(entry):
    M, K, N = 16, 24, 24
    a, w = torch.randn(M, K), torch.randn(N, K)
    for kind, bias in _strided_vectors(N):
        ref = torch.nn.functional.linear(a.double(), w.double(), bias.double())
        if entry == "matmul":
            out = tilewright.matmul(a, w.t(), bias=bias, activation="gelu")
            ref = torch.nn.functional.gelu(ref)
        elif entry == "linear":
            out = tilewright.linear(a, w, bias)
        else:
            mod = tilewright.nn.Linear(K, N)
            with torch.no_grad():
                mod.weight.copy_(w)
            mod.bias = torch.nn.Parameter(bias)  # a Parameter keeps the view's strides
            assert mod.bias.stride() == bias.stride()
            out = mod(a)
        assert (out.double() - ref).abs().max().item() < 1e-3, (entry, kind)


def test_launcher_rejects_a_strided_vector_instead_of_misreading_it():
    from tilewright.triton_kernels.gemm import launch_gemm

    a, b = torch.randn(8, 16), torch.randn(16, 8)
    with pytest.raises(ValueError, match="bias"):
        launch_gemm(a, b, torch.empty(8, 8), bias=torch.randn(16)[::2])


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_double_backward_matches_torch(activation):
    """Second-order gradients through the fused activation: the backward used to drop d act'(z) / dz."""
    x = torch.randn(5, 12, requires_grad=True)
    w = torch.randn(7, 12, requires_grad=True)
    b = torch.randn(7, requires_grad=True)

    def second_order(f, x, w, b):
        y = f(x, w, b)
        gx, = torch.autograd.grad((y * y).sum(), x, create_graph=True)
        return torch.autograd.grad((gx * gx).sum(), (x, w, b))

    got = second_order(lambda x, w, b: tilewright.linear(x, w, b, activation=activation), x, w, b)
    refs = [t.detach().double().requires_grad_() for t in (x, w, b)]
    want = second_order(lambda x, w, b: tilewright.reference.activation_reference(
        torch.nn.functional.linear(x, w, b), activation), *refs)
    for name, g, r in zip(("x", "weight", "bias"), got, want):
        scale = r.abs().max().item()
        assert (g.double() - r).abs().max().item() <= 1e-4 * scale + 1e-5, (activation, name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu"])
def test_fused_activation_grad_kernel_matches_float64(activation, dtype):
    """The backward's one-kernel grad * act'(preact): error <= 2x the torch formula's (the fp32 path it replaces)
    against float64, same NaN pattern (NaN / +-inf pre-activations, a relu kink at exactly 0), odd length."""
    from tilewright._codes import ACTIVATIONS
    from tilewright.reference import activation_grad_reference
    from tilewright.triton_kernels.activation import launch_activation_grad

    torch.manual_seed(3)
    z = (torch.randn(37, 129) * 3).to(dtype)
    g = torch.randn(37, 129).to(dtype)
    z[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])
    ours = launch_activation_grad(g, z, ACTIVATIONS[activation])
    same = activation_grad_reference(g, z, activation)
    ref = activation_grad_reference(g.double(), z.double(), activation, torch.float64)
    assert ours.dtype == dtype and torch.equal(ours.isnan(), same.isnan())
    fin = torch.isfinite(ref)
    err = (ours.double() - ref)[fin].abs().max().item()
    base = (same.double() - ref)[fin].abs().max().item()
    assert err <= 2 * base + 1e-7, (err, base)


def test_backward_takes_the_fused_activation_grad_only_where_it_can(monkeypatch):
    """Contiguous grad and pre-activation: the kernel (an expanded grad from out.sum() is made dense first, so it
    takes the kernel too); a transposed grad or create_graph: the formula."""
    from tilewright.triton_kernels import activation as act_mod

    calls = []
    real = act_mod.launch_activation_grad
    monkeypatch.setattr(act_mod, "launch_activation_grad", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(6, 10, requires_grad=True)
    w = torch.randn(7, 10, requires_grad=True)
    y = tilewright.linear(x, w, activation="gelu")
    gy = torch.randn(6, 7)
    gx, gw = torch.autograd.grad(y, (x, w), gy)
    assert calls == [1]
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    gx64, gw64 = torch.autograd.grad(torch.nn.functional.gelu(x64 @ w64.t()), (x64, w64), gy.double())
    assert (gx.double() - gx64).abs().max() < 1e-5 and (gw.double() - gw64).abs().max() < 1e-5
    tilewright.linear(x, w, activation="gelu").sum().backward()  # expanded grad: made dense, the kernel
    assert calls == [1, 1]
    y = tilewright.linear(x, w, activation="gelu")
    torch.autograd.grad(y, x, torch.randn(7, 6).t())  # a transposed grad: the formula
    assert calls == [1, 1]
    y = tilewright.linear(x, w, activation="gelu")
    torch.autograd.grad(y, x, gy, create_graph=True)  # create_graph: the differentiable formula
    assert calls == [1, 1]


@pytest.mark.parametrize("op", ["linear", "rms_norm_linear"])
def test_an_expanded_grad_reaches_the_backward_gemms_dense(monkeypatch, op):
    """out.sum().backward() hands the last op a stride-0 gradient: the backward GEMMs must get a dense copy (no TMA
    layout exists for a zero stride; the pointer path ran the Llama down-projection's backward ~2x slower), and the
    gradients must stay torch's."""
    import sys

    gemm_mod, rms_mod = sys.modules["tilewright.ops.gemm"], sys.modules["tilewright.ops.rms_norm_linear"]
    seen = []
    real = gemm_mod.plain_gemm

    def spy(a, b, *rest):
        seen.append((a.stride(), b.stride()))
        return real(a, b, *rest)

    monkeypatch.setattr(gemm_mod, "plain_gemm", spy)
    monkeypatch.setattr(rms_mod, "plain_gemm", spy)
    torch.manual_seed(0)
    x = torch.randn(2, 5, 24, requires_grad=True)
    w = torch.randn(12, 24, requires_grad=True)
    g = torch.rand(24, requires_grad=True)
    r = torch.randn(12)
    if op == "linear":
        out = tilewright.linear(x, w, residual=r)
    else:
        out = tilewright.rms_norm_linear(x, g, w, eps=1e-6)
    got = torch.autograd.grad(out.sum(), (x, w))
    assert len(seen) == 2 and all(0 not in s for pair in seen for s in pair), seen
    x64, w64, g64 = (t.detach().double().requires_grad_() for t in (x, w, g))
    ref = (torch.nn.functional.linear(x64, w64) if op == "linear" else
           torch.nn.functional.linear(torch.nn.functional.rms_norm(x64, (24,), g64, 1e-6), w64))
    want = torch.autograd.grad(ref.sum(), (x64, w64))
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)


def test_activation_grad_kernel_compiles_for_sm90():
    """Every Triton kernel is AOT-compiled for sm_90 in the CPU tier: the elementwise activation backward too."""
    from tilewright.triton_kernels.aot import compile_reports

    reps = compile_reports([dict(kernel="tilewright.triton_kernels.activation:_activation_grad_kernel",
                                 signature={"grad_ptr": "*bf16", "preact_ptr": "*bf16", "out_ptr": "*bf16",
                                            "n": "i32"},
                                 constexprs={"ACTIVATION": code, "BLOCK": 1024}, arch=90, num_warps=4, num_stages=1,
                                 divisible_by_16=("grad_ptr", "preact_ptr", "out_ptr", "n")) for code in (1, 2, 3, 4)])
    for rep in reps:
        assert rep.spill_bytes == 0 and rep.sass


@pytest.mark.parametrize("M,N", [(0, 6), (5, 0), (0, 0)])
def test_empty_output_with_residual_is_torchs_answer(M, N):
    a, w = torch.randn(2, M, 8, requires_grad=True), torch.randn(N, 8, requires_grad=True)
    r = torch.randn(2, M, N, requires_grad=True)
    out = tilewright.linear(a, w, residual=r, activation="gelu")
    assert out.shape == (2, M, N)
    out.sum().backward()
    assert a.grad.shape == a.shape and w.grad.shape == w.shape and r.grad.shape == r.shape
    assert tilewright.matmul(torch.randn(M, 8), torch.randn(8, N), residual=torch.randn(N)).shape == (M, N)


@pytest.mark.parametrize("kwargs,arg", [
    ({"bias": [1.0] * 6}, "bias"), ({"bias": 1.0}, "bias"), ({"residual": 1.0}, "residual"),
    ({"residual": [[0.0] * 6]}, "residual"), ({"activation": ["relu"]}, "activation"),
    ({"activation": "tanh"}, "activation"), ({"backend": ["triton"]}, "backend"), ({"backend": "nonsense"}, "backend"),
])
def test_wrong_argument_types_name_the_argument(kwargs, arg):
    a, w = torch.randn(4, 8), torch.randn(6, 8)
    with pytest.raises((TypeError, ValueError), match=arg):
        tilewright.linear(a, w, **kwargs)
    with pytest.raises((TypeError, ValueError), match=arg):
        tilewright.matmul(a, w.t(), **kwargs)


def test_module_checks_its_options_at_construction():
    with pytest.raises(ValueError, match="backend"):
        tilewright.nn.Linear(4, 4, backend="nonsense")
    with pytest.raises(TypeError, match="activation"):
        tilewright.nn.Linear(4, 4, activation=["relu"])
    with pytest.raises(ValueError, match="backend"):
        tilewright.nn.RMSNormLinear(4, 4, backend="nonsense")
    with pytest.raises(ValueError, match="eps"):
        tilewright.nn.RMSNormLinear(4, 4, eps=-1.0)


@pytest.mark.parametrize("op", ["linear", "matmul_kn"])
def test_the_weight_gradient_comes_out_in_the_weights_layout(op):
    """linear's weight (N, K) is the GEMM's b = weight.t(): its gradient is computed as (dz^T x)^T so it has the
    weight's own (row-major) layout, which autograd stores without a transposing copy; a (K, N) row-major b keeps
    x^T dz. Values as float64 in both cases."""
    torch.manual_seed(0)
    M, K, N = 33, 24, 20
    x = torch.randn(M, K, requires_grad=True)
    if op == "linear":
        w = torch.randn(N, K, requires_grad=True)
        out = tilewright.linear(x, w)
        ref_w = lambda xd, wd: xd @ wd.t()  # noqa: E731
    else:
        w = torch.randn(K, N, requires_grad=True)
        out = tilewright.matmul(x, w)
        ref_w = lambda xd, wd: xd @ wd  # noqa: E731
    grad = torch.randn_like(out)
    gx, gw = torch.autograd.grad(out, (x, w), grad)
    assert gw.stride() == w.stride() and gw.shape == w.shape
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    rx, rw = torch.autograd.grad(ref_w(xd, wd), (xd, wd), grad.double())
    assert torch.allclose(gw.double(), rw, rtol=1e-4, atol=1e-4) and torch.allclose(gx.double(), rx, rtol=1e-4,
                                                                                        atol=1e-4)
