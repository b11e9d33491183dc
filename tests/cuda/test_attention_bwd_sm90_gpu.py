"""GPU tier for the sm_90a attention backward's kernels (Hopper only): dK and dV (and, from its own kernel, dQ)
against the fp64 formulas with the rule "error <= 2x torch SDPA's error in the same dtype" on ragged / GQA / causal /
Sq != Skv problems into NaN-poisoned outputs, and the public op's gradients with the kernels switched on
(TILEWRIGHT_CUDA_ATTN_BWD=1, TILEWRIGHT_CUDA_ATTN_BWD_DQ=1). The dQ kernel and dK / dV variant "b" had not run on a
GPU when these tests were written."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright.reference import attention_grad_reference

pytestmark = pytest.mark.gpu
DEV = "cuda"


@pytest.fixture(autouse=True)
def _hopper():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("sm_90a kernel")


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
]


@pytest.mark.parametrize("variant", ("a", "b"))  # "b" (two consumer warpgroups) had not run on a GPU when written
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

    _op_gradients_with_the_kernel(monkeypatch, cb, "launch_dkdv")


def _op_gradients_with_the_kernel(monkeypatch, cb, launcher: str):
    """tilewright.flash_attention's gradients with the backward switch on: ``launcher`` of the kernel module runs on
    the full path and the bound one, and dq / dk / dv are within 2x torch's error of the fp64 formulas."""
    calls = []
    launch = getattr(cb, launcher)
    monkeypatch.setattr(cb, launcher, lambda *a, **kw: calls.append(1) or launch(*a, **kw))
    monkeypatch.setenv(cb.ENV, "1")
    B, Hq, Hkv, S, D = 2, 8, 2, 384, 128
    q, k, v = (torch.randn(B, H, S, D, device=DEV, dtype=torch.bfloat16, requires_grad=True)
               for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device=DEV, dtype=torch.bfloat16)
    for _ in range(2):  # full path, then the bound one
        q.grad = k.grad = v.grad = None
        tilewright.flash_attention(q, k, v, causal=True).backward(do)
    assert len(calls) == 2
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

    monkeypatch.setenv(cb.DQ_ENV, "1")
    _op_gradients_with_the_kernel(monkeypatch, cb, "launch_dq")
