"""The eager replay hit in one C call (tilewright/_native/replay_key.c ``hit``) returns what its Python twin
(ops/_fast.python_hit) returns - None, an ATen route's result, or ``(entry, key)`` - for every route the ops store and
every refusal; the C hit runs a route from its ``_steps`` (ATen's builtins as data, ops/_aten.py) where the twin
calls the route's ``__call__``, so these tests are also the proof that each route's steps compute what its
``__call__`` computes: bit-equal outputs and gradients on CPU tensors.

CPU tier: CPU tensors stand in for CUDA ones (the C hit bound with ``is_cpu``, as tests/test_native_key.py does)."""
import importlib

import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright import _native
from tilewright.ops import _aten, _fast, attention, gemm

rms = importlib.import_module("tilewright.ops.rms_norm_linear")  # (the package attribute is the function)


@pytest.fixture
def hits(monkeypatch):
    """(python_hit, c_hit) with the C key serving both, CPU tensors eligible, the ATen route on, caches empty."""
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # (the ops' full paths below launch no kernel: ATen routes only)
    monkeypatch.delenv(_aten.ENV, raising=False)
    monkeypatch.setattr(_fast, "eligible", _fast.eligibility("is_cpu"))
    monkeypatch.setattr(_fast, "_native_pending", False)
    c_key = _fast.native_replay_key("is_cpu", block=True)
    assert c_key is not None, _native.status()
    c_hit = _fast.native_hit()
    monkeypatch.setattr(_fast, "replay_key", c_key)
    monkeypatch.setattr(_fast, "hit", _fast.python_hit)
    _fast.invalidate()
    yield _fast.python_hit, c_hit
    _fast.invalidate()
    _fast.native_replay_key("is_cuda")


def _agree(python_hit, c_hit, args, tensors, grad: bool):
    """Both hits on the same stored route: results bit-equal (values, dtype, shape, strides), and with ``grad`` the
    gradients of a function of each - the C steps record the same autograd graph as the route's __call__."""
    cache, head, _, tail, types, capture = args
    outs, grads = [], []
    leaves = [t for t in tensors if t is not None and t.requires_grad]
    for hit in (python_hit, c_hit):
        out = hit(cache, head, tensors, tail, types, capture)  # (the stored tensors: their alignment is in the key)
        assert isinstance(out, torch.Tensor), out
        outs.append(out)
        if grad:
            grads.append(torch.autograd.grad(out.float().square().sum(), leaves))
    a, b = outs
    assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
    assert torch.equal(a, b)
    if grad:
        assert grads[0] and all(torch.equal(ga, gb) for ga, gb in zip(*grads))
    return a


LINEAR_CASES = [  # (x shape, bias, residual, activation)
    ((6, 16), False, False, None),
    ((6, 16), True, False, None),
    ((2, 3, 16), True, True, "gelu"),
    ((2, 3, 16), False, True, "relu"),
    ((5, 16), True, False, "gelu_tanh"),
    ((5, 16), False, True, "silu"),
]


@pytest.mark.parametrize("shape,has_bias,has_res,act", LINEAR_CASES)
def test_linear_route_steps_match_its_call(hits, shape, has_bias, has_res, act):
    python_hit, c_hit = hits
    x = torch.randn(*shape, requires_grad=True)
    w = torch.randn(12, 16, requires_grad=True)
    b = torch.randn(12, requires_grad=True) if has_bias else None
    r = torch.randn(*shape[:-1], 12, requires_grad=True) if has_res else None
    want = tilewright.linear(x, w, b, residual=r, activation=act)  # the first call stores the route
    entry = next(iter(gemm._replays.values()))
    assert type(entry) is _aten.AtenGemm and entry._steps is not None
    tensors = (x, w, b, r)
    args = (gemm._replays, ("linear",), tensors, (act, None, None), gemm._GEMM_TAIL_TYPES, False)
    got = _agree(python_hit, c_hit, args, tensors, grad=True)
    assert torch.equal(got, want)


@pytest.mark.parametrize("a_shape,has_bias", [((6, 16), True), ((6, 16), False), ((2, 6, 16), True)])
def test_matmul_route_steps_match_its_call(hits, a_shape, has_bias):
    """matmul's three forms: addmm (2-D with a bias), matmul + bias (3-D), matmul alone."""
    python_hit, c_hit = hits
    a = torch.randn(*a_shape, requires_grad=True)
    b = torch.randn(16, 12, requires_grad=True)
    bias = torch.randn(12, requires_grad=True) if has_bias else None
    tilewright.matmul(a, b, bias=bias)
    entry = next(iter(gemm._replays.values()))
    assert type(entry) is _aten.AtenGemm and entry._steps is not None
    tensors = (a, b, bias, None)
    args = (gemm._replays, ("matmul",), tensors, (None, None, None), gemm._GEMM_TAIL_TYPES, False)
    _agree(python_hit, c_hit, args, tensors, grad=True)


@pytest.mark.parametrize("has_bias", [False, True])
@pytest.mark.parametrize("grad", [False, True])
def test_rms_norm_linear_route_steps_match_its_call(hits, has_bias, grad):
    python_hit, c_hit = hits
    x = torch.randn(2, 5, 16, requires_grad=grad)
    g = torch.rand(16, requires_grad=grad) + 0.5
    w = torch.randn(12, 16, requires_grad=grad)
    b = torch.randn(12, requires_grad=grad) if has_bias else None
    want = tilewright.rms_norm_linear(x, g, w, b, eps=1e-5)
    entry = next(iter(rms._replays.values()))
    assert type(entry) is _aten.AtenRmsNormLinear and entry._steps is not None
    tensors = (x, g, w, b)
    args = (rms._replays, (), tensors, (1e-5, None), rms._TAIL_TYPES, True)
    got = _agree(python_hit, c_hit, args, tensors, grad=grad)
    assert torch.equal(got, want)


@pytest.mark.parametrize("grad", [False, True])
def test_rms_norm_swiglu_route_steps_match_its_call(hits, monkeypatch, grad):
    """rms_norm_linear(activation="swiglu")'s combined ATen route (stored after a small call ran the pair on ATen's
    ops): its C steps - torch.rms_norm, F.linear, _aten.swiglu_halves - equal its __call__ and the first call."""
    python_hit, c_hit = hits
    monkeypatch.setattr(_aten, "swiglu_formula_eager", lambda t: t.numel() < _aten.COMPILED_ELEMENTWISE_MIN)
    x = torch.randn(2, 5, 16, requires_grad=grad)
    g = torch.rand(16, requires_grad=grad) + 0.5
    w = torch.randn(12, 16, requires_grad=grad)
    want = tilewright.rms_norm_linear(x, g, w, eps=1e-5, activation="swiglu")
    entry = next(iter(rms._swiglu_routes.values()))
    assert type(entry) is _aten.AtenRmsNormSwigluLinear and entry._steps is not None
    tensors = (x, g, w, None)
    args = (rms._swiglu_routes, (), tensors, (1e-5, None), rms._TAIL_TYPES, True)
    got = _agree(python_hit, c_hit, args, tensors, grad=grad)
    assert torch.equal(got, want) and got.shape == (2, 5, 6)


@pytest.mark.parametrize("causal,scale,hkv", [(True, None, 4), (False, 0.3, 4), (True, None, 2), (False, 0.5, 1)])
def test_attention_route_steps_match_its_call(hits, causal, scale, hkv):
    """SDPA's two keyword forms: is_causal alone, and with scale / enable_gqa."""
    python_hit, c_hit = hits
    q = torch.randn(1, 4, 8, 16, dtype=torch.float16, requires_grad=True)
    k = torch.randn(1, hkv, 8, 16, dtype=torch.float16, requires_grad=True)
    v = torch.randn(1, hkv, 8, 16, dtype=torch.float16, requires_grad=True)
    want = tilewright.flash_attention(q, k, v, causal=causal, scale=scale)
    entry = next(iter(attention._replays.values()))
    assert type(entry) is _aten.AtenAttention
    tensors = (q, k, v)
    args = (attention._replays, (), tensors, (causal, scale, None, "top_left", None), attention._TAIL_TYPES, False)
    got = _agree(python_hit, c_hit, args, tensors, grad=True)
    assert torch.equal(got, want)


def test_refusals_and_kernel_entries_agree(hits):
    """None from both for an option of another type (the key function's exact-type test), a tensor subclass, a
    missing entry and a capture key without a first tensor; ``(entry, key)`` from both for an entry that is no ATen
    route (a kernel replay's place), with the key the Python key function builds."""
    python_hit, c_hit = hits
    x, w = torch.randn(6, 16), torch.randn(12, 16)
    types = gemm._GEMM_TAIL_TYPES
    cache = {}
    calls = [
        (cache, ("linear",), (x, w, None, None), (None, None, None), types, False),  # no entry
        (cache, ("linear",), (x, w, None, None), (5, None, None), types, False),  # an int activation
        (cache, ("linear",), (x, w, None, None), (None, "bf16", None), types, False),  # a str out_dtype
        (cache, ("linear",), (x.as_subclass(_Sub), w, None, None), (None, None, None), types, False),
        (cache, (), (None, w), (1e-5, None), rms._TAIL_TYPES, True),  # capture with no first tensor
        (cache, (), (x, w), (1, None), rms._TAIL_TYPES, True),  # an int eps
    ]
    for args in calls:
        assert python_hit(*args) is None and c_hit(*args) is None, args
    marker = object()
    key = gemm._replay_key(x, w, None, None, None, None, None, "linear")
    cache[key] = marker
    args = (cache, ("linear",), (x, w, None, None), (None, None, None), types, False)
    assert python_hit(*args) == c_hit(*args) == (marker, key)
    g = torch.ones(16)
    rkey = rms._replay_key(x, g, w, None, 1e-5, None)
    cache[rkey] = marker
    args = (cache, (), (x, g, w, None), (1e-5, None), rms._TAIL_TYPES, True)
    got = c_hit(*args)
    assert got == python_hit(*args) == (marker, rkey) and got[1][0] is False  # (capturing: False on CPU)


class _Sub(torch.Tensor):
    pass


def test_a_route_without_steps_is_called(hits):
    """A route made without a signature (``_steps`` None: a traced call's, never stored eagerly) still serves a hit,
    through its __call__; malformed steps raise instead of running."""
    python_hit, c_hit = hits
    x, g, w = torch.randn(4, 16), torch.rand(16) + 0.5, torch.randn(8, 16)
    key = rms._replay_key(x, g, w, None, 1e-5, None)
    cache = {key: _aten.AtenRmsNormLinear(1e-5)}
    args = (cache, (), (x, g, w, None), (1e-5, None), rms._TAIL_TYPES, True)
    assert torch.equal(c_hit(*args), F.linear(F.rms_norm(x, (16,), g, 1e-5), w))
    bad = _aten.AtenRmsNormLinear(1e-5, 16)
    bad._steps = ((F.linear, (0, 7), None),)  # a tensor index past the call's four
    cache[key] = bad
    with pytest.raises(ValueError, match="out of range"):
        c_hit(*args)
    bad._steps = ((F.linear, (-1, 2), None),)  # the previous result of a first step
    with pytest.raises(ValueError, match="out of range"):
        c_hit(*args)
    bad._steps = ((F.linear, (0, ()), None),)  # an empty constant
    with pytest.raises(ValueError, match="1-tuple"):
        c_hit(*args)
    bad._steps = ((F.linear, (0, 2)),)  # no keyword names
    with pytest.raises(ValueError, match="not \\(fn"):
        c_hit(*args)
    with pytest.raises(TypeError, match="hit"):
        c_hit(cache, (), (x,), (1e-5,), rms._TAIL_TYPES, True)  # tail and its types of different lengths


@pytest.mark.parametrize("op", ["linear", "matmul", "rms_norm_linear", "flash_attention"])
def test_the_public_ops_serve_hits_through_the_one_call(hits, monkeypatch, op):
    """The public functions ask ``_fast.hit`` first and return what it returns for an ATen route (here the C hit,
    counted): the second call of a signature makes no other lookup."""
    python_hit, c_hit = hits
    seen = []

    def counted(*args):
        out = c_hit(*args)
        seen.append(type(out))
        return out

    monkeypatch.setattr(_fast, "hit", counted)
    if op == "linear":
        x, w = torch.randn(6, 16, requires_grad=True), torch.randn(12, 16, requires_grad=True)
        call, want = (lambda: tilewright.linear(x, w, activation="gelu")), F.gelu(F.linear(x, w))
    elif op == "matmul":
        a, b, bias = torch.randn(2, 6, 16, requires_grad=True), torch.randn(16, 12), torch.randn(12)
        call, want = (lambda: tilewright.matmul(a, b, bias=bias, activation="relu")), F.relu(a @ b + bias)
    elif op == "rms_norm_linear":
        x, g, w = torch.randn(6, 16), torch.rand(16) + 0.5, torch.randn(12, 16)
        call, want = (lambda: tilewright.rms_norm_linear(x, g, w, eps=1e-5)), F.linear(F.rms_norm(x, (16,), g, 1e-5), w)
    else:
        q = torch.randn(1, 2, 8, 16, dtype=torch.float16)
        call, want = (lambda: tilewright.flash_attention(q, q, q, causal=True)), \
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
    first, second = call(), call()
    assert seen == [type(None), torch.Tensor]
    assert torch.equal(first, want) and torch.equal(second, want)


@pytest.mark.gpu
def test_the_hits_agree_on_cuda_tensors(monkeypatch):
    """On the device, bound as in production (``is_cuda``): the three routes the B1 model steps hit - linear with
    autograd (F.linear + GELU + residual), rms_norm_linear and attention without - give bit-equal results through
    both hits, equal to torch's own ops; and the adoption swaps in the C hit with the C key."""
    monkeypatch.delenv(_aten.ENV, raising=False)
    c_key = _fast.native_replay_key(block=True)
    assert c_key is not None, _native.status()
    monkeypatch.setattr(_fast, "replay_key", c_key)
    c_hit = _fast.native_hit()
    _fast.invalidate()
    dev, dt = "cuda", torch.bfloat16
    x = torch.randn(2, 64, 256, device=dev, dtype=dt, requires_grad=True)
    w = torch.randn(384, 256, device=dev, dtype=dt, requires_grad=True)
    r = torch.randn(2, 64, 384, device=dev, dtype=dt)
    g = torch.rand(256, device=dev, dtype=dt) + 0.5
    q = torch.randn(2, 8, 64, 64, device=dev, dtype=dt)
    kv = torch.randn(2, 2, 64, 64, device=dev, dtype=dt)
    try:
        tilewright.linear(x, w, residual=r, activation="gelu")
        with torch.no_grad():
            tilewright.rms_norm_linear(x, g, w, eps=1e-5)
            tilewright.flash_attention(q, kv, kv, causal=True)
        calls = [
            (True, (gemm._replays, ("linear",), (x, w, None, r), ("gelu", None, None), gemm._GEMM_TAIL_TYPES, False),
             lambda: F.gelu(F.linear(x, w)) + r),
            (False, (rms._replays, (), (x, g, w, None), (1e-5, None), rms._TAIL_TYPES, True),
             lambda: F.linear(F.rms_norm(x, (256,), g, 1e-5), w)),
            (False, (attention._replays, (), (q, kv, kv), (True, None, None, "top_left", None), attention._TAIL_TYPES,
                     False), lambda: F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)),
        ]
        for grad, args, torch_op in calls:
            with torch.set_grad_enabled(grad):
                a, b, want = _fast.python_hit(*args), c_hit(*args), torch_op()
            assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), (a, b)
            assert torch.equal(a, b) and torch.equal(b, want)
        monkeypatch.setattr(_fast, "hit", _fast.python_hit)
        monkeypatch.setattr(_fast, "_native_pending", True)
        _fast._adopt_native()  # what the first key of a process does once the extension is loaded
        assert _fast.hit is c_hit and _fast.replay_key is c_key and not _fast._native_pending
    finally:
        _fast.invalidate()
