"""GPU tier: the eager replay (ops/_fast.py) gives bit-for-bit the full path's answer, and replays only what it may.

Pattern of every case: a first call at a signature runs the full path and records; a call on fresh inputs at the same
signature replays; the same inputs through the full path again (replays dropped) must give the identical tensor. The
expected replay count says whether the call was replayable at all.
"""
import sys

import pytest
import torch

import tilewright
from tilewright.ops import _fast
from tilewright.ops import attention as op_attention
from tilewright.ops import gemm as op_gemm

pytestmark = pytest.mark.gpu
op_rms = sys.modules["tilewright.ops.rms_norm_linear"]  # (the package exports the function under the same name)
op_rotary = sys.modules["tilewright.ops.rotary"]
DEV = "cuda"
BF16, FP16 = torch.bfloat16, torch.float16


@pytest.fixture(autouse=True)
def _fresh():
    mp = pytest.MonkeyPatch()
    mp.setenv("TILEWRIGHT_AUTOTUNE", "0")
    _fast.invalidate()
    with tilewright.use_backend("triton"):
        yield
    _fast.invalidate()
    mp.undo()


def _replayed_equals_full(fn, make, cache, replayable=True):
    """fn(*make()) three ways: record, replay on fresh inputs, full path on those inputs; returns the replayed out."""
    fn(*make())
    assert len(cache) == (1 if replayable else 0)
    inputs = make()
    replayed = fn(*inputs)
    _fast.invalidate()
    full = fn(*inputs)
    torch.testing.assert_close(replayed, full, rtol=0, atol=0)
    return replayed, inputs


def _rand(*shape, dtype=BF16):
    return torch.randn(*shape, device=DEV, dtype=dtype)


@pytest.mark.parametrize("case", ["plain", "linear_epilogues", "pos_embed_3d", "fp16_out_fp32", "k_major_b"])
def test_gemm_replays(case):
    M, N, K = 300, 136, 200
    if case == "plain":
        def make():
            return _rand(M, K), _rand(K, N)

        def fn(a, b):
            return tilewright.matmul(a, b)
    elif case == "linear_epilogues":
        def make():
            return _rand(M, K), _rand(N, K), _rand(N), _rand(M, N)

        def fn(x, w, b, r):
            return tilewright.linear(x, w, b, activation="gelu", residual=r)
    elif case == "pos_embed_3d":
        def make():
            return _rand(3, 100, K), _rand(K, N), _rand(100, N)

        def fn(x, b, pos):
            return tilewright.matmul(x, b, residual=pos)
    elif case == "fp16_out_fp32":
        def make():
            return _rand(M, K, dtype=FP16), _rand(K, N, dtype=FP16)

        def fn(a, b):
            return tilewright.matmul(a, b, out_dtype=torch.float32, activation="silu")
    else:
        def make():
            return _rand(M, K), _rand(N, K).t()

        def fn(a, b):
            return tilewright.matmul(a, b, activation="relu")
    # the full path's answer is the reference here; its numerics against torch are test_gemm_gpu's subject
    out, _ = _replayed_equals_full(fn, make, op_gemm._replays)
    assert torch.isfinite(out).all()


def test_gemm_operand_aliasing_at_record_time_does_not_leak_into_the_replay():
    a = _rand(128, 128)
    tilewright.matmul(a, a)  # records with a as both operands
    x, y = _rand(128, 128), _rand(128, 128)
    replayed = tilewright.matmul(x, y)
    assert len(op_gemm._replays) == 1
    _fast.invalidate()
    torch.testing.assert_close(replayed, tilewright.matmul(x, y), rtol=0, atol=0)


def test_gemm_alignment_is_part_of_the_signature():
    big = _rand(256, 201)
    b = _rand(200, 64)
    aligned, shifted = big[:, :200], big[:, 1:]  # same shape and strides, base 16-byte aligned or not
    tilewright.matmul(aligned, b)
    out = tilewright.matmul(shifted, b)  # must not replay the aligned (TMA) launch
    assert len(op_gemm._replays) == 2
    torch.testing.assert_close(out.float(), shifted.float() @ b.float(), rtol=2e-2, atol=2e-1)


def test_gemm_bias_alignment_gets_its_own_kernel():
    """An aligned and a 2-byte-offset bias share launch_gemm's plan but not Triton's specialization: each replay must
    run the kernel compiled for its own alignment (a plan-level bound kernel once served both - found in review)."""
    x, w = _rand(200, 96), _rand(136, 96)
    store = _rand(136 + 8)
    aligned, offset = store[:136], store[1:137]  # unit stride both; base 16-byte aligned or not
    for bias in (aligned, offset, aligned, offset):
        out = tilewright.linear(x, w, bias)
        ref = x.float() @ w.float().t() + bias.float()
        torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-1)
    assert len(op_gemm._replays) == 2


def test_gemm_copied_bias_is_not_replayed_and_stays_right():
    x, w = _rand(64, 96), _rand(48, 96)
    bias = _rand(96)[::2]  # strided: the op copies it
    out = tilewright.linear(x, w, bias)
    assert len(op_gemm._replays) == 0
    torch.testing.assert_close(out.float(), (x.float() @ w.float().t() + bias.float()), rtol=2e-2, atol=2e-1)


@pytest.mark.parametrize("op", ["linear_gelu", "attention", "rms_norm_linear"])
def test_replay_under_autograd_gives_the_full_paths_gradients(op):
    """With autograd recording the replay runs inside the op's eager autograd.Function: same outputs and the same
    gradients as the full path (replays dropped), bit for bit."""
    if op == "linear_gelu":
        inputs = [_rand(2, 64, 96), _rand(48, 96), _rand(48), _rand(2, 64, 48)]

        def fn(x, w, b, r):
            return tilewright.linear(x, w, b, activation="gelu", residual=r)
    elif op == "attention":
        inputs = [_rand(1, 4, 96, 64), _rand(1, 2, 96, 64), _rand(1, 2, 96, 64)]

        def fn(q, k, v):
            return tilewright.flash_attention(q, k, v, causal=True)
    else:
        inputs = [_rand(3, 40, 96), torch.rand(96, device=DEV, dtype=BF16) + 0.5, _rand(48, 96)]

        def fn(x, g, w):
            return tilewright.rms_norm_linear(x, g, w)
    cache = {"linear_gelu": op_gemm, "attention": op_attention, "rms_norm_linear": op_rms}[op]._replays
    results = []
    for replayed in (False, True, False):
        if not replayed:
            _fast.invalidate()
        leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
        out = fn(*leaves)
        if replayed:
            assert len(cache) >= 1  # the forward's replay (and, for the GEMM, its backward GEMMs')
        out.backward(torch.linspace(-1, 1, out.numel(), device=DEV).view_as(out).to(out.dtype))
        results.append([out.detach(), *[t.grad for t in leaves]])
    for full, rep in zip(results[2], results[1]):
        torch.testing.assert_close(rep, full, rtol=0, atol=0)


def test_replay_runs_on_the_current_stream_and_in_a_cuda_graph():
    a, b = _rand(256, 128), _rand(128, 192)
    expected = tilewright.matmul(a, b)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = tilewright.matmul(a, b)  # replay, launched on `side`
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(on_side, expected, rtol=0, atol=0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = tilewright.matmul(a, b)
    a.copy_(_rand(256, 128))
    g.replay()
    _fast.invalidate()
    torch.testing.assert_close(captured, tilewright.matmul(a, b), rtol=0, atol=0)


@pytest.mark.parametrize("case", ["causal_gqa", "bshd_view", "sdpa", "lse"])
def test_attention_replays(case):
    B, Hq, Hkv, S, D = 2, 4, 2, 160, 64
    if case == "bshd_view":
        def make():
            return tuple(_rand(B, S, Hq, D).transpose(1, 2) for _ in range(3))

        def fn(q, k, v):
            return tilewright.flash_attention(q, k, v)
    elif case == "sdpa":
        def make():
            return _rand(B, Hq, S, D), _rand(B, Hkv, S, D), _rand(B, Hkv, S, D)

        def fn(q, k, v):
            return tilewright.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    elif case == "lse":
        def make():
            return _rand(B, Hq, S, D), _rand(B, Hq, S + 30, D), _rand(B, Hq, S + 30, D)

        def fn(q, k, v):
            out, lse = tilewright.flash_attention(q, k, v, scale=0.3, return_lse=True)
            return torch.cat([out.float().flatten(), lse.flatten()])
    else:
        def make():
            return _rand(B, Hq, S, D), _rand(B, Hkv, S, D), _rand(B, Hkv, S, D)

        def fn(q, k, v):
            return tilewright.flash_attention(q, k, v, causal=True)
    _replayed_equals_full(fn, make, op_attention._replays)


@pytest.mark.parametrize("strided", ["q", "k", "v"])
def test_attention_input_copied_to_a_unit_last_stride_is_not_replayed(strided):
    """A q/k/v whose last dim is not unit-stride is copied by the op: the launch read the copy, so a replay (which
    would hand the kernel the caller's strided tensor) must not be recorded. The GPU fuzz found this one."""
    def make():
        t = {n: _rand(1, 2, 96, 64) for n in "qkv"}
        t[strided] = _rand(1, 2, 64, 96).transpose(-1, -2)  # (B, H, S, D) with stride 96 along D
        return t["q"], t["k"], t["v"]

    q, k, v = make()
    tilewright.flash_attention(q, k, v)
    assert len(op_attention._replays) == 0
    q, k, v = make()
    out = tilewright.flash_attention(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)


def test_attention_negative_scale_is_not_replayed():
    q, k, v = (_rand(1, 2, 64, 64) for _ in range(3))
    out = tilewright.flash_attention(q, k, v, scale=-0.125)
    assert len(op_attention._replays) == 0
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=-0.125)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype,bias,replayable", [(BF16, False, True), (BF16, True, True), (FP16, False, False)])
def test_rms_norm_linear_replays(dtype, bias, replayable):
    M, N, K = 200, 96, 160

    def make():
        return (_rand(2, M // 2, K, dtype=dtype), torch.rand(K, device=DEV, dtype=dtype) + 0.5, _rand(N, K, dtype=dtype),
                _rand(N, dtype=dtype) if bias else None)

    def fn(x, g, w, b):
        return tilewright.rms_norm_linear(x, g, w, b)

    out, (x, g, w, b) = _replayed_equals_full(fn, make, op_rms._replays, replayable)
    ref = torch.nn.functional.linear(torch.nn.functional.rms_norm(x.float(), (K,), g.float(), 1e-6), w.float(),
                                     None if b is None else b.float())
    torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=1e-1)


def test_an_environment_switch_bypasses_the_recorded_replay(monkeypatch):
    a, b = _rand(64, 64), _rand(64, 64)
    tilewright.matmul(a, b)
    tilewright.matmul(a, b)
    assert len(op_gemm._replays) == 1
    kernel_replay = next(iter(op_gemm._replays.values()))
    monkeypatch.setenv("TILEWRIGHT_BACKEND", "torch")  # the environment is in the key: the full path runs again
    with tilewright.use_backend(None):
        assert torch.equal(tilewright.matmul(a, b), torch.mm(a, b))  # the torch backend: cuBLAS itself
        # recorded under its own key: the plain GEMM's cuBLAS call replays too; the kernel's replay is untouched
        assert len(op_gemm._replays) == 2 and kernel_replay in op_gemm._replays.values()
        torch_replay = next(r for r in op_gemm._replays.values() if r is not kernel_replay)
        assert len(torch_replay.bounds) == 1 and isinstance(torch_replay.bounds[0], op_gemm._TorchGemm)
        assert torch.equal(tilewright.matmul(a, b), torch.mm(a, b)) and len(op_gemm._replays) == 2


def test_the_op_itself_replays_for_direct_and_compiled_callers():
    """torch.ops.tilewright.gemm (what a torch.compile'd graph calls) replays its own signature: bit-for-bit the full
    path's answer; a compiled linear reaches that replay on its second call and matches eager."""
    def make():
        return _rand(300, 200), _rand(136, 200).t(), _rand(136)

    def op(a, b, bias):
        return torch.ops.tilewright.gemm(a, b, bias, None, "gelu", BF16, False, None)[0]

    replayed, inputs = _replayed_equals_full(op, make, op_gemm._op_replays)
    torch._dynamo.reset()
    layer = torch.compile(lambda x, w, b: tilewright.linear(x, w, b, activation="gelu"), backend="aot_eager",
                          fullgraph=True)
    x, w, b = _rand(300, 200), _rand(136, 200), _rand(136)
    layer(x, w, b)  # compiles; its graph's calls of the op record
    _fast.invalidate()
    layer(x, w, b)
    assert len(op_gemm._op_replays) == 1  # the compiled graph's op call recorded its signature...
    recorded = []
    real = _fast.run_recorded
    mp = pytest.MonkeyPatch()
    mp.setattr(_fast, "run_recorded", lambda *a, **k: recorded.append(1) or real(*a, **k))
    x2 = _rand(300, 200)
    try:
        got = layer(x2, w, b)
    finally:
        mp.undo()
    assert recorded == []  # ...and the next call replayed it (no full path, nothing recorded)
    _fast.invalidate()
    torch.testing.assert_close(got, tilewright.linear(x2, w, b, activation="gelu"), rtol=0, atol=0)


# issue 14.1: the CUDA families' launches replay too (runtime.launch.BoundCudaLaunch re-encodes the new addresses)
@pytest.mark.parametrize("case", ["gemm", "gemm_bias_residual", "rms_norm_linear", "attention"])
def test_cuda_launches_replay_bit_for_bit(case):
    from tilewright.cuda_fallback import gemm_sm90
    from tilewright.cuda_fallback.runtime import launch

    ok, why = gemm_sm90.ready(_rand(512, 512), _rand(512, 1024))
    if not ok:
        pytest.skip(f"the sm_90a kernels do not run here: {why}")
    M, N, K = 512, 1024, 512
    if case == "gemm":
        cache = op_gemm._replays

        def make():
            return _rand(M, K), _rand(K, N)

        def fn(a, b):
            return tilewright.matmul(a, b)
    elif case == "gemm_bias_residual":
        cache = op_gemm._replays

        def make():
            return _rand(M, K), _rand(N, K), _rand(N), _rand(M, N)

        def fn(x, w, b, r):
            return tilewright.linear(x, w, b, residual=r)
    elif case == "rms_norm_linear":
        cache = op_rms._replays

        def make():
            return _rand(M, K), torch.rand(K, device=DEV, dtype=BF16) + 0.5, _rand(N, K), _rand(N)

        def fn(x, g, w, b):
            return tilewright.rms_norm_linear(x, g, w, b)
    else:
        cache = op_attention._replays

        def make():
            return _rand(2, 4, 384, 128), _rand(2, 2, 384, 128), _rand(2, 2, 384, 128)

        def fn(q, k, v):
            return tilewright.flash_attention(q, k, v, causal=True)
    with tilewright.use_backend("cuda"):
        fn(*make())  # the family's first use runs its self-check (launches of its own: nothing is recorded)
        _fast.invalidate()
        out, _ = _replayed_equals_full(fn, make, cache)
        (replay,) = cache.values()
        assert len(replay.bounds) == 1 and isinstance(replay.bounds[0], launch.BoundCudaLaunch)
    assert torch.isfinite(out).all()


def _rope_tables(S, W, dtype=BF16):
    angles = torch.arange(S, device=DEV, dtype=torch.float32)[:, None] * torch.rand(W, device=DEV)
    return angles.cos().to(dtype), angles.sin().to(dtype)


@pytest.mark.parametrize("case", ["qk_view", "full_tables", "half_tables_3d", "partial", "fp16"])
def test_rotary_replays(case):
    """apply_rotary without autograd replays its launch: bit-equal to the full path on fresh inputs, and close to
    the fp32 formula (one rounding; the kernel's FMAs may round the products differently) - the q and k heads of a QKV output as one strided view, full (Llama) and half
    (flash-attn, 3-D) tables, a partial rotation, fp16."""
    B, S, H, D = 2, 100, 6, 64
    dtype = FP16 if case == "fp16" else BF16
    rotary_dim = 32 if case == "partial" else None
    W = {"half_tables_3d": D // 2, "partial": 32}.get(case, D)
    cos, sin = _rope_tables(S + 5, W, dtype)
    if case == "half_tables_3d":
        cos, sin = cos[None], sin[None]

    def make():
        if case == "qk_view":  # (B, S, H + 2, D) QKV heads; q and k rotated in place of the split
            return (_rand(B, S, H + 2, D)[:, :, :H],)
        return (_rand(B, S, H, D, dtype=dtype),)

    def fn(x):
        return tilewright.apply_rotary(x, cos, sin, rotary_dim=rotary_dim)

    with torch.no_grad():
        out, (x,) = _replayed_equals_full(fn, make, op_rotary._replays)
    c3, s3 = (t if t.dim() == 3 else t[None] for t in (cos, sin))
    want = op_rotary._rotate_torch(x, c3, s3, rotary_dim or D, False)
    torch.testing.assert_close(out, want)


def test_rotary_tables_copied_by_the_op_are_not_replayed():
    """Tables of different strides are made contiguous by the op (the kernel takes one set of table strides): the
    launch read a copy, so nothing is recorded, and the answer stays right."""
    S, D = 64, 64
    cos, sin = _rope_tables(S, D)
    sin_strided = torch.empty(D, S, device=DEV, dtype=BF16).t()
    sin_strided.copy_(sin)
    x = _rand(1, S, 4, D)
    with torch.no_grad():
        out = tilewright.apply_rotary(x, cos, sin_strided)
        assert len(op_rotary._replays) == 0
        out2 = tilewright.apply_rotary(x, cos, sin_strided)
    want = op_rotary._rotate_torch(x, cos[None], sin[None], D, False)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(out2, want)


@pytest.mark.parametrize("layout", ["qk_view", "half_tables_3d"])
def test_rotary_with_autograd_replays_inside_its_node(monkeypatch, layout):
    """A call autograd records has a key of its own (a recorded inference signature does not serve it); its first call
    records the launch inside the op's node, and so does the backward's rotation back. A repeat of both never reaches
    the op (its full path is made to fail) and gives the same bits: the output, and the gradient - the rotation back
    of the incoming gradient - on the strided q/k view of QKV heads, and with 3-D half tables."""
    B, S, H, D = 2, 64, 4, 64
    cos, sin = _rope_tables(S, D // 2 if layout == "half_tables_3d" else D)
    if layout == "half_tables_3d":
        cos, sin = cos[None], sin[None]

    def make():
        base = _rand(B, S, H + 2, D)
        return (base[:, :, :H] if layout == "qk_view" else base[:, :, :H].contiguous()).requires_grad_(True)
    with torch.no_grad():
        tilewright.apply_rotary(make(), cos, sin)
    assert len(op_rotary._replays) == 1  # the inference signature
    x = make()
    g = _rand(B, S, H, D)
    y = tilewright.apply_rotary(x, cos, sin)
    assert y.requires_grad and len(op_rotary._replays) == 2  # + the forward recorded inside its node
    y.backward(g)
    assert len(op_rotary._replays) == 3  # + the backward's rotation
    c3, s3 = (t if t.dim() == 3 else t[None] for t in (cos, sin))
    torch.testing.assert_close(x.grad, op_rotary._rotate_torch(g, c3, s3, D, True))

    def no_full_path(*args, **kwargs):
        raise AssertionError("the full path ran on a recorded signature")
    monkeypatch.setattr(op_rotary, "call_op", no_full_path)
    x2 = x.detach().clone().requires_grad_(True)  # (a copy: same values, new storage, the strides of a fresh view)
    if layout == "qk_view":
        x2 = torch.empty(B, S, H + 2, D, device=DEV, dtype=BF16)[:, :, :H].copy_(x.detach()).requires_grad_(True)
    y2 = tilewright.apply_rotary(x2, cos, sin)
    y2.backward(g)
    torch.testing.assert_close(y2, y, rtol=0, atol=0)
    torch.testing.assert_close(x2.grad, x.grad, rtol=0, atol=0)
    assert len(op_rotary._replays) == 3
    # a table that requires grad has the same key (some argument requires grad) but is the full path's error
    monkeypatch.undo()
    with pytest.raises(ValueError, match="constants"):
        tilewright.apply_rotary(x2.detach(), cos.clone().requires_grad_(True), sin)


@pytest.mark.parametrize("rotary_dim", [None, 64])
def test_rotary_repeat_call_is_served_by_the_replay(monkeypatch, rotary_dim):
    """The second call of a signature never reaches the op (its dispatch is made to fail): the one-call hit finds the
    replay under the key of the arguments as given - rotary_dim None included, which the full path turns into D."""
    S, D = 64, 64
    cos, sin = _rope_tables(S, D)
    with torch.no_grad():
        tilewright.apply_rotary(_rand(1, S, 4, D), cos, sin, rotary_dim=rotary_dim)
        assert len(op_rotary._replays) == 1

        def no_full_path(*args, **kwargs):
            raise AssertionError("the full path ran on a recorded signature")

        monkeypatch.setattr(op_rotary, "call_op", no_full_path)
        x = _rand(1, S, 4, D)
        out = tilewright.apply_rotary(x, cos, sin, rotary_dim=rotary_dim)
    torch.testing.assert_close(out, op_rotary._rotate_torch(x, cos[None], sin[None], D, False))
