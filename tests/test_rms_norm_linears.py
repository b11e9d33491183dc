"""CPU tier: ``tilewright.rms_norm_linears`` (one RMSNorm shared by several projections) under the Triton interpreter -
the training route's outputs and every gradient against float64 (no worse than 2x torch's own unfused pipeline in the
same dtype), a mutation check that the test sees a dropped projection's share of dx, the routes taken (training: one
norm; inference and DTensors: per-weight rms_norm_linear, bit for bit), mixed biases, 3-D x, one weight,
torch.compile, and every input check naming its argument.

bfloat16 is left to the GPU tier (tests/test_rms_norm_linears_gpu.py): the interpreter rounds fp32 -> bf16 toward
zero (tests/test_rms_norm_linear.py::test_interpreter_bf16_downcast_truncates), so CPU error ratios in bf16 would
measure the interpreter, not the route.
"""
import importlib
import math

import pytest
import torch
import torch.nn.functional as F

import tilewright

pytestmark = pytest.mark.interpreter

EPS = 1e-6
MANTISSA = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}
# (tails everywhere: K not a multiple of 16 or 32, N and M not multiples of the GEMM's blocks)
K = 40
NS = (36, 12, 20)


def _module():
    return importlib.import_module("tilewright.ops.rms_norm_linear")  # (the package attribute is the function)


def make(lead, K, ns, dtype, bias_mask=(True, False, True), seed=0):
    """x (*lead, K), a norm weight around 1, one (N, K) weight per entry of ``ns`` and a bias where ``bias_mask``
    says so (None elsewhere): random values, never zeros."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, K, generator=gen).to(dtype)
    g = (1 + 0.3 * torch.randn(K, generator=gen)).to(dtype)
    ws = [(torch.randn(n, K, generator=gen) / math.sqrt(K)).to(dtype) for n in ns]
    bs = [torch.randn(n, generator=gen).to(dtype) if has else None for n, has in zip(ns, bias_mask)]
    return x, g, ws, bs


def _leaves(x, g, ws, bs, dtype=None):
    """Fresh leaf copies that require grad (in ``dtype`` if given)."""
    def leaf(t):
        return None if t is None else t.detach().to(dtype or t.dtype).clone().requires_grad_()
    return leaf(x), leaf(g), [leaf(w) for w in ws], [leaf(b) for b in bs]


def _unfused(x, g, ws, bs, eps=EPS):
    """torch's unfused pipeline: one F.rms_norm, one F.linear per weight."""
    u = F.rms_norm(x, (x.shape[-1],), g, eps)
    return [F.linear(u, w, b) for w, b in zip(ws, bs)]


def _run(fn, x, g, ws, bs, dys, dtype=None):
    """Outputs and the gradients of x, g, every weight and every bias (None for an absent bias) of ``fn``."""
    lx, lg, lws, lbs = _leaves(x, g, ws, bs, dtype)
    ys = fn(lx, lg, lws, lbs)
    torch.autograd.backward(list(ys), [dy.to(ys[0].dtype) for dy in dys])
    grads = {"x": lx.grad, "norm_weight": lg.grad}
    for i, (w, b) in enumerate(zip(lws, lbs)):
        grads[f"weights[{i}]"] = w.grad
        grads[f"biases[{i}]"] = None if b is None else b.grad
    return [y.detach() for y in ys], grads


def check_against_fp64(x, g, ws, bs, dys, fn=None, floor=None):
    """Every output and gradient of ``fn`` (the public function by default) against float64: Frobenius error no
    worse than 2x torch's unfused pipeline in the same dtype, plus ``floor`` times the reference's norm - by default
    1/16 of a relative ulp, for the rare small tensor where torch's error happens to vanish. Shared with the GPU
    tier (tests/test_rms_norm_linears_gpu.py)."""
    fn = fn or (lambda x, g, ws, bs: tilewright.rms_norm_linears(x, g, ws, bs, eps=EPS))
    ours = _run(fn, x, g, ws, bs, dys)
    torch_same = _run(_unfused, x, g, ws, bs, dys)
    ref = _run(_unfused, x, g, ws, bs, dys, torch.float64)
    floor = 2.0 ** -(MANTISSA[x.dtype] + 4) if floor is None else floor

    def check(name, a, t, r):
        assert a is not None and a.shape == r.shape and a.dtype == t.dtype, name
        e_ours = (a.double() - r).norm().item()
        e_torch = (t.double() - r).norm().item()
        assert e_ours <= 2 * e_torch + floor * r.norm().item(), (name, e_ours, e_torch)

    assert len(ours[0]) == len(ws)
    for i, (a, t, r) in enumerate(zip(ours[0], torch_same[0], ref[0])):
        check(f"output {i}", a, t, r)
    for name, r in ref[1].items():
        if r is None:
            assert ours[1][name] is None, name
            continue
        check(name, ours[1][name], torch_same[1][name], r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("lead", [(21,), (3, 7)], ids=["2d", "3d"])
def test_training_route_outputs_and_every_gradient_vs_fp64(dtype, lead):
    """q / k / v-like weights with mixed biases (a bias, none, a bias); 2-D and (batch, seq, K) x."""
    x, g, ws, bs = make(lead, K, NS, dtype)
    dys = [torch.randn(*lead, n, generator=torch.Generator().manual_seed(7 + n)).to(dtype) for n in NS]
    check_against_fp64(x, g, ws, bs, dys)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_one_weight(dtype):
    x, g, ws, bs = make((13,), K, (28,), dtype, bias_mask=(True,))
    ys = tilewright.rms_norm_linears(x, g, ws, bs, eps=EPS)
    assert isinstance(ys, tuple) and len(ys) == 1
    check_against_fp64(x, g, ws, bs, [torch.randn(13, 28).to(dtype)])


def test_no_biases_and_tuple_arguments():
    x, g, ws, _ = make((2, 5), K, (24, 8), torch.float32, bias_mask=(False, False))
    dys = [torch.randn(2, 5, n) for n in (24, 8)]
    check_against_fp64(x, g, tuple(ws), (None, None), dys)
    check_against_fp64(x, g, ws, [None, None], dys,
                       fn=lambda x, g, ws, bs: tilewright.rms_norm_linears(x, g, tuple(ws), eps=EPS))


def test_the_check_sees_a_dropped_projection_gradient(monkeypatch):
    """Mutation check: a training route that loses one projection's share of du (its GEMM fed a detached u) gives a
    wrong x.grad and norm_weight.grad, and the fp64 comparison above fails on it."""
    x, g, ws, bs = make((21,), K, NS, torch.float32)
    dys = [torch.randn(21, n) for n in NS]
    module = _module()
    real = module.linear
    calls = []

    def drops_the_second(u, w, b=None, **kw):
        calls.append(1)
        return real(u.detach() if len(calls) % len(NS) == 2 else u, w, b, **kw)

    monkeypatch.setattr(module, "linear", drops_the_second)
    with pytest.raises(AssertionError, match="'x'|'norm_weight'"):
        check_against_fp64(x, g, ws, bs, dys)
    monkeypatch.setattr(module, "linear", real)
    check_against_fp64(x, g, ws, bs, dys)


# ------------------------------------------------------------------------------------------------------------ routes
class _Counts:
    """Calls of F.rms_norm and of the op module's rms_norm_linear and linear (the names rms_norm_linears calls)."""

    def __init__(self, monkeypatch):
        module = _module()
        self.norms = self.gemms = 0
        self.fused_weights = []  # the weight argument of each rms_norm_linear call
        real_norm, real_fused, real_linear = F.rms_norm, module.rms_norm_linear, module.linear

        def norm(*a, **kw):
            self.norms += 1
            return real_norm(*a, **kw)

        def fused(x, norm_weight, weight, *a, **kw):
            self.fused_weights.append(weight)
            return real_fused(x, norm_weight, weight, *a, **kw)

        def gemm(*a, **kw):
            self.gemms += 1
            return real_linear(*a, **kw)

        monkeypatch.setattr(torch.nn.functional, "rms_norm", norm)
        monkeypatch.setattr(module, "rms_norm_linear", fused)
        monkeypatch.setattr(module, "linear", gemm)


@pytest.mark.parametrize("grads", ["x", "weight", "norm_weight"])
def test_training_route_runs_the_norm_once(monkeypatch, grads):
    """Whatever requires grad, a call autograd records normalises x once and runs one plain GEMM per weight."""
    x, g, ws, bs = make((9,), K, NS, torch.float32)
    {"x": x, "weight": ws[1], "norm_weight": g}[grads].requires_grad_()
    counts = _Counts(monkeypatch)
    ys = tilewright.rms_norm_linears(x, g, ws, bs, eps=EPS)
    assert (counts.norms, len(counts.fused_weights), counts.gemms) == (1, 0, len(NS))
    # (with only weights[1] training, only its projection is recorded)
    assert [y.requires_grad for y in ys] == [grads != "weight" or i == 1 for i in range(len(NS))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("mode", ["no_grad", "nothing_requires_grad", "inference_mode"])
def test_inference_route_is_per_weight_rms_norm_linear_bit_for_bit(monkeypatch, dtype, mode):
    x, g, ws, bs = make((3, 7), K, NS, dtype)
    if mode != "nothing_requires_grad":
        for t in (x, g, *ws):
            t.requires_grad_()
    ctx = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode,
           "nothing_requires_grad": torch.enable_grad}[mode]
    with ctx():
        want = [tilewright.rms_norm_linear(x, g, w, b, eps=EPS) for w, b in zip(ws, bs)]
        counts = _Counts(monkeypatch)
        got = tilewright.rms_norm_linears(x, g, ws, bs, eps=EPS)
    assert [id(w) for w in counts.fused_weights] == [id(w) for w in ws] and counts.gemms == 0
    assert isinstance(got, tuple) and len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def test_backend_torch_is_passed_to_every_projection():
    x, g, ws, bs = make((11,), K, NS, torch.float32)
    x.requires_grad_()
    ys = tilewright.rms_norm_linears(x, g, ws, bs, eps=EPS, backend="torch")
    u = F.rms_norm(x, (K,), g, EPS)
    for y, w, b in zip(ys, ws, bs):
        assert torch.equal(y, F.linear(u, w, b))
    with torch.no_grad():
        for y, w, b in zip(tilewright.rms_norm_linears(x, g, ws, bs, eps=EPS, backend="torch"), ws, bs):
            assert torch.equal(y, tilewright.rms_norm_linear(x, g, w, b, eps=EPS, backend="torch"))


def test_torch_compile_fullgraph_training_and_inference():
    """One graph node (ops/_opaque.py) with list arguments and a tuple result: no graph break, eager's values."""
    x, g, ws, bs = make((2, 5), K, NS, torch.float32)

    def f(x, g):
        ys = tilewright.rms_norm_linears(x, g, ws, bs, eps=EPS)
        return sum((y * y).sum() for y in ys)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    xc, gc = x.clone().requires_grad_(), g.clone().requires_grad_()
    xe, ge = x.clone().requires_grad_(), g.clone().requires_grad_()
    compiled(xc, gc).backward()
    f(xe, ge).backward()
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gc.grad, ge.grad, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, g), f(x, g), rtol=1e-5, atol=1e-5)


def test_dtensor_arguments_take_the_per_weight_route(monkeypatch):
    """Column-parallel DTensor weights (Shard(0)) with a replicated x and norm weight, on a fake two-rank group:
    per-weight rms_norm_linear calls (their tensor-parallel local route) even with autograd recording, and each
    output's rank-0 shard is the first half of the plain call's columns."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():  # pragma: no cover
        pytest.skip("torch.distributed is not available")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    monkeypatch.setenv("TILEWRIGHT_ATEN_BELOW", "0")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,))
        x, g, ws, bs = make((6,), K, (16, 8), torch.float32, bias_mask=(True, False))
        want = tilewright.rms_norm_linears(x, g, ws, bs, eps=EPS)

        def dt(t, placement):
            if t is None:
                return None
            local = t if placement == Replicate() else t.chunk(2, dim=placement.dim)[0]
            return DTensor.from_local(local, mesh, [placement], run_check=False, shape=t.shape, stride=t.stride())

        xd = dt(x.clone().requires_grad_(), Replicate())
        gd = dt(g, Replicate())
        counts = _Counts(monkeypatch)
        wd = [dt(w, Shard(0)) for w in ws]
        got = tilewright.rms_norm_linears(xd, gd, wd, [dt(b, Shard(0)) for b in bs], eps=EPS)
        # (each call then runs its local route, which calls rms_norm_linear again on the rank's plain shards)
        assert [id(w) for w in counts.fused_weights if isinstance(w, DTensor)] == [id(w) for w in wd]
        assert counts.gemms == 0
        for y, ref in zip(got, want):
            assert isinstance(y, DTensor) and y.placements == (Shard(1),) and y.shape == ref.shape
            torch.testing.assert_close(y.to_local(), ref.chunk(2, dim=1)[0], rtol=1e-5, atol=1e-5)
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------------------------ input checks
def _bad_calls():
    x, g, ws, bs = make((4,), 16, (8, 6), torch.float32, bias_mask=(True, False))
    yield "single tensor", TypeError, r"weights: .*single Tensor.*rms_norm_linear", (x, g, ws[0]), {}
    yield "empty", ValueError, r"weights: expected at least one", (x, g, []), {}
    yield "generator", TypeError, r"weights: expected a list or tuple", (x, g, (w for w in ws)), {}
    yield "not a tensor", TypeError, r"weights\[1\]: expected a torch.Tensor", (x, g, [ws[0], [[0.0] * 16]]), {}
    yield "K mismatch", ValueError, r"weights\[1\]: expected shape \(N, 16\)", (x, g, [ws[0], ws[1][:, :8]]), {}
    yield "1-D weight", ValueError, r"weights\[0\]: expected 2-D", (x, g, [ws[0][0], ws[1]]), {}
    yield "weight dtype", TypeError, r"weights\[1\]: dtype torch.float16", (x, g, [ws[0], ws[1].half()]), {}
    yield "weight device", ValueError, r"weights\[1\]: on device meta", (x, g, [ws[0], ws[1].to("meta")]), {}
    yield "biases length", ValueError, r"biases: expected 2 entries.*got 1", (x, g, ws, [bs[0]]), {}
    yield "biases tensor", TypeError, r"biases: .*single Tensor", (x, g, ws, bs[0]), {}
    yield "bias type", TypeError, r"biases\[1\]: expected a torch.Tensor or None", (x, g, ws, [bs[0], 1.0]), {}
    yield "bias shape", ValueError, r"biases\[0\]: expected shape \(8,\)", (x, g, ws, [bs[0][:6], None]), {}
    yield "bias 2-D", ValueError, r"biases\[0\]: expected 1-D", (x, g, ws, [bs[0][None], None]), {}
    yield "bias dtype", TypeError, r"biases\[0\]: dtype torch.float64", (x, g, ws, [bs[0].double(), None]), {}
    yield "norm shape", ValueError, r"norm_weight: expected shape \(16,\)", (x, g[:8], ws), {}
    yield "norm dtype", TypeError, r"norm_weight: dtype torch.float16", (x, g.half(), ws), {}
    yield "x type", TypeError, r"x: expected a torch.Tensor", ([[0.0] * 16], g, ws), {}
    yield "x dtype", TypeError, r"x: dtype torch.int64", (x.long(), g, ws), {}
    yield "eps zero", ValueError, r"eps", (x, g, ws), {"eps": 0.0}
    yield "eps nan", ValueError, r"eps", (x, g, ws), {"eps": float("nan")}
    yield "eps None", TypeError, r"eps", (x, g, ws), {"eps": None}
    yield "backend", ValueError, r"backend: unknown backend", (x, g, ws), {"backend": "nonsense"}
    yield "backend type", TypeError, r"backend: expected a string", (x, g, ws), {"backend": 3}


_BAD = list(_bad_calls())


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("case", _BAD, ids=[c[0] for c in _BAD])
def test_input_checks_name_the_argument(case, grad):
    """Checked before any route is chosen: the same error with and without autograd."""
    _, exc, pattern, args, kwargs = case
    if grad and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
        args = (args[0].clone().requires_grad_(), *args[1:])
    with torch.set_grad_enabled(grad), pytest.raises(exc, match=pattern):
        tilewright.rms_norm_linears(*args, **kwargs)


def test_exported():
    assert tilewright.rms_norm_linears is tilewright.ops.rms_norm_linears
    assert "rms_norm_linears" in tilewright.__all__ and "rms_norm_linears" in tilewright.ops.__all__
    assert "rms_norm_linears" in tilewright.__doc__
