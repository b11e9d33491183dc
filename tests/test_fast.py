"""ops/_fast.build and Replay on the CPU (the launch itself is faked; tests/test_fast_gpu.py replays real kernels):
which recorded launches become replays, and that a replay hands each pointer argument the right tensor's address."""
import pytest
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
    # an inner recording's launches are launches of the enclosing call too: handed up when it ends
    assert outer == [("x", {}, ()), ("y", {}, ()), ("z", {}, ())] and inner == [("y", {}, ())] and not is_recording()
    record("ignored", {})  # outside a recording: nothing kept, nothing raised


def test_a_replay_reports_itself_to_an_enclosing_recording():
    """An op-level replay inside a public function's first (recording) call reports its bound launch with the
    tensors it used, so the public function can build its own replay from it."""
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    out = torch.empty(4, 3)
    bound = FakeBound()
    replay = _fast.build([(bound, {"a_ptr": a, "b_ptr": b, "c_ptr": out})], {"a_ptr": (0, a), "b_ptr": (1, b)},
                         {"c_ptr": (0, out)})
    a2, b2 = torch.randn(4, 8), torch.randn(8, 3)
    with recording() as launches:
        got, = replay(a2.device, a2, b2)
    (rb, roles, _), = launches
    assert rb is bound and list(roles) == ["a_ptr", "b_ptr", "c_ptr"]
    assert roles["a_ptr"] is a2 and roles["b_ptr"] is b2 and roles["c_ptr"] is got
    rebuilt = _fast.build(launches, {"a_ptr": (0, a2), "b_ptr": (1, b2)}, {"c_ptr": (0, got)})
    assert rebuilt is not None
    replay(a.device, a, b)  # outside a recording: nothing reported, nothing raised


def test_a_replay_reports_the_buffers_its_launch_writes_to_an_enclosing_recording():
    """A launch that writes a scratch buffer whole (the folded RMSNorm-GEMM's row counters, zeroed by the launch
    itself) replays with a fresh one, and reports it as written when a public function records around the replay -
    so the public function's own replay can allocate it too (without the ``writes``, it would be a buffer from
    nowhere and the public function would never replay)."""
    x, out, counts = torch.randn(4, 8), torch.empty(4, 3), torch.empty(2, dtype=torch.int32)
    bound = FakeBound()
    replay = _fast.build([(bound, {"a_ptr": x, "c_ptr": out, "counts_ptr": counts}, ("counts_ptr",))],
                         {"a_ptr": (0, x)}, {"c_ptr": (0, out)})
    assert replay is not None
    x2 = torch.randn(4, 8)
    with recording() as launches:
        got, = replay(x2.device, x2)
    (rb, roles, writes), = launches
    assert writes == ("counts_ptr",) and roles["counts_ptr"].dtype == torch.int32
    assert roles["counts_ptr"].data_ptr() not in (x2.data_ptr(), got.data_ptr())
    assert _fast.build(launches, {"a_ptr": (0, x2)}, {"c_ptr": (0, got)}) is not None


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
    assert _fast.build([(FakeBound(), ok), (FakeBound(), ok)], ins, outs) is None  # two launches: an op asks
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


def test_run_recorded_stores_only_a_buildable_recording():
    from tilewright._record import record as report

    cache = _fast.new_cache()
    a, out = torch.randn(4, 8), torch.empty(4, 3)

    def call_one_launch():
        report(FakeBound(), {"a_ptr": a, "c_ptr": out})
        return (out,)

    result = _fast.run_recorded(cache, "k1", call_one_launch, {"a_ptr": (0, a)}, lambda r: {"c_ptr": (0, r[0])})
    assert result == (out,) and isinstance(cache["k1"], _fast.Replay)
    # a call that launched nothing (torch path, empty shape) or something unbindable stores nothing
    _fast.run_recorded(cache, "k2", lambda: (out,), {"a_ptr": (0, a)}, lambda r: {"c_ptr": (0, r[0])})

    def call_cuda():
        report(None, {})
        return (out,)

    _fast.run_recorded(cache, "k3", call_cuda, {"a_ptr": (0, a)}, lambda r: {"c_ptr": (0, r[0])})
    assert set(cache) == {"k1"}


def test_bind_maps_pointer_arguments_by_name_and_nulls_placeholders(monkeypatch):
    """triton_kernels._runtime.bind: each role fills its own argument's position (a tensor passed as two operands at
    record time still gives two slots), a placeholder tensor outside the roles becomes a null pointer, the other
    arguments keep their recorded values."""
    from types import SimpleNamespace

    from tilewright.triton_kernels import _runtime

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    jit_fn = SimpleNamespace(arg_names=["a_ptr", "b_ptr", "c_ptr", "bias_ptr", "M", "HAS_BIAS"])
    launcher = SimpleNamespace(launch=None, global_scratch_size=0, global_scratch_align=1, profile_scratch_size=0,
                               num_ctas=1, launch_cooperative_grid=False, launch_pdl=False)
    compiled = SimpleNamespace(run=launcher, function=7, packed_metadata=(4, 1, 0))
    a, out = torch.randn(4, 4), torch.empty(4, 4)
    args = {"a_ptr": a, "b_ptr": a, "c_ptr": out, "bias_ptr": out, "M": 4, "HAS_BIAS": False}
    bound = _runtime.bind(jit_fn, compiled, (3,), args, {"a_ptr": a, "b_ptr": a, "c_ptr": out})
    assert bound._slots == [0, 1, 2]
    assert bound._template == [0, 0, 0, 0, 4, False]  # role slots are filled per call; bias is a null placeholder
    assert bound._grid == (3, 1, 1) and bound._direct and bound._scratch_bytes == 0
    assert _runtime.bind(jit_fn, compiled, (3.0,), args, {}) is None  # a grid that is not ints
    # a defaulted constexpr the launch left out takes its default (as the launch did); one without a default is an
    # error of the caller's
    param = SimpleNamespace
    jit_fn.arg_names.append("WAIT_PRIOR")
    jit_fn.params = [param(name=n, has_default=False, default=None) for n in jit_fn.arg_names[:-1]]
    jit_fn.params.append(param(name="WAIT_PRIOR", has_default=True, default=False))
    bound = _runtime.bind(jit_fn, compiled, (3,), args, {"a_ptr": a, "b_ptr": a, "c_ptr": out})
    assert bound._template == [0, 0, 0, 0, 4, False, False]
    with pytest.raises(KeyError):
        _runtime.bind(jit_fn, compiled, (3,), {k: v for k, v in args.items() if k != "M"}, {"a_ptr": a})


def test_retry_after_oom_retries_a_load_oom_once(monkeypatch):
    """A module load that fails with CUDA OOM (torch's cache holding the memory) is retried once after
    empty_cache; any other error, a second OOM, or an OOM during graph capture propagates."""
    from tilewright.triton_kernels import _runtime

    emptied = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("Triton Error [CUDA]: out of memory")
        return "launched"

    assert _runtime.retry_after_oom(flaky) == "launched" and len(calls) == 2 and emptied == [1]

    def always_oom():
        raise RuntimeError("Triton Error [CUDA]: out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        _runtime.retry_after_oom(always_oom)

    def other():
        calls.append(1)
        raise RuntimeError("Triton Error [CUDA]: misaligned address")

    calls.clear()
    with pytest.raises(RuntimeError, match="misaligned"):
        _runtime.retry_after_oom(other)
    assert len(calls) == 1
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    calls.clear()
    with pytest.raises(RuntimeError, match="out of memory"):
        _runtime.retry_after_oom(flaky)


def test_interpreting_and_read_env_follow_os_environ(monkeypatch):
    """The bytes-dict reads (no str encode per call) see every change made through os.environ / monkeypatch."""
    from tilewright._env import interpreting, read_env

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not interpreting()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert interpreting()
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not interpreting()
    monkeypatch.setenv("TILEWRIGHT_TEST_SWITCH", "a")
    first = read_env(("TILEWRIGHT_TEST_SWITCH",), (b"TILEWRIGHT_TEST_SWITCH",))
    monkeypatch.setenv("TILEWRIGHT_TEST_SWITCH", "b")
    assert read_env(("TILEWRIGHT_TEST_SWITCH",), (b"TILEWRIGHT_TEST_SWITCH",)) != first
    monkeypatch.delenv("TILEWRIGHT_TEST_SWITCH")
    assert read_env(("TILEWRIGHT_TEST_SWITCH",), (b"TILEWRIGHT_TEST_SWITCH",)) == (None,)


def test_set_env_and_the_replay_state_follow_os_environ(monkeypatch):
    """set_env (the replay key's form of the switches: the set ones, sorted) and _fast.state() change with every
    switch set, changed or removed through os.environ - a replay recorded under one value is not found under
    another."""
    from tilewright._env import _environ_bytes, set_env

    def enc(name):
        return name.encode() if _environ_bytes is not None else name

    names = frozenset(map(enc, ("TILEWRIGHT_TEST_A", "TILEWRIGHT_TEST_B")))
    monkeypatch.delenv("TILEWRIGHT_TEST_A", raising=False)
    monkeypatch.delenv("TILEWRIGHT_TEST_B", raising=False)
    assert set_env(names) == ()
    monkeypatch.setenv("TILEWRIGHT_TEST_B", "1")
    monkeypatch.setenv("TILEWRIGHT_TEST_A", "x")
    assert set_env(names) == ((enc("TILEWRIGHT_TEST_A"), enc("x")), (enc("TILEWRIGHT_TEST_B"), enc("1")))
    monkeypatch.setenv("TILEWRIGHT_TEST_A", "y")
    assert set_env(names)[0] == (enc("TILEWRIGHT_TEST_A"), enc("y"))
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)  # (CPU builds of torch lack it)
    for switch in ("TILEWRIGHT_AUTOTUNE", "TRITON_INTERPRET", "TILEWRIGHT_CUDA_ATTN_VARIANT"):
        monkeypatch.delenv(switch, raising=False)
        before = _fast.state()
        monkeypatch.setenv(switch, "0")
        assert _fast.state() != before, switch
        monkeypatch.delenv(switch)
        assert _fast.state() == before, switch


def test_build_refuses_an_output_the_launch_did_not_write():
    """An output made by a torch op after the launch (a reduced partial, a copy) is not the kernel's to write: a
    replay would hand back uninitialised memory, so no replay is built. A 0-size placeholder output is fine."""
    a = torch.randn(4, 8)
    out, extra, empty = torch.empty(4, 3), torch.empty(3), torch.empty(0)
    launches = [(FakeBound(), {"a_ptr": a, "c_ptr": out})]
    assert _fast.build(launches, {"a_ptr": (0, a)}, {"c_ptr": (0, out), "dg": (1, extra)}) is None
    assert _fast.build(launches, {"a_ptr": (0, a)}, {"c_ptr": (0, out), "preact_ptr": (1, empty)}) is not None


def test_several_launches_replay_in_order_with_the_scratch_buffers_they_pass_on():
    """rms_norm_linear's two-pass forward: a norm pass writes u (declared in its ``writes``) and rstd, the GEMM reads
    u under the role name the norm pass gives x (``a_ptr``): the replay allocates u and hands it to both launches."""
    x, g, w = torch.randn(6, 8), torch.randn(8), torch.randn(8, 5)
    u, rstd, y = torch.empty(6, 8), torch.empty(6), torch.empty(6, 5)
    norm, gemm = FakeBound(), FakeBound()
    launches = [(norm, {"a_ptr": x, "g_ptr": g, "u_ptr": u, "rstd_ptr": rstd}, ("u_ptr", "rstd_ptr")),
                (gemm, {"a_ptr": u, "b_ptr": w, "c_ptr": y}, ())]
    ins = {"a_ptr": (0, x), "g_ptr": (1, g), "b_ptr": (2, w)}
    outs = {"c_ptr": (0, y), "rstd_ptr": (1, rstd)}
    assert _fast.build(launches, ins, outs) is None  # one launch unless the op asks for more
    replay = _fast.build(launches, ins, outs, max_launches=2)
    assert replay is not None
    x2, g2, w2 = torch.randn(6, 8), torch.randn(8), torch.randn(8, 5)
    y2, r2 = replay(x2.device, x2, g2, w2)
    (np_,), (gp,) = norm.calls, gemm.calls
    assert np_[0] == x2.data_ptr() and np_[1] == g2.data_ptr() and np_[3] == r2.data_ptr()
    assert gp[0] == np_[2] and gp[0] not in (x2.data_ptr(), y2.data_ptr())  # the scratch u, fresh, passed on
    assert gp[1] == w2.data_ptr() and gp[2] == y2.data_ptr()
    assert y2.shape == y.shape and r2.shape == rstd.shape


def test_two_launches_of_inputs_and_outputs_replay_in_order():
    a, b, out = torch.randn(4, 8), torch.randn(8, 3), torch.empty(4, 3)
    first, second = FakeBound(), FakeBound()
    replay = _fast.build([(first, {"a_ptr": a, "c_ptr": out}), (second, {"b_ptr": b, "c_ptr": out})],
                         {"a_ptr": (0, a), "b_ptr": (1, b)}, {"c_ptr": (0, out)}, max_launches=2)
    a2, b2 = torch.randn(4, 8), torch.randn(8, 3)
    (got,) = replay(a2.device, a2, b2)
    assert first.calls == [(a2.data_ptr(), got.data_ptr())] and second.calls == [(b2.data_ptr(), got.data_ptr())]


def test_a_buffer_no_recorded_launch_wrote_is_refused():
    """A tensor that is neither input nor output is replayable only if an earlier launch wrote it whole: read before
    written, written by a launch that does not declare it, or made by torch (a copy): no replay."""
    x, w, y, u = torch.randn(6, 8), torch.randn(8, 5), torch.empty(6, 5), torch.empty(6, 8)
    ins, outs = {"a_ptr": (0, x), "b_ptr": (1, w)}, {"c_ptr": (0, y)}
    gemm = (FakeBound(), {"a_ptr": u, "b_ptr": w, "c_ptr": y}, ())
    assert _fast.build([gemm], ins, outs) is None  # u from nowhere (a torch copy of x)
    undeclared = (FakeBound(), {"a_ptr": x, "u_ptr": u}, ())
    assert _fast.build([undeclared, gemm], ins, outs, max_launches=2) is None
    declared = (FakeBound(), {"a_ptr": x, "u_ptr": u}, ("u_ptr",))
    assert _fast.build([gemm, declared], ins, outs, max_launches=2) is None  # read before it was written
    assert _fast.build([declared, gemm], ins, outs, max_launches=2) is not None
