"""GPU tier of the sm_90a attention kernels over packed variable-length batches (the ``TW_VARLEN`` builds of
attention_sm90.cu and attention_bwd_sm90.cu, Hopper only). Forward: every head-dim build, causal (bottom-right per
sequence) or not, a window, GQA, sequence lengths 0 / 1 / under a tile / across tiles and a sequence without keys
(output 0, LSE -inf), against a per-sequence fp64 reference with the rule "error <= 2x the same formula's error in
the input dtype". Backward (dK / dV with dQ in the pass, and the dQ kernel): the same rule for dq, dk, dv, with a
causal sliding window and a soft cap. Both: inf / NaN rows of a neighbouring sequence must not reach a sequence whose
blocks load them. Also the op's route (it takes the kernel and returns its bits) and the first-use self-check."""
from __future__ import annotations

import pytest
import torch
from _cuda_gpu import cuda_family

import tilewright
from tilewright.reference import varlen_attention_reference

pytestmark = pytest.mark.gpu
DEV = "cuda"


def _ca():
    return cuda_family("attention_sm90", majors=(9,))


def _cu(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEV)


def _rel(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def _packed(lens_q, lens_k, Hq, Hkv, D, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return (torch.randn(sum(lens_q), Hq, D, generator=g, device=DEV, dtype=dtype),
            torch.randn(sum(lens_k), Hkv, D, generator=g, device=DEV, dtype=dtype),
            torch.randn(sum(lens_k), Hkv, D, generator=g, device=DEV, dtype=dtype), _cu(lens_q), _cu(lens_k))


def _launch(ca, q, k, v, cq, ck, max_q, max_k, causal, window=None):
    out = torch.full_like(q, float("nan"))  # poisoned: an unwritten row fails
    lse = torch.full((q.shape[1], q.shape[0]), float("nan"), device=DEV)
    upper = causal or (window is not None and window[1] is not None)
    ca.launch_attention_varlen(q, k, v, out, lse, cq, ck, max_q, max_k, upper,
                               causal_offset=0 if causal or window is None else window[1],
                               window_offset=None if window is None or window[0] is None else -window[0])
    return out, lse


CASES = [  # (lens_q, lens_k, Hq, Hkv, causal, window)
    ((1000, 0, 1, 77, 300, 129, 40), (1000, 5, 1, 77, 300, 129, 0), 8, 2, True, None),  # no keys: 0 and -inf
    ((513, 128, 2048, 64), (700, 128, 2048, 200), 4, 4, True, None),  # Sq_b != Skv_b both ways
    ((513, 128, 2048, 64), (700, 128, 2048, 200), 4, 4, False, None),
    ((250, 900, 33), (250, 900, 33), 4, 1, False, (100, 20)),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("D", [64, 96, 128, 256])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[0])}seqs-{c[2]}/{c[3]}-c{c[4]}-w{c[5]}")
def test_packed_kernel_within_twice_torch_error(case, D, dtype):
    ca = _ca()
    lens_q, lens_k, Hq, Hkv, causal, window = case
    q, k, v, cq, ck = _packed(lens_q, lens_k, Hq, Hkv, D, dtype, seed=sum(lens_q) + D)
    out, lse = _launch(ca, q, k, v, cq, ck, max(lens_q), max(lens_k), causal, window)
    ro, rl = varlen_attention_reference(q.double(), k.double(), v.double(), cq, ck, causal, None, 0.0, window)
    to, _ = varlen_attention_reference(q, k, v, cq, ck, causal, None, 0.0, window)
    torch.cuda.synchronize()
    assert not out.isnan().any(), "rows left unwritten (or NaN)"
    assert _rel(out, ro) <= 2 * _rel(to, ro) + 1e-4, (_rel(out, ro), _rel(to, ro))
    assert torch.equal(torch.isinf(lse), torch.isinf(rl)) and not lse.isnan().any()
    finite = torch.isfinite(rl)
    assert (lse.double() - rl)[finite].abs().max().item() <= 2e-2


@pytest.mark.parametrize("causal", [False, True])
def test_a_neighbours_non_finite_rows_stay_out(causal):
    """Sequence 0 (65 rows: its tiles and key blocks reach into sequence 1) next to a sequence whose K and V rows are
    inf / NaN: sequence 0's output and LSE equal its own reference (the kernel masks the foreign keys and zeroes the
    foreign V rows it loaded); sequence 1's rows are NaN, as torch's would be."""
    ca = _ca()
    lens = (65, 300, 70)
    q, k, v, cq, ck = _packed(lens, lens, 4, 2, 128, torch.bfloat16, seed=3)
    k[65:200] = float("nan")
    v[65:130] = float("inf")
    v[130:200] = float("nan")
    out, lse = _launch(ca, q, k, v, cq, ck, 300, 300, causal)
    for b, rows in ((0, slice(0, 65)), (2, slice(365, 435))):
        ro, rl = varlen_attention_reference(q[rows].double(), k[rows].double(), v[rows].double(),
                                            _cu((lens[b],)), _cu((lens[b],)), causal)
        assert torch.isfinite(out[rows]).all() and _rel(out[rows], ro) <= 1e-2, b
        assert (lse[:, rows].double() - rl).abs().max().item() <= 2e-2, b


def test_the_op_routes_packed_batches_to_the_kernel():
    """flash_attention_varlen on an H100 / H200 takes the kernel for prefill-sized sequences (the measured table) and
    returns its bits; the backward (Triton) follows with finite gradients."""
    ca = _ca()
    lens = (1000, 1500, 777, 2048)
    q, k, v, cq, ck = _packed(lens, lens, 16, 4, 128, torch.bfloat16, seed=5)
    ok, why = ca.varlen_route(q, k, v, cq, 2048, 2048)
    assert ok, why
    want, want_lse = _launch(ca, q, k, v, cq, ck, 2048, 2048, True)
    got, lse = tilewright.flash_attention_varlen(q, k, v, cq, ck, 2048, 2048, causal=True, return_lse=True)
    assert torch.equal(got, want) and torch.equal(lse, want_lse)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    out = tilewright.flash_attention_varlen(qg, kg, vg, cq, ck, 2048, 2048, causal=True)
    out.backward(torch.randn_like(out))
    assert all(torch.isfinite(t.grad).all() for t in (qg, kg, vg))


@pytest.mark.parametrize("D,dtype", [(128, torch.bfloat16), (64, torch.float16), (256, torch.bfloat16)])
def test_self_check_passes(D, dtype):
    ok, why = _ca().self_check_varlen(torch.device(DEV), D, dtype)
    assert ok, why


# ---------------------------------------------------------------------------------------------------- backward
@pytest.fixture
def cuda_backward_spy(monkeypatch):
    """Forces the sm_90a backward for every call (TILEWRIGHT_CUDA_ATTN_BWD=1), fresh plans, and counts the packed
    dK / dV and dQ kernel bindings so a test knows the kernels ran."""
    import importlib

    cb = cuda_family("attention_bwd_sm90", majors=(9,))
    ops_attention = importlib.import_module("tilewright.ops.attention")
    monkeypatch.setenv(cb.ENV, "1")
    monkeypatch.setattr(ops_attention, "_cuda_plans", {})
    calls = {"dkdv": 0, "dq": 0}
    real_dkdv, real_dq = cb.bind_dkdv, cb.bind_dq

    def bind_dkdv(*args, **kwargs):
        # the op layer's positional arguments: 8 tensors, causal, scale, variant, dq_accum, band, softcap, packed,
        # stats (None for packed batches)
        calls["dkdv"] += args[14] is not None and args[15] is None
        return real_dkdv(*args, **kwargs)

    def bind_dq(*args, **kwargs):
        calls["dq"] += args[-1] is not None
        return real_dq(*args, **kwargs)

    monkeypatch.setattr(cb, "bind_dkdv", bind_dkdv)
    monkeypatch.setattr(cb, "bind_dq", bind_dq)
    return cb, calls, monkeypatch


BWD_CASES = [  # (lens_q, lens_k, Hq, Hkv, causal, window, softcap)
    ((1000, 0, 1, 77, 300, 129, 40), (1000, 5, 1, 77, 300, 129, 0), 8, 2, True, None, None),
    ((513, 128, 700, 64), (700, 128, 513, 200), 4, 4, True, None, None),
    ((513, 128, 700, 64), (700, 128, 513, 200), 4, 4, False, None, None),
    ((250, 900, 33), (250, 900, 33), 4, 1, False, (100, 20), None),
    ((640, 127, 300), (640, 127, 300), 8, 2, True, (200, 0), None),  # a causal sliding window
    ((640, 127, 300), (700, 127, 250), 8, 2, True, None, 30.0),  # the soft cap's derivative per sequence
]


def _grads(q, k, v, cq, ck, lens_q, lens_k, causal, window, grad, softcap=None):
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = tilewright.flash_attention_varlen(qg, kg, vg, cq, ck, max(lens_q), max(lens_k), causal=causal,
                                            window=window, softcap=softcap)
    out.backward(grad)
    return qg.grad, kg.grad, vg.grad


@pytest.mark.parametrize("dq_mode", ["atomic", "kernel"])
@pytest.mark.parametrize("D", [64, 96, 128])
@pytest.mark.parametrize("case", BWD_CASES,
                         ids=lambda c: f"{len(c[0])}seqs-{c[2]}/{c[3]}-c{c[4]}-w{c[5]}-s{c[6]}")
def test_packed_backward_kernels_within_twice_torch_error(case, D, dq_mode, cuda_backward_spy):
    cb, calls, monkeypatch = cuda_backward_spy
    monkeypatch.setenv(cb.DQ_ENV, dq_mode)
    lens_q, lens_k, Hq, Hkv, causal, window, softcap = case
    dtype = torch.bfloat16
    q, k, v, cq, ck = _packed(lens_q, lens_k, Hq, Hkv, D, dtype, seed=sum(lens_k) + D)
    grad = torch.randn(q.shape, device=DEV, dtype=dtype)
    got = _grads(q, k, v, cq, ck, lens_q, lens_k, causal, window, grad, softcap)
    assert calls["dkdv"] == 1 and calls["dq"] == (dq_mode == "kernel"), calls
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    ro, _ = varlen_attention_reference(qd, kd, vd, cq, ck, causal, None, softcap or 0.0, window)
    ref = torch.autograd.grad(ro, (qd, kd, vd), grad.double())
    qt, kt, vt = (t.clone().requires_grad_() for t in (q, k, v))
    to, _ = varlen_attention_reference(qt, kt, vt, cq, ck, causal, None, softcap or 0.0, window)
    same_dtype = torch.autograd.grad(to, (qt, kt, vt), grad)
    for name, g, t, r in zip(("dq", "dk", "dv"), got, same_dtype, ref):
        assert torch.isfinite(g).all(), name
        assert _rel(g, r) <= 2 * _rel(t, r) + 1e-4, (name, _rel(g, r), _rel(t, r))


@pytest.mark.parametrize("dq_mode", ["atomic", "kernel"])
def test_packed_backward_keeps_a_neighbours_non_finite_rows_out(dq_mode, cuda_backward_spy):
    """The middle sequence's q, k, v and upstream gradient hold inf / NaN rows: its neighbours' gradients (whose last
    blocks load some of those rows) are finite and equal their own references."""
    cb, calls, monkeypatch = cuda_backward_spy
    monkeypatch.setenv(cb.DQ_ENV, dq_mode)
    lens = (65, 300, 130)
    q, k, v, cq, ck = _packed(lens, lens, 4, 2, 128, torch.bfloat16, seed=9)
    grad = torch.randn(q.shape, device=DEV, dtype=torch.bfloat16)
    for t in (q, k, v, grad):
        t[65:200] = float("nan")
        t[200:365] = float("inf")
    dq, dk, dv = _grads(q, k, v, cq, ck, lens, lens, True, None, grad)
    assert calls["dkdv"] == 1
    for rows in (slice(0, 65), slice(365, 495)):
        n = rows.stop - rows.start
        qd, kd, vd = (t[rows].double().requires_grad_() for t in (q, k, v))
        ro, _ = varlen_attention_reference(qd, kd, vd, _cu((n,)), _cu((n,)), True)
        ref = torch.autograd.grad(ro, (qd, kd, vd), grad[rows].double())
        for name, g, r in zip(("dq", "dk", "dv"), (dq[rows], dk[rows], dv[rows]), ref):
            assert torch.isfinite(g).all() and _rel(g, r) <= 2e-2, (name, rows)
