"""The replay key's C twin (tilewright/_native/replay_key.c) builds the same tuple as the Python key
(ops/_fast.python_replay_key) for every argument the ops pass it - same value, same hash, same None - so a replay
recorded through one is found through the other and nothing but the host cost differs.

CPU tier: the C key is bound with ``is_cpu`` as its device test and the Python key's eligibility is made to match
(CPU tensors stand in for CUDA ones, as in test_aten_route.py); the fixture binds the C key back to ``is_cuda``."""
import itertools

import pytest
import torch

from tilewright import _native, backends, router
from tilewright.autotune import cache as tuning_cache
from tilewright.ops import _fast


@pytest.fixture
def keys(monkeypatch):
    """(python_key, c_key), both judging CPU tensors eligible; the current device faked (CPU torch lacks it)."""
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    # The CPU tier runs under the interpreter, where both keys give None; these tests launch no kernel, so the keys
    # may read the variable as a GPU run has it (the test of the interpreter's refusal sets it back).
    monkeypatch.setenv("TRITON_INTERPRET", "0")

    monkeypatch.setattr(_fast, "eligible", _fast.eligibility("is_cpu"))
    monkeypatch.setattr(_fast, "_native_pending", False)  # (its adoption would bind the C key to is_cuda)
    c_key = _fast.native_replay_key("is_cpu", block=True)
    assert c_key is not None, _native.status()
    yield _fast.python_replay_key, c_key
    _fast.native_replay_key("is_cuda")


def _tensors():
    """Tensors that differ in every field of a signature: shape, strides (transposed, sliced), dtype, alignment
    (offset views), type (Parameter), requires_grad."""
    base = torch.randn(64, 48)
    yield base
    yield base.t()
    yield base[:, 8:40]
    yield base[1:, :]  # 192-byte offset: 16-aligned, not 128
    yield base.view(-1)[1:]  # 4-byte offset
    yield base.to(torch.float16)
    yield base.to(torch.bfloat16)[:32]
    yield torch.nn.Parameter(base.clone())
    yield base.clone().requires_grad_(True)
    yield torch.empty(0, 48)
    yield torch.randn(2, 3, 48).transpose(0, 1)


def _same(python_key, c_key, head, tensors, tail):
    a, b = python_key(head, tensors, tail), c_key(head, tensors, tail)
    assert a == b, (a, b)
    assert (a is None) == (b is None)
    if a is not None:
        assert hash(a) == hash(b)
        assert [type(x) for x in a] == [type(x) for x in b]
    return a


def test_the_extension_builds_and_loads_here():
    """CI's machine has a C compiler and Python's headers: the extension must load (a silent fallback would leave
    the C key untested)."""
    assert _native.load(block=True) is not None, _native.status()
    assert _native.status().startswith("loaded")


def test_the_c_key_equals_the_python_key_on_tensors_and_options(keys):
    python_key, c_key = keys
    tensors = list(_tensors())
    for t1, t2 in itertools.product(tensors, repeat=2):
        for tail in (("gelu", None, None), (None, torch.float32, "triton")):
            _same(python_key, c_key, ("linear",), (t1, t2, None, t1), tail)
    for t in tensors:
        _same(python_key, c_key, (), (t, t, t), (True, 0.125, None, "top_left", None))
        _same(python_key, c_key, (), (t, None, None, None), (1e-6, None))
        _same(python_key, c_key, (), (), ())


def test_the_keys_agree_on_autograd_recording(keys):
    python_key, c_key = keys
    x, w = torch.randn(8, 4), torch.nn.Parameter(torch.randn(4, 4))
    for grad_mode in (True, False):
        with torch.set_grad_enabled(grad_mode):
            for args in ((x, w), (x, None), (x.requires_grad_(False), w.detach()), (None, w)):
                key = _same(python_key, c_key, ("matmul",), args, ())
                assert key[-2] is (grad_mode and any(t is not None and t.requires_grad for t in args))


def test_the_keys_follow_the_process_state(keys, monkeypatch):
    """Every part of _fast.state(): switches set / changed / removed, the tuning cache generation, the router's and
    the backends' epochs, a forced backend, the current device."""
    python_key, c_key = keys
    x = torch.randn(8, 4)
    args = (("linear",), (x, x, None, None), (None, None, None))
    seen = [_same(python_key, c_key, *args)]
    switch = backends.environment()[0]
    monkeypatch.delenv(switch, raising=False)
    for value in ("0", "1"):
        monkeypatch.setenv(switch, value)
        seen.append(_same(python_key, c_key, *args))
    monkeypatch.delenv(switch)
    assert _same(python_key, c_key, *args) == seen[0]
    monkeypatch.setattr(tuning_cache, "generation", tuning_cache.generation + 1)
    seen.append(_same(python_key, c_key, *args))
    monkeypatch.setattr(router, "epoch", router.epoch + 1)
    seen.append(_same(python_key, c_key, *args))
    monkeypatch.setattr(backends, "readiness_epoch", backends.readiness_epoch + 1)
    seen.append(_same(python_key, c_key, *args))
    with router.use_backend("torch"):
        seen.append(_same(python_key, c_key, *args))
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 1, raising=False)
    seen.append(_same(python_key, c_key, *args))
    assert len(set(seen)) == len(seen)  # each change made a new key


def test_the_keys_refuse_the_same_calls(keys, monkeypatch):
    """None from both: a tensor subclass, a tensor off the device, a dispatch mode, a function mode, a functorch
    transform, the Triton interpreter."""
    python_key, c_key = keys

    class Sub(torch.Tensor):
        pass

    x = torch.randn(4, 4)
    assert _same(python_key, c_key, (), (x.as_subclass(Sub),), ()) is None
    assert _same(python_key, c_key, (), (x, torch.randn(2, device="meta")), ()) is None

    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        assert _same(python_key, c_key, (), (x,), ()) is None

    class FunctionMode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with FunctionMode():
        assert _same(python_key, c_key, (), (x,), ()) is None
    seen = []
    torch.func.vmap(lambda row: seen.append(_same(python_key, c_key, (), (x,), ())) or row)(x)
    assert seen == [None]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert _same(python_key, c_key, (), (x,), ()) is None
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert _same(python_key, c_key, (), (x,), ()) is not None


def test_the_c_key_raises_on_bad_calls():
    module = _native.load(block=True)
    assert module is not None, _native.status()
    with pytest.raises(TypeError, match="replay_key"):
        module.replay_key((), [], ())
    with pytest.raises(TypeError, match="configure"):
        module.configure(1, 2)


def test_native_off_switch_and_a_missing_compiler(monkeypatch, tmp_path):
    """TILEWRIGHT_NATIVE=0 loads nothing; a machine without a compiler gets a reason, not an exception."""
    monkeypatch.setenv(_native.ENV, "0")
    assert _native.disabled() and "off" in _native.status()
    monkeypatch.delenv(_native.ENV)
    monkeypatch.setattr(_native, "_compiler", lambda: None)
    with pytest.raises(RuntimeError, match="no C compiler"):
        _native._build(tmp_path / "x.so")


def test_an_op_call_replays_through_the_c_key(keys, monkeypatch):
    """A small linear with autograd takes the ATen route (ops/_aten.py) on its first call, recorded under the key;
    the next call finds it through the C key - the key the Python one would have built - and returns F.linear's
    values and gradients."""
    import torch.nn.functional as F

    from tilewright import linear
    from tilewright.ops import _aten, gemm

    python_key, c_key = keys
    monkeypatch.delenv(_aten.ENV, raising=False)
    monkeypatch.setattr(_fast, "replay_key", c_key)
    _fast.invalidate()
    try:
        x = torch.randn(6, 8, requires_grad=True)
        w = torch.randn(5, 8, requires_grad=True)
        for _ in range(2):
            y = linear(x, w)
        (entry,) = gemm._replays.items()
        assert type(entry[1]) is _aten.AtenGemm
        assert entry[0] == python_key(("linear",), (x, w, None, None), (None, None, None))
        y.sum().backward()
        x2, w2 = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
        F.linear(x2, w2).sum().backward()
        assert torch.equal(y, F.linear(x, w)) and torch.equal(x.grad, x2.grad) and torch.equal(w.grad, w2.grad)
    finally:
        _fast.invalidate()


@pytest.mark.gpu
def test_the_keys_agree_on_cuda_tensors():
    """On the device, as bound in production (``is_cuda``): the same keys for CUDA tensors of every kind above, and
    None from both for a CPU tensor among them."""
    c_key = _fast.native_replay_key(block=True)
    assert c_key is not None, _native.status()
    python_key = _fast.python_replay_key
    tensors = [t.cuda() if not isinstance(t, torch.nn.Parameter) else torch.nn.Parameter(t.detach().cuda())
               for t in _tensors()]
    for t1, t2 in itertools.product(tensors, repeat=2):
        key = _same(python_key, c_key, ("linear",), (t1, t2, None, t2), ("gelu", None, None))
        assert key is not None
    assert _same(python_key, c_key, (), (tensors[0], torch.randn(3)), ()) is None
    with torch.cuda.device(0):
        assert _same(python_key, c_key, (), (tensors[0],), ())[-1][-1] == 0
