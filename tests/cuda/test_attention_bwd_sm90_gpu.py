"""GPU tier for the sm_90a attention backward's kernels (Hopper only): dK and dV (and dQ, from its own kernel or in
the dK / dV pass with reductions) against the fp64 formulas with the rule "error <= 2x torch SDPA's error in the same
dtype" on ragged / GQA / causal / Sq != Skv problems into NaN-poisoned outputs, the public op's gradients with the
kernels switched on (TILEWRIGHT_CUDA_ATTN_BWD=1, TILEWRIGHT_CUDA_ATTN_BWD_DQ=kernel | atomic), and bitwise-identical
gradients run to run under torch.use_deterministic_algorithms."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright.reference import attention_grad_reference

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper")]
DEV = "cuda"


def _err(x, ref):
    return (x.double() - ref).abs().max().item()


def _torch_grads(q, k, v, do, causal):
    """SDPA's own same-dtype gradients (the yardstick), GQA through repeated kv heads."""
    group = q.shape[1] // k.shape[1]
    qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qq, kk.repeat_interleave(group, 1), vv.repeat_interleave(group, 1),
                                       is_causal=causal)
    o.backward(do)
    return qq.grad, kk.grad, vv.grad


def _problem(B, Hq, Hkv, Sq, Skv, D, causal, dtype, seed):
    """Fresh q, k, v, dO, the forward's LSE (Triton forward), delta = rowsum(O * dO) and the default scale."""
    from tilewright.triton_kernels.attention import attention_forward

    g = torch.Generator(device="cpu").manual_seed(B * 1000 + Sq + Skv + D + seed)
    q, k, v, do = (torch.randn(B, H, S, D, generator=g).to(DEV, dtype) for H, S in
                   ((Hq, Sq), (Hkv, Skv), (Hkv, Skv), (Hq, Sq)))
    scale = D ** -0.5
    out = torch.empty_like(q)
    lse = torch.empty(B, Hq, Sq, device=DEV, dtype=torch.float32)
    attention_forward(q, k, v, out, lse, causal, scale)
    return q, k, v, do, lse, (out.float() * do.float()).sum(-1).contiguous(), scale


CASES = [  # (B, Hq, Hkv, Sq, Skv, D, causal)
    (1, 4, 2, 200, 200, 128, True), (2, 2, 1, 65, 300, 128, False), (1, 2, 2, 300, 130, 64, False),
    (1, 1, 1, 7, 7, 128, True), (2, 8, 2, 512, 512, 128, True), (1, 4, 4, 1000, 1000, 64, True),
    (1, 2, 1, 129, 257, 128, True), (1, 2, 2, 64, 64, 64, False),
    # head dims padded onto the 128 build: zero-filled columns past D, stores and dQ's reduce-adds clipped there
    (1, 4, 2, 300, 300, 96, True), (2, 2, 2, 130, 200, 72, False), (1, 2, 1, 257, 129, 120, True),
]


@pytest.mark.parametrize("variant", ("a", "b"))
@pytest.mark.parametrize("B,Hq,Hkv,Sq,Skv,D,causal", CASES)
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_dkdv_within_twice_torch_error(B, Hq, Hkv, Sq, Skv, D, causal, dtype, variant):
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    q, k, v, do, lse, delta, scale = _problem(B, Hq, Hkv, Sq, Skv, D, causal, dtype, seed=0)
    dk = torch.full_like(k, float("nan"))
    dv = torch.full_like(v, float("nan"))
    cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, causal, scale, variant)
    torch.cuda.synchronize()
    _, rdk, rdv = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), causal, scale)
    _, tdk, tdv = _torch_grads(q, k, v, do, causal)
    for name, got, ref, peer in (("dk", dk, rdk, tdk), ("dv", dv, rdv, tdv)):
        assert torch.isfinite(got).all(), f"{name}: non-finite (an element left unwritten?)"
        bound = 2 * _err(peer, ref) + 1e-3
        assert _err(got, ref) <= bound, f"{name}: error {_err(got, ref):.3g} > 2x torch's {bound:.3g}"


def test_the_op_uses_the_kernel_when_switched_on(monkeypatch):
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    _op_gradients_with_the_kernel(monkeypatch, cb, "bind_dkdv")


def _dq_in_the_pass(bind_args) -> bool:
    """Whether a bind_dkdv call (the op layer's positional arguments: 8 tensors, causal, scale, variant, dq_accum,
    band, softcap, packed, stats) bound dQ's fp32 workspace."""
    return bind_args[11] is not None


def _spy_binding(monkeypatch, cb, binder: str, check=lambda args: True) -> list:
    """Record each launch of the kernel that ``binder`` (bind_dkdv / bind_dq) binds: the list gets ``check(bind
    arguments)`` per launch. The op layer's plans are cleared, so the next call binds afresh."""
    from tilewright.ops import attention as ops_attention

    monkeypatch.setattr(ops_attention, "_cuda_plans", {})
    monkeypatch.setattr(ops_attention, "_bwd_replays", {})  # (replays hold plans)
    calls = []
    real = getattr(cb, binder)

    def spy(*a):
        bound = real(*a)
        assert bound is not None, f"{binder}: the launch could not be bound"
        return lambda *ptrs: calls.append(check(a)) or bound(*ptrs)

    monkeypatch.setattr(cb, binder, spy)
    return calls


def _op_gradients_with_the_kernel(monkeypatch, cb, binder: str, check=lambda args: True):
    """tilewright.flash_attention's gradients with the backward switch on: the kernel ``binder`` binds runs on the
    full path and the bound one (bound with arguments ``check`` accepts), and dq / dk / dv are within 2x torch's
    error of the fp64 formulas."""
    calls = _spy_binding(monkeypatch, cb, binder, check)
    monkeypatch.setenv(cb.ENV, "1")
    B, Hq, Hkv, S, D = 2, 8, 2, 384, 128
    q, k, v = (torch.randn(B, H, S, D, device=DEV, dtype=torch.bfloat16, requires_grad=True)
               for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device=DEV, dtype=torch.bfloat16)
    for _ in range(2):  # full path, then the bound one
        q.grad = k.grad = v.grad = None
        tilewright.flash_attention(q, k, v, causal=True).backward(do)
    assert calls == [True, True]
    rdq, rdk, rdv = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), True, D ** -0.5)
    tdq, tdk, tdv = _torch_grads(q, k, v, do, True)
    for got, ref, peer in ((q.grad, rdq, tdq), (k.grad, rdk, tdk), (v.grad, rdv, tdv)):
        assert _err(got, ref) <= 2 * _err(peer, ref) + 1e-3


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Skv,D,causal", CASES)
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_dq_within_twice_torch_error(B, Hq, Hkv, Sq, Skv, D, causal, dtype):
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    q, k, v, do, lse, delta, scale = _problem(B, Hq, Hkv, Sq, Skv, D, causal, dtype, seed=1)
    dq = torch.full_like(q, float("nan"))
    cb.launch_dq(do, q, k, v, lse, delta, dq, causal, scale)
    torch.cuda.synchronize()
    rdq, _, _ = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), causal, scale)
    tdq, _, _ = _torch_grads(q, k, v, do, causal)
    assert torch.isfinite(dq).all(), "dq: non-finite (a row left unwritten?)"
    bound = 2 * _err(tdq, rdq) + 1e-3
    assert _err(dq, rdq) <= bound, f"dq: error {_err(dq, rdq):.3g} > 2x torch's {bound:.3g}"


def test_the_op_uses_both_kernels_when_switched_on(monkeypatch):
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    monkeypatch.setenv(cb.DQ_ENV, "kernel")
    _op_gradients_with_the_kernel(monkeypatch, cb, "bind_dq")


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Skv,D,causal", CASES)
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_dq_in_the_dkdv_pass_within_twice_torch_error(B, Hq, Hkv, Sq, Skv, D, causal, dtype):
    """Variant b with a dQ workspace: dK, dV and dQ (the workspace converted as the op does) all within 2x torch's
    error; the workspace starts as zeros (its contract), the outputs as NaN."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    q, k, v, do, lse, delta, scale = _problem(B, Hq, Hkv, Sq, Skv, D, causal, dtype, seed=2)
    dk = torch.full_like(k, float("nan"))
    dv = torch.full_like(v, float("nan"))
    acc = torch.zeros(q.shape, device=DEV, dtype=torch.float32)
    cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, causal, scale, "b", dq_accum=acc)
    dq = torch.full_like(q, float("nan")).copy_(acc)
    torch.cuda.synchronize()
    ref = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), causal, scale)
    peer = _torch_grads(q, k, v, do, causal)
    for name, got, r, t in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, peer):
        assert torch.isfinite(got).all(), f"{name}: non-finite"
        bound = 2 * _err(t, r) + 1e-3
        assert _err(got, r) <= bound, f"{name}: error {_err(got, r):.3g} > 2x torch's {bound:.3g}"


def test_dq_in_the_pass_with_very_negative_scores_stays_finite():
    """Keys past Skv are zero-filled K rows: their scores (0) sit far above real ones of -1000s, so exp2 of them
    against the row's LSE overflows unless masked - dQ must stay finite and right (Skv = 100: a 28-key tail)."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    q, k, v, do, lse, delta, scale = _problem(1, 2, 2, 64, 100, 128, False, torch.bfloat16, seed=3)
    k = (k.float().abs() + 4.0).to(k.dtype)
    q = (-q.float().abs() - 4.0).to(q.dtype)  # every real score <= -16 * 128 * scale
    from tilewright.triton_kernels.attention import attention_forward

    out = torch.empty_like(q)
    attention_forward(q, k, v, out, lse, False, scale)
    delta = (out.float() * do.float()).sum(-1).contiguous()
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    acc = torch.zeros(q.shape, device=DEV, dtype=torch.float32)
    cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, False, scale, "b", dq_accum=acc)
    rdq = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), False, scale)[0]
    tdq = _torch_grads(q, k, v, do, False)[0]
    assert torch.isfinite(acc).all()
    assert _err(acc.to(q.dtype), rdq) <= 2 * _err(tdq, rdq) + 1e-3


def test_the_dq_workspace_is_checked():
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    q, k, v, do, lse, delta, scale = _problem(1, 2, 2, 64, 64, 64, False, torch.bfloat16, seed=4)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    with pytest.raises(ValueError, match="needs variant 'b'"):
        cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, False, scale, "a", dq_accum=torch.zeros_like(q).float())
    for bad in (torch.zeros_like(q), torch.zeros(1, 2, 64, 32, device=DEV),
                torch.zeros(1, 2, 64, 128, device=DEV)[..., ::2]):
        with pytest.raises(ValueError, match="dq_accum must be a float32 tensor shaped like q"):
            cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, False, scale, "b", dq_accum=bad)


def test_the_op_computes_dq_in_the_dkdv_pass_when_asked(monkeypatch):
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    monkeypatch.setenv(cb.VARIANT_ENV, "b")
    monkeypatch.setenv(cb.DQ_ENV, "atomic")
    _op_gradients_with_the_kernel(monkeypatch, cb, "bind_dkdv", check=_dq_in_the_pass)


@pytest.mark.parametrize("mode", ("atomic", "kernel", "triton"))
def test_deterministic_mode_gives_bitwise_identical_gradients(monkeypatch, mode):
    """torch.use_deterministic_algorithms(True): 100 backward passes of one problem give bit-identical dq / dk / dv
    whatever dQ mode is asked for (atomic falls back to the dQ kernel)."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    monkeypatch.setenv(cb.ENV, "1")
    monkeypatch.setenv(cb.VARIANT_ENV, "b")
    monkeypatch.setenv(cb.DQ_ENV, mode)
    q, k, v = (torch.randn(1, H, 700, 128, device=DEV, dtype=torch.bfloat16, requires_grad=True) for H in (8, 2, 2))
    do = torch.randn(1, 8, 700, 128, device=DEV, dtype=torch.bfloat16)
    torch.use_deterministic_algorithms(True)
    try:
        o = tilewright.flash_attention(q, k, v, causal=True)
        first = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        for _ in range(99):
            again = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
            assert all(torch.equal(a, b) for a, b in zip(first, again))
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("B,H,D,causal,backend,expect", [
    (4, 16, 128, False, None, True), (4, 16, 64, True, None, True), (4, 16, 64, False, None, False),
    (4, 16, 128, True, "triton", False), (1, 4, 128, True, None, False)])
def test_the_default_choice(monkeypatch, B, H, D, causal, backend, expect):
    """With no switch set, the op's backward runs the CUDA dK / dV kernel (dQ in the pass) where it measured faster
    than Triton's - head dim 128, causal head dim 64, a grid of >= 128 CTAs - and Triton's kernels elsewhere and when
    backend="triton" was asked for; the gradients are right either way."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    for name in (cb.ENV, cb.VARIANT_ENV, cb.DQ_ENV):
        monkeypatch.delenv(name, raising=False)
    calls = _spy_binding(monkeypatch, cb, "bind_dkdv", check=_dq_in_the_pass)
    q, k, v = (torch.randn(B, H, 300, D, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, 300, D, device=DEV, dtype=torch.bfloat16)
    tilewright.flash_attention(q, k, v, causal=causal, backend=backend).backward(do)
    assert calls == ([True] if expect else [])
    ref = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), causal, D ** -0.5)
    for got, r, t in zip((q.grad, k.grad, v.grad), ref, _torch_grads(q, k, v, do, causal)):
        assert _err(got, r) <= 2 * _err(t, r) + 1e-3


@pytest.mark.parametrize("D", (72, 96, 120))
def test_padded_head_dims_write_nothing_past_the_head_dim(D):
    """A head dim padded onto the 128 build: dk / dv / dq are views into 128-column buffers filled with a sentinel;
    the kernels must leave every column past D untouched (their stores and dQ's reduce-adds are clipped there) and
    get the gradients right."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    q, k, v, do, lse, delta, scale = _problem(1, 4, 2, 200, 150, D, True, torch.bfloat16, seed=4)
    wide_k, wide_v, wide_q = (torch.full((*t.shape[:-1], 128), 7.0, device=DEV, dtype=t.dtype) for t in (k, v, q))
    dk, dv, dq = wide_k[..., :D], wide_v[..., :D], wide_q[..., :D]
    acc = torch.zeros(q.shape, device=DEV, dtype=torch.float32)
    cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, True, scale, "b", dq_accum=acc)
    cb.launch_dq(do, q, k, v, lse, delta, dq, True, scale)
    torch.cuda.synchronize()
    for name, wide in (("dk", wide_k), ("dv", wide_v), ("dq", wide_q)):
        assert (wide[..., D:] == 7.0).all(), f"{name}: columns past head dim {D} were written"
    ref = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), True, scale)
    peer = _torch_grads(q, k, v, do, True)
    for name, got, r, t in zip(("dq", "dk", "dv", "dq (in the pass)"), (dq, dk, dv, acc), (*ref, ref[0]),
                               (*peer, peer[0])):
        bound = 2 * _err(t, r) + 1e-3
        assert _err(got, r) <= bound, f"{name}: error {_err(got, r):.3g} > 2x torch's {bound:.3g}"


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Skv,D,causal,heads", [
    (1, 7, 1, 300, 300, 96, True, 3), (2, 8, 2, 257, 129, 128, False, 1), (1, 4, 1, 200, 333, 64, True, 2)])
def test_a_split_gqa_group_matches_the_whole_group(B, Hq, Hkv, Sq, Skv, D, causal, heads):
    """The group split over CTAs (heads_per_cta below the group: fp32 partials added up) gives the gradients of the
    unsplit launch within fp32 summation order and within 2x torch's error, into NaN-poisoned outputs; the variant-b
    launch with dQ in the pass keeps dQ's reductions."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    q, k, v, do, lse, delta, scale = _problem(B, Hq, Hkv, Sq, Skv, D, causal, torch.bfloat16, seed=3)
    results = []
    for split in (None, heads):
        dk, dv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
        acc = torch.zeros(q.shape, device=DEV, dtype=torch.float32)
        cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, causal, scale, "b", dq_accum=acc, heads_per_cta=split)
        results.append((dk, dv, acc))
    torch.cuda.synchronize()
    _, rdk, rdv = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), causal, scale)
    _, tdk, tdv = _torch_grads(q, k, v, do, causal)
    (wk, wv, wq), (sk, sv, sq) = results
    for name, got, whole, ref, peer in (("dk", sk, wk, rdk, tdk), ("dv", sv, wv, rdv, tdv)):
        assert torch.isfinite(got).all(), f"{name}: non-finite (a partial left unwritten?)"
        torch.testing.assert_close(got.float(), whole.float(), rtol=1e-2, atol=1e-2)
        assert _err(got, ref) <= 2 * _err(peer, ref) + 1e-3, name
    torch.testing.assert_close(sq, wq, rtol=1e-4, atol=1e-4)


def test_the_op_splits_a_small_gqa_grid(monkeypatch):
    """Through the public op: a 28 / 4-head layer at 600 keys with the group split to one head a CTA
    (TILEWRIGHT_CUDA_ATTN_BWD_HEADS_PER_CTA=1; the rule splits long sequences only) binds the split launch and its
    gradients stay within 2x torch's error."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb
    from tilewright.ops import attention as ops_attention

    monkeypatch.setenv(cb.ENV, "1")
    monkeypatch.setenv(cb.SPLIT_ENV, "1")
    monkeypatch.setattr(ops_attention, "_cuda_plans", {})
    monkeypatch.setattr(ops_attention, "_bwd_replays", {})  # (replays hold plans)
    bound = []
    real = cb.bind_dkdv
    monkeypatch.setattr(cb, "bind_dkdv", lambda *a: bound.append(a[16]) or real(*a))
    q, k, v, do, *_ = _problem(1, 28, 4, 600, 600, 96, True, torch.bfloat16, seed=4)
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    tilewright.flash_attention(qq, kk, vv, causal=True, backend="cuda").backward(do)
    assert bound and bound[0] is not None and bound[0] < 7, bound
    refs = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), True, None)
    peers = _torch_grads(q, k, v, do, True)
    for name, got, ref, peer in zip(("dq", "dk", "dv"), (qq.grad, kk.grad, vv.grad), refs, peers):
        assert torch.isfinite(got).all(), name
        assert _err(got, ref) <= 2 * _err(peer, ref) + 1e-3, name


@pytest.mark.parametrize("B,Hq,Hkv,S,D,causal,window,deterministic", [
    (1, 16, 16, 1024, 128, True, None, False),  # dQ in the dK / dV pass
    (1, 28, 4, 3000, 96, True, None, False),  # the GQA group split by the rule (fp32 partials added)
    (2, 8, 2, 333, 64, False, None, True),  # the dQ kernel (deterministic mode); ragged
    (1, 8, 8, 700, 128, True, (128, 0), True)])  # a sliding window
def test_the_backward_replay_matches_the_full_path(monkeypatch, B, Hq, Hkv, S, D, causal, window, deterministic):
    """The op's backward replay (ops/attention._BackwardReplay: a signature's second call skips the router, the plan
    lookup and the Triton driver's checks) gives the full path's gradients - bit-equal where they are deterministic
    (dK / dV always, dQ from the dQ kernel), within 2x torch's error for dQ's reductions - and a switch set after it
    was recorded (the CUDA backward off) is honoured at the next call."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb
    from tilewright.ops import attention as ops_attention

    monkeypatch.setenv(cb.ENV, "1")
    monkeypatch.setattr(ops_attention, "_bwd_replays", {})
    monkeypatch.setattr(ops_attention, "_cuda_plans", {})
    calls = []
    real = ops_attention._BackwardReplay.__call__
    monkeypatch.setattr(ops_attention._BackwardReplay, "__call__", lambda self, *a: calls.append(1) or real(self, *a))
    q, k, v, do, *_ = _problem(B, Hq, Hkv, S, S, D, causal, torch.bfloat16, seed=7)

    def grads():
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        o = tilewright.flash_attention(qq, kk, vv, causal=causal, window=window)
        return torch.autograd.grad(o, (qq, kk, vv), do)

    torch.use_deterministic_algorithms(deterministic)
    try:
        full = grads()
        assert len(ops_attention._bwd_replays) == 1 and not calls
        replayed = grads()
        assert calls == [1]
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(full[1], replayed[1]) and torch.equal(full[2], replayed[2])
    if deterministic:
        assert torch.equal(full[0], replayed[0])
    else:
        ref = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), causal, None)[0]
        peer = _torch_grads(q, k, v, do, causal)[0]  # (the non-deterministic rows have no window)
        assert torch.isfinite(replayed[0]).all()
        assert _err(replayed[0], ref) <= 2 * _err(peer, ref) + 1e-3
    monkeypatch.setenv(cb.ENV, "0")  # Triton's backward now: the recorded replay's key no longer matches
    calls.clear()
    triton_grads = grads()
    assert not calls and len(ops_attention._bwd_replays) == 1
    for a, b in zip(triton_grads, full):
        assert (a.float() - b.float()).abs().max() <= 2e-2 * b.float().abs().max()


# The step's opt-in changes (TILEWRIGHT_CUDA_ATTN_BWD_STEP; attention_bwd_sm90.STEP_OPTIONS) move the same values with
# other instructions and later waits: dK / dV must be bit-equal to the default build's, and so must dQ wherever its
# reduce-adds cannot be reordered - one key block (Skv <= 128): one add per element at head dim 128, two (one per
# consumer, commutative onto zero) at 64; with more key blocks the CTAs' adds land in a varying order, run to run.
STEP_SETTINGS = ("defer", "stsm", "lds64", "defer,stsm,lds64")
STEP_CASES = [  # (B, Hq, Hkv, Sq, Skv, D, causal); odd lengths, GQA
    (1, 8, 2, 301, 97, 64, True), (2, 4, 4, 1001, 517, 64, False), (1, 6, 2, 333, 1027, 64, True),
    (1, 4, 1, 555, 127, 128, False), (2, 8, 2, 777, 1001, 128, True), (1, 2, 2, 129, 257, 128, False),
    (1, 4, 4, 7, 7, 128, True),
]


@pytest.mark.parametrize("setting", STEP_SETTINGS)
@pytest.mark.parametrize("B,Hq,Hkv,Sq,Skv,D,causal", STEP_CASES)
def test_the_step_options_match_the_default_build(monkeypatch, B, Hq, Hkv, Sq, Skv, D, causal, setting):
    """Each option and all three (launch_dkdv with dQ in the pass, the switch read per launch): dK / dV bit-equal to
    the default build's into NaN-poisoned outputs, dQ bit-equal with one key block and within its reductions'
    reordering with more."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    q, k, v, do, lse, delta, scale = _problem(B, Hq, Hkv, Sq, Skv, D, causal, torch.bfloat16, seed=11)
    results = []
    for value in (None, setting):
        if value is None:
            monkeypatch.delenv(cb.STEP_ENV, raising=False)
        else:
            monkeypatch.setenv(cb.STEP_ENV, value)
        dk, dv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
        acc = torch.zeros(q.shape, device=DEV, dtype=torch.float32)
        cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, causal, scale, "b", dq_accum=acc)
        results.append((dk, dv, acc))
    torch.cuda.synchronize()
    (dk0, dv0, dq0), (dk1, dv1, dq1) = results
    assert torch.isfinite(dk1).all() and torch.isfinite(dv1).all() and torch.isfinite(dq1).all()
    assert torch.equal(dk1, dk0) and torch.equal(dv1, dv0), "dK / dV differ from the default build's"
    if Skv <= 128:
        assert torch.equal(dq1, dq0), "dQ differs from the default build's (one key block: a fixed order)"
    else:  # the order of the CTAs' adds varies; the staged partials are the same
        assert (dq1 - dq0).abs().max().item() <= 1e-4 * dq0.abs().max().item()


@pytest.mark.parametrize("window,softcap", [(None, 0.0), ((100, 0), 0.0), (None, 20.0)])
def test_the_op_with_all_step_options_matches_the_default(monkeypatch, window, softcap):
    """Through the public op (its plan's bound dK / dV launch; the switch is in the plan's key): all three options
    at head dim 64, GQA, causal with a window or a soft cap - dK / dV bit-equal to the default's, dQ within its
    reductions' reordering."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb

    monkeypatch.setenv(cb.ENV, "1")
    q, k, v, do, *_ = _problem(2, 8, 2, 1001, 1001, 64, True, torch.bfloat16, seed=12)

    def grads():
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        o = tilewright.flash_attention(qq, kk, vv, causal=True, window=window, softcap=softcap)
        return torch.autograd.grad(o, (qq, kk, vv), do)

    monkeypatch.delenv(cb.STEP_ENV, raising=False)
    base = grads()
    monkeypatch.setenv(cb.STEP_ENV, "defer,stsm,lds64")
    for _ in range(2):  # the full path, then the bound one
        got = grads()
        assert torch.equal(got[1], base[1]) and torch.equal(got[2], base[2])
        assert (got[0].float() - base[0].float()).abs().max() <= 1e-2 * base[0].float().abs().max()
