"""Sums of squares handed from a residual GEMM to the RMSNorm after it: ``tilewright.linear(..., return_sumsq=True)``
and ``tilewright.rms_norm_linear(..., sumsq=...)`` (and the nn modules' forwards that pass them). CPU tier: the
kernels under the Triton interpreter (fp16 / fp32), every route of the norm op (router's choice, forced Triton,
torch), gradients against float64, and the input checks. The GPU tier (bf16, the folded rstd-GEMM) is in
tests/test_rms_norm_linear_gpu.py."""
import math

import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright.reference import rms_norm_linear_reference

pytestmark = pytest.mark.interpreter

EPS = 1e-6


def _rows(shape, K, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, K, generator=gen) * (0.5 + torch.rand(*shape, 1, generator=gen))).to(dtype)


def _norm_params(N, K, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    g = (1 + 0.5 * torch.randn(K, generator=gen)).to(dtype)
    w = (torch.randn(N, K, generator=gen) / math.sqrt(K)).to(dtype)
    b = torch.randn(N, generator=gen).to(dtype)
    return g, w, b


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("shape,K,N", [((37,), 48, 40), ((2, 5), 24, 33), ((3,), 123, 17)])
@pytest.mark.parametrize("activation", [None, "gelu"])
def test_linear_returns_the_output_rows_sums_of_squares(dtype, shape, K, N, activation):
    """The sums are those of the output as returned (rounded to its dtype), one per row, fp32; the output itself is
    what the call without return_sumsq gives."""
    x = _rows(shape, K, dtype, 0)
    w = (torch.randn(N, K, generator=torch.Generator().manual_seed(1)) / math.sqrt(K)).to(dtype)
    b = torch.randn(N, generator=torch.Generator().manual_seed(2)).to(dtype)
    res = _rows(shape, N, dtype, 3)
    y, ss = tilewright.linear(x, w, b, residual=res, activation=activation, return_sumsq=True)
    want_y = tilewright.linear(x, w, b, residual=res, activation=activation)
    assert torch.equal(y, want_y)
    assert ss.dtype == torch.float32 and ss.shape == y.shape[:-1]
    want = y.double().square().sum(-1)
    assert torch.allclose(ss.double(), want, rtol=1e-5, atol=0), (ss.double() - want).abs().max()


def test_linear_sums_carry_no_gradient_and_leave_the_output_differentiable():
    x = _rows((9,), 16, torch.float32, 0).requires_grad_()
    w = torch.randn(12, 16, requires_grad=True)
    res = torch.randn(9, 12, requires_grad=True)
    y, ss = tilewright.linear(x, w, residual=res, return_sumsq=True)
    assert not ss.requires_grad and ss.grad_fn is None
    y.square().sum().backward()
    x2, w2, r2 = (t.detach().clone().requires_grad_() for t in (x, w, res))
    tilewright.linear(x2, w2, residual=r2).square().sum().backward()
    for a, b in ((x, x2), (w, w2), (res, r2)):
        assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_linear_return_sumsq_must_be_a_bool(value):
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    with pytest.raises(TypeError, match="return_sumsq"):
        tilewright.linear(x, w, return_sumsq=value)


def _errors(y, x, g, w, b):
    """|y - fp64 reference| and |torch's same-dtype unfused pipeline - reference| (max abs)."""
    ref = rms_norm_linear_reference(x.double(), g.double(), w.double(), b.double(), EPS)
    torch_same = rms_norm_linear_reference(x, g, w, b, EPS)
    return (y.double() - ref).abs().max().item(), (torch_same.double() - ref).abs().max().item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("backend", [None, "triton", "torch"])
@pytest.mark.parametrize("shape,K,N", [((37,), 48, 40), ((2, 5), 24, 33), ((3,), 123, 17), ((19,), 200, 8)])
def test_rms_norm_linear_with_given_sums_is_within_torch_error(dtype, backend, shape, K, N):
    x = _rows(shape, K, dtype, 4)
    g, w, b = _norm_params(N, K, dtype, 5)
    sumsq = x.float().square().sum(-1)
    y = tilewright.rms_norm_linear(x, g, w, b, eps=EPS, backend=backend, sumsq=sumsq)
    assert y.shape == (*shape, N) and y.dtype == dtype
    ours, theirs = _errors(y, x, g, w, b)
    tol = 2 * theirs + (1e-6 if dtype == torch.float32 else 1e-3)
    assert ours <= tol, (ours, theirs)


@pytest.mark.parametrize("backend", [None, "triton", "torch"])
def test_the_given_sums_are_what_every_route_normalises_by(backend):
    """Sums four times x's own halve rstd: every route must use the given sums, not sum x itself (a route that
    ignored them would give the plain norm's output here)."""
    x = _rows((21,), 40, torch.float32, 6)
    g, w, b = _norm_params(24, 40, torch.float32, 7)
    ss = x.square().sum(-1)
    y = tilewright.rms_norm_linear(x, g, w, b, eps=EPS, backend=backend, sumsq=4 * ss)
    plain = tilewright.rms_norm_linear(x, g, w, b, eps=EPS, backend=backend)
    rstd4 = 1 / torch.sqrt(4 * ss.double() / 40 + EPS)
    want = (x.double() * rstd4[:, None] * g.double()) @ w.double().t() + b.double()
    assert torch.allclose(y.double(), want, rtol=1e-4, atol=1e-4), (y.double() - want).abs().max()
    assert not torch.allclose(y, plain, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_gradients_with_given_sums_match_the_norm_of_x(dtype):
    """dx includes rstd's dependence on x (the sums are x's); dg, dW, dbias as without sums; the sums get none."""
    M, N, K = 29, 24, 40
    x = _rows((M,), K, dtype, 8)
    g, w, b = _norm_params(N, K, dtype, 9)
    dy = torch.randn(M, N, generator=torch.Generator().manual_seed(10)).to(dtype)
    ours = [t.clone().requires_grad_() for t in (x, g, w, b)]
    sumsq = ours[0].float().square().sum(-1)  # differentiable: it must still get no gradient
    sumsq.retain_grad()
    tilewright.rms_norm_linear(*ours, eps=EPS, sumsq=sumsq).backward(dy)
    assert sumsq.grad is None
    same = [t.clone().requires_grad_() for t in (x, g, w, b)]
    rms_norm_linear_reference(*same, EPS).backward(dy)
    ref = [t.double().requires_grad_() for t in (x, g, w, b)]
    rms_norm_linear_reference(*ref, EPS).backward(dy.double())
    for name, a, t, r in zip(("x", "norm_weight", "weight", "bias"), ours, same, ref):
        e_ours = (a.grad.double() - r.grad).norm().item()
        e_torch = (t.grad.double() - r.grad).norm().item()
        assert e_ours <= 2 * e_torch + 1e-6 * r.grad.norm().item(), (name, e_ours, e_torch)


def test_empty_and_zero_width_calls():
    g, w, b = _norm_params(8, 16, torch.float32, 11)
    x0 = torch.randn(0, 16)
    assert tilewright.rms_norm_linear(x0, g, w, b, sumsq=torch.zeros(0)).shape == (0, 8)
    xk = torch.randn(5, 0)
    y = tilewright.rms_norm_linear(xk, torch.ones(0), torch.randn(8, 0), b, sumsq=torch.zeros(5))
    assert torch.equal(y, b.expand(5, 8))  # an empty row normalises to nothing: the bias alone, as torch's pair


def test_sumsq_input_checks_name_the_argument():
    x = torch.randn(6, 16)
    g, w, b = _norm_params(8, 16, torch.float32, 12)
    ss = x.square().sum(-1)
    with pytest.raises(TypeError, match="sumsq.*float32"):
        tilewright.rms_norm_linear(x, g, w, b, sumsq=ss.double())
    with pytest.raises(TypeError, match="sumsq.*float32"):
        tilewright.rms_norm_linear(x, g, w, b, sumsq=ss.half())
    with pytest.raises(ValueError, match=r"sumsq: expected shape \(6,\)"):
        tilewright.rms_norm_linear(x, g, w, b, sumsq=ss[:5])
    with pytest.raises(ValueError, match="sumsq"):
        tilewright.rms_norm_linear(x, g, w, b, sumsq=ss[:, None])
    with pytest.raises(TypeError, match="sumsq"):
        tilewright.rms_norm_linear(x, g, w, b, sumsq=ss.tolist())
    with pytest.raises(ValueError, match="sumsq.*device"):
        tilewright.rms_norm_linear(x, g, w, b, sumsq=ss.to("meta"))
    with pytest.raises(ValueError, match="norm_weight"):  # the other arguments are checked as without sums
        tilewright.rms_norm_linear(x, g[:4], w, b, sumsq=ss)


def test_a_strided_sumsq_and_x_are_read_through_their_strides():
    x = _rows((12,), 64, torch.float32, 13)[:, ::2]  # K 32, row stride 64, column stride 2
    g, w, b = _norm_params(10, 32, torch.float32, 14)
    ss = torch.stack([x.square().sum(-1)] * 2, 1)[:, 0]  # stride 2
    y = tilewright.rms_norm_linear(x, g, w, b, eps=EPS, sumsq=ss)
    ours, theirs = _errors(y, x, g, w, b)
    assert ours <= 2 * theirs + 1e-6


def test_modules_hand_the_sums_from_a_residual_projection_to_the_next_norm():
    """A pre-norm block's tail as modules: o_proj(attn, residual=h, return_sumsq=True) -> RMSNormLinear(h, sumsq=)
    equals the unfused torch modules, forward and gradients."""
    torch.manual_seed(15)
    d, ff, M = 32, 48, 11
    o_proj = tilewright.nn.Linear(d, d)
    up = tilewright.nn.RMSNormLinear(d, ff, eps=EPS)
    with torch.no_grad():
        up.norm_weight.copy_(1 + 0.3 * torch.randn(d))
    attn, h = torch.randn(M, d, requires_grad=True), torch.randn(M, d, requires_grad=True)
    h2, ss = o_proj(attn, h, return_sumsq=True)
    out = up(h2, sumsq=ss)
    out.square().sum().backward()
    attn_r, h_r = (t.detach().clone().requires_grad_() for t in (attn, h))
    h2_r = F.linear(attn_r, o_proj.weight, o_proj.bias) + h_r
    out_r = F.linear(F.rms_norm(h2_r, (d,), up.norm_weight, EPS), up.weight, up.bias)
    assert torch.allclose(out, out_r, rtol=1e-4, atol=1e-5)
    grads = [attn.grad, h.grad, o_proj.weight.grad, up.norm_weight.grad, up.weight.grad]
    for p in (o_proj.weight, up.norm_weight, up.weight):
        p.grad = None
    out_r.square().sum().backward()
    for a, r in zip(grads, [attn_r.grad, h_r.grad, o_proj.weight.grad, up.norm_weight.grad, up.weight.grad]):
        assert torch.allclose(a, r, rtol=1e-4, atol=1e-4), (a - r).abs().max()


def test_opcheck_the_op_with_given_sums():
    from tilewright.ops.rms_norm_linear import rms_norm_linear_sumsq_op

    x = torch.randn(12, 16)
    g, w, b = _norm_params(8, 16, torch.float32, 16)
    ss = x.square().sum(-1)
    torch.library.opcheck(rms_norm_linear_sumsq_op, (x, ss, g, w, b, EPS, None))
    torch.library.opcheck(rms_norm_linear_sumsq_op, (x.requires_grad_(), ss, g, w, None, EPS, "triton"))


def test_a_graph_traced_without_gradients_calls_the_inference_op(monkeypatch):
    """Under torch.compile and no_grad (parameters that require grad, as a model's in eval) a call with given sums is
    tilewright::rms_norm_linear_sumsq_inference in the ATen-level graph, whose full path may keep the folded weight
    (_keeps_fold True), with the eager output; with gradients the graph's op keeps none (the weight trains)."""
    import importlib

    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from tilewright.ops.rms_norm_linear import rms_norm_linear_sumsq_inference_op

    rms = importlib.import_module("tilewright.ops.rms_norm_linear")  # (the package attribute is the function)
    keeps, graphs = [], []
    full = rms._rms_norm_linear_sumsq_full
    monkeypatch.setattr(rms, "_rms_norm_linear_sumsq_full",
                        lambda x, ss, g, w, *rest: (keeps.append(rms._keeps_fold(w)), full(x, ss, g, w, *rest))[1])

    def forward_compiler(gm, example_inputs):
        graphs.append(str(gm.graph))
        return make_boxed_func(gm.forward)

    up = tilewright.nn.RMSNormLinear(16, 24, eps=EPS)
    x = torch.randn(2, 5, 16)
    ss = x.square().sum(-1)
    with torch.no_grad():
        want = up(x, sumsq=ss)
        keeps.clear()
        got = torch.compile(lambda x, ss: up(x, sumsq=ss), backend=aot_autograd(fw_compiler=forward_compiler),
                            fullgraph=True)(x, ss)
    assert torch.equal(got, want) and keeps == [True]
    assert "tilewright.rms_norm_linear_sumsq_inference" in graphs[-1]
    torch._dynamo.reset()
    keeps.clear()
    torch.compile(lambda x, ss: up(x, sumsq=ss), backend="aot_eager", fullgraph=True)(x, ss).sum().backward()
    assert keeps == [False] and up.weight.grad is not None
    g, w, b = _norm_params(8, 16, torch.float32, 16)
    torch.library.opcheck(rms_norm_linear_sumsq_inference_op, (torch.randn(12, 16), ss.new_ones(12), g, w, b, EPS,
                                                                None), test_utils=("test_schema", "test_faketensor"))


def test_torch_compile_fullgraph_of_the_handoff_with_backward():
    torch.manual_seed(17)
    o_proj, up = tilewright.nn.Linear(16, 16), tilewright.nn.RMSNormLinear(16, 24, eps=EPS)

    def f(a, h):
        h2, ss = o_proj(a, h, return_sumsq=True)
        return up(h2, sumsq=ss).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    a, h = torch.randn(5, 16, requires_grad=True), torch.randn(5, 16)
    compiled(a, h).backward()
    a_r = a.detach().clone().requires_grad_()
    f(a_r, h).backward()
    assert torch.allclose(a.grad, a_r.grad, rtol=1e-4, atol=1e-5)


# ---- the sm_90 GEMM's sums-of-squares build as the op takes it (CPU tensors posing as an sm_90 device's) ----
class _Decision:
    backend = "cuda"
    forced = False


def _pose_as_sm90(monkeypatch, launches, launch_ok=True):
    """is_cuda / capability faked, the router picking the CUDA GEMM, and a stand-in for the sumsq build's launch
    that computes what the kernel's contract says (out, and per tile column of 256 the rows' sums of squares)."""
    from tilewright import router
    from tilewright.cuda_fallback import gemm_sm90, gemm_sumsq_sm90 as gs

    monkeypatch.setattr(gemm_sm90, "PREFER_MIN_FLOPS", 0)  # (test-sized problems)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(router, "decide", lambda *a, **k: _Decision())
    monkeypatch.setattr(gs, "ready", lambda *a: (True, "test"))
    monkeypatch.setattr(gs, "partial_shape", lambda M, N, K: (-(-N // 256), M))

    def try_launch(a, b, out, parts, bias=None, residual=None, activation=None):
        launches.append(activation)
        if not launch_ok:
            return False
        z = a.float() @ b.float() + (0 if bias is None else bias.float())
        out.copy_(z + (0 if residual is None else residual.reshape(out.shape).float()))
        parts.copy_(torch.stack([c.float().square().sum(1) for c in out.split(256, 1)]))
        return True

    monkeypatch.setattr(gs, "try_launch", try_launch)


def test_linear_takes_the_sums_from_the_gemm_epilogue_where_the_cuda_gemm_runs(monkeypatch):
    launches = []
    _pose_as_sm90(monkeypatch, launches)
    x, w, res = torch.randn(2, 256, 512).half(), (torch.randn(600, 512) / 20).half(), torch.randn(2, 256, 600).half()
    import tilewright.ops.gemm as gm

    monkeypatch.setattr(gm, "row_sumsq", lambda y: pytest.fail("the pass ran where the epilogue's sums serve"))
    y, ss = tilewright.linear(x, w, residual=res, return_sumsq=True)
    assert launches == [None] and y.shape == (2, 256, 600) and ss.shape == (2, 256)
    monkeypatch.undo()
    assert torch.allclose(y.float(), (x.float() @ w.float().t() + res.float()).half().float(), atol=1e-2)
    assert torch.allclose(ss.double(), y.double().square().sum(-1), rtol=1e-5)


def test_a_failed_epilogue_launch_falls_back_to_the_plain_path_and_a_pass(monkeypatch):
    import tilewright.ops.gemm as gm

    launches, full, passes = [], [], []
    _pose_as_sm90(monkeypatch, launches, launch_ok=False)
    monkeypatch.setattr(gm, "_gemm_full", lambda a, b, bias, res, *rest: full.append(1) or
                        ((a.float() @ b.float()).to(a.dtype) + res.reshape(a.shape[0], -1), a.new_empty((0,))))
    monkeypatch.setattr(gm, "row_sumsq", lambda y: passes.append(1) or y.float().square().sum(-1))
    x, w, res = torch.randn(300, 512).half(), (torch.randn(512, 512) / 20).half(), torch.randn(300, 512).half()
    y, ss = tilewright.linear(x, w, residual=res, return_sumsq=True)
    assert launches == [None] and full == [1] and passes == [1]
    assert torch.equal(ss, y.float().square().sum(-1))


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_the_epilogue_sums_under_autograd_keep_the_gemm_ops_gradients(monkeypatch, activation):
    """With autograd the sums-of-squares launch runs inside the GEMM op's autograd node: the gradients are the plain
    op's. With an activation the build is not used (it stores no pre-activation)."""
    launches = []
    _pose_as_sm90(monkeypatch, launches)
    x = torch.randn(256, 512).half().requires_grad_()
    w = (torch.randn(512, 512) / 20).half().requires_grad_()
    res = torch.randn(256, 512).half().requires_grad_()
    if activation is not None:
        import tilewright.ops.gemm as gm

        assert gm._linear_with_sumsq(x, w, None, res, activation, None) is None
        return
    y, ss = tilewright.linear(x, w, residual=res, return_sumsq=True)
    assert launches == [None] and y.requires_grad and not ss.requires_grad
    monkeypatch.undo()  # (the backward's GEMMs run for real, on the CPU)
    dy = torch.randn_like(y)
    y.backward(dy)
    x2, w2, r2 = (t.detach().clone().requires_grad_() for t in (x, w, res))
    (x2.float() @ w2.float().t() + r2.float()).backward(dy.float())
    for a, b in ((x, x2), (w, w2), (res, r2)):
        assert torch.allclose(a.grad.float(), b.grad.float(), rtol=1e-2, atol=1e-2)


def test_forced_backends_with_given_sums(monkeypatch):
    """A forced 'cuda' runs the rstd-GEMM or raises (never another kernel in its place); an unknown forced backend
    is named; use_backend('torch') takes torch's formula."""
    x = torch.randn(6, 16)
    g, w, b = _norm_params(8, 16, torch.float32, 18)
    ss = x.square().sum(-1)
    with pytest.raises(ValueError, match="'cuda' was forced with sumsq"):
        tilewright.rms_norm_linear(x, g, w, b, sumsq=ss, backend="cuda")
    monkeypatch.setenv("TILEWRIGHT_BACKEND", "bogus")
    with pytest.raises(ValueError, match="TILEWRIGHT_BACKEND: unknown backend 'bogus'"):
        tilewright.rms_norm_linear(x, g, w, b, sumsq=ss)
    monkeypatch.delenv("TILEWRIGHT_BACKEND")
    with tilewright.use_backend("torch"):
        y = tilewright.rms_norm_linear(x, g, w, b, eps=EPS, sumsq=ss)
    ours, theirs = _errors(y, x, g, w, b)
    assert ours <= 2 * theirs + 1e-6


def test_no_epilogue_sums_where_the_plain_residual_call_runs_cublas_and_an_add(monkeypatch):
    """Where the plain GEMM (without the residual) goes to cuBLAS, the plain residual call runs cuBLAS + torch's add
    (ops/gemm._gemm): the sums then come from a pass over that call's output, not from the CUDA kernel."""
    import tilewright.ops.gemm as gm
    from tilewright import router

    launches = []
    _pose_as_sm90(monkeypatch, launches)
    monkeypatch.delenv("TILEWRIGHT_ATEN_BELOW", raising=False)  # the ATen routes on, as outside the tests

    class _Torch:
        backend, forced = "torch", False

    monkeypatch.setattr(router, "decide", lambda op, a, b, bias, res, act, backend=None:
                        _Torch() if res is None else _Decision())
    x, w, res = torch.randn(256, 512).half(), (torch.randn(512, 512) / 20).half(), torch.randn(256, 512).half()
    assert gm._linear_with_sumsq(x, w, None, res, None, None) is None
    assert launches == []


@pytest.mark.parametrize("aten_route", [True, False])
def test_a_call_on_the_aten_route_takes_it_without_the_sums(monkeypatch, aten_route):
    """Where the call without sums would run torch's own ops (ops/_aten.py), the call with sums runs them too
    (F.rms_norm sums x itself); elsewhere the op with the sums runs."""
    import importlib

    rms = importlib.import_module("tilewright.ops.rms_norm_linear")
    from tilewright.ops import _aten

    routes = []

    class _Route:
        def __call__(self, x, g, w, b):
            routes.append("aten")
            return rms_norm_linear_reference(x, g, w, b, EPS)

    monkeypatch.setattr(rms, "_replay_key", lambda *a: ("k", False, None))
    monkeypatch.setattr(_aten, "rms_norm_linear", lambda *a, **k: _Route() if aten_route else None)
    monkeypatch.setattr(rms._fast, "run_recorded", lambda cache, key, call, *a, **k: call())
    x = torch.randn(6, 16)
    g, w, b = _norm_params(8, 16, torch.float32, 19)
    y = tilewright.rms_norm_linear(x, g, w, b, eps=EPS, sumsq=4 * x.square().sum(-1))  # (4x: tells the routes apart)
    rms._replays.clear()
    if aten_route:
        assert routes == ["aten"] and torch.allclose(y, rms_norm_linear_reference(x, g, w, b, EPS), atol=1e-5)
    else:
        rstd4 = 1 / torch.sqrt(4 * x.double().square().sum(-1) / 16 + EPS)
        want = (x.double() * rstd4[:, None] * g.double()) @ w.double().t() + b.double()
        assert routes == [] and torch.allclose(y.double(), want, atol=1e-4)


@pytest.mark.parametrize("triton", [True, False])
def test_row_sumsq_by_either_pass(monkeypatch, triton):
    """Both of row_sumsq's ways (the Triton pass; torch's reduction, which small outputs take on a GPU) give each
    row's fp32 sum of squares, shaped as y's leading dims."""
    import tilewright.ops.gemm as gm

    if not triton:
        monkeypatch.setattr(gm, "interpreting", lambda: False)
    y = torch.randn(3, 7, 40).half() * 30
    ss = gm.row_sumsq(y)
    assert ss.shape == (3, 7) and ss.dtype == torch.float32
    assert torch.allclose(ss.double(), y.double().square().sum(-1), rtol=1e-5, atol=0)


@pytest.mark.parametrize("bug", [None, "a tile column's sums missing", "sums of the wrong rows",
                                 "activation skipped"])
def test_sumsq_gemm_self_check_tells_a_right_launch_from_a_wrong_one(monkeypatch, bug):
    """The sums-of-squares build's first-use self-check with its launcher replaced by its torch contract on the CPU:
    it passes the right result and fails partials with a tile column left unwritten (NaN), sums of the wrong rows, or
    an output without its epilogue."""
    from tilewright.cuda_fallback import gemm_sumsq_sm90 as gs
    from tilewright.reference import epilogue_reference

    def launch(a, b, out, parts, bias=None, residual=None, activation=0, variant=None):
        y = epilogue_reference(a.float() @ b.float(), bias, None if bug == "activation skipped" else activation,
                               None if residual is None else residual[0])
        out.copy_(y)
        cols = [c.float().square().sum(1) for c in out.split(variant.bn, 1)]
        if bug == "sums of the wrong rows":
            cols = [c.flip(0) for c in cols]
        for pn, c in enumerate(cols):
            if not (bug == "a tile column's sums missing" and pn == len(cols) - 1):
                parts[pn].copy_(c)
        return out

    monkeypatch.setattr(gs, "launch_cuda_gemm_sumsq", launch)
    ok, why = gs._self_check_one(torch.device("cpu"), gs.VARIANTS["pp128x128s5"], torch.bfloat16)
    assert ok == (bug is None), why
