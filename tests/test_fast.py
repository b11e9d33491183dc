"""ops/_fast.build and Replay on the CPU (the launch itself is faked; tests/test_fast_gpu.py replays real kernels):
which recorded launches become replays, and that a replay hands each pointer argument the right tensor's address."""
import torch

from tilewright._record import is_recording, record, recording
from tilewright.ops import _fast


class FakeBound:
    def __init__(self):
        self.calls = []

    def __call__(self, *pointers):
        self.calls.append(pointers)


def test_recording_is_scoped_and_nests():
    assert not is_recording()
    with recording() as outer:
        record("x", {})
        with recording() as inner:
            record("y", {})
        record("z", {})
    assert outer == [("x", {}), ("z", {})] and inner == [("y", {})] and not is_recording()
    record("ignored", {})  # outside a recording: nothing kept, nothing raised


def test_replay_maps_roles_by_name_not_by_address():
    a = torch.randn(4, 8)
    out = torch.empty(4, 3)
    bound = FakeBound()
    # a passed as both operands at record time (matmul(a, a)-style): the replay must still read b from b
    replay = _fast.build([(bound, {"a_ptr": a, "b_ptr": a, "c_ptr": out})], {"a_ptr": (0, a), "b_ptr": (1, a)},
                         {"c_ptr": (0, out)})
    assert replay is not None
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    (res,) = replay(x.device, x, y)
    assert bound.calls == [(x.data_ptr(), y.data_ptr(), res.data_ptr())]
    assert res.shape == out.shape and res.stride() == out.stride() and res.dtype == out.dtype


def test_outputs_keep_shape_stride_and_dtype():
    q = torch.randn(2, 5, 3, 8).transpose(1, 2)  # (B, H, S, D) view of (B, S, H, D)
    o = torch.empty_like(q)
    lse = torch.empty(2, 3, 5)
    replay = _fast.build([(FakeBound(), {"Q": q, "O": o, "LSE": lse})], {"Q": (0, q)}, {"O": (0, o), "LSE": (1, lse)})
    out, l2 = replay(q.device, q)
    assert out.stride() == o.stride() and out.shape == o.shape and l2.shape == lse.shape and l2.dtype == lse.dtype


def test_refusals():
    a, b, out = torch.randn(4, 8), torch.randn(8, 3), torch.empty(4, 3)
    ok = {"a_ptr": a, "b_ptr": b, "c_ptr": out}
    ins, outs = {"a_ptr": (0, a), "b_ptr": (1, b)}, {"c_ptr": (0, out)}
    assert _fast.build([(FakeBound(), ok)], ins, outs) is not None
    assert _fast.build([], ins, outs) is None  # nothing launched (torch or empty-shape path)
    assert _fast.build([(FakeBound(), ok), (FakeBound(), ok)], ins, outs) is None  # two launches
    assert _fast.build([(None, ok)], ins, outs) is None  # an unbound launch (CUDA kernel, pending compile)
    assert _fast.build([(FakeBound(), {**ok, "g_scale": torch.empty(1)})], ins, outs) is None  # an intermediate
    copy = b.contiguous().clone()
    assert _fast.build([(FakeBound(), {**ok, "b_ptr": copy})], ins, outs) is None  # the op copied an input
    assert _fast.build([(FakeBound(), ok)], {**ins, "b_ptr": (1, None)}, outs) is None  # role of a None input


def test_cache_is_bounded_and_invalidated(monkeypatch):
    cache = _fast.new_cache()
    monkeypatch.setattr(_fast, "CACHE_MAX", 3)
    for i in range(5):
        _fast.store(cache, i, object())
    assert len(cache) <= 3 and 4 in cache
    _fast.invalidate()
    assert not cache


def test_cpu_and_interpreter_calls_never_replay():
    a = torch.randn(4, 8)
    assert not _fast.eligible(a)  # CPU tensors: the full path every time
    assert _fast.sig(None) is None
