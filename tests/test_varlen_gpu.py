"""GPU tier of flash_attention_varlen: bf16 / fp16 packed batches (lengths 0, 1, under a block, several blocks, Sq !=
Skv under bottom-right causal; GQA; head dims 64 / 128; a window; a soft cap) - forward, LSE and backward against a
per-sequence fp64 reference, with the rule "error <= 2x torch's own same-dtype computation"; and the equal-length
batch against the dense op."""
from __future__ import annotations

import pytest
import torch

import tilewright
from tilewright.reference import varlen_attention_reference

pytestmark = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py)
DEV = "cuda"


def _cu(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEV)


def _rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


CASES = [  # (lens_q, lens_k, Hq, Hkv, D, causal, window, softcap)
    ((1000, 0, 1, 77, 300), (1000, 5, 1, 77, 300), 16, 4, 128, True, None, None),
    ((513, 128, 2048), (700, 128, 2048), 8, 8, 64, True, None, None),
    ((250, 900, 33), (250, 900, 33), 4, 1, 128, False, (100, 20), None),
    ((640, 127), (640, 127), 8, 2, 128, True, None, 30.0),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[0])}seqs-{c[2]}/{c[3]}-D{c[4]}-c{c[5]}-w{c[6]}-s{c[7]}")
def test_within_twice_torch_error(case, dtype):
    lens_q, lens_k, Hq, Hkv, D, causal, window, softcap = case
    g = torch.Generator(device=DEV).manual_seed(sum(lens_q) + D)
    q = torch.randn(sum(lens_q), Hq, D, generator=g, device=DEV, dtype=dtype, requires_grad=True)
    k = torch.randn(sum(lens_k), Hkv, D, generator=g, device=DEV, dtype=dtype, requires_grad=True)
    v = torch.randn(sum(lens_k), Hkv, D, generator=g, device=DEV, dtype=dtype, requires_grad=True)
    cq, ck = _cu(lens_q), _cu(lens_k)
    out, lse = tilewright.flash_attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=causal,
                                                 window=window, softcap=softcap, return_lse=True)
    grad = torch.randn(out.shape, generator=g, device=DEV, dtype=dtype)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ro, rl = varlen_attention_reference(qd, kd, vd, cq, ck, causal, None, softcap or 0.0, window)
    rdq, rdk, rdv = torch.autograd.grad(ro, (qd, kd, vd), grad.double())
    # torch's own computation in the same dtype (the same reference formula run in bf16 / fp16)
    qt, kt, vt = (t.detach().clone().requires_grad_() for t in (q, k, v))
    to, _ = varlen_attention_reference(qt, kt, vt, cq, ck, causal, None, softcap or 0.0, window)
    tdq, tdk, tdv = torch.autograd.grad(to, (qt, kt, vt), grad)
    assert torch.isfinite(out).all() and torch.isfinite(dq).all() and torch.isfinite(dk).all()
    for got, torch_, ref in ((out, to, ro), (dq, tdq, rdq), (dk, tdk, rdk), (dv, tdv, rdv)):
        assert _rel(got, ref) <= 2 * _rel(torch_, ref) + 1e-4, (_rel(got, ref), _rel(torch_, ref))
    finite = torch.isfinite(rl)
    assert torch.equal(torch.isinf(lse), torch.isinf(rl))
    assert (lse.double() - rl)[finite].abs().max().item() <= 2e-2


def test_equal_lengths_agree_with_the_dense_op():
    B, S, Hq, Hkv, D = 4, 1024, 16, 4, 128
    q = torch.randn(B * S, Hq, D, device=DEV, dtype=torch.bfloat16)
    k = torch.randn(B * S, Hkv, D, device=DEV, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    cu = _cu([S] * B)
    got = tilewright.flash_attention_varlen(q, k, v, cu, cu, S, S, causal=True)
    dense = tilewright.flash_attention(*(t.view(B, S, -1, D).transpose(1, 2) for t in (q, k, v)), causal=True)
    assert (got.float() - dense.transpose(1, 2).reshape(B * S, Hq, D).float()).abs().max().item() <= 2e-2


def test_a_repeated_signature_reads_the_new_offsets():
    """The second call of a signature runs bound launches (triton_kernels/_runtime.BoundLaunch): with other offsets
    (same shapes and totals) in new tensors, forward and backward must follow the new offsets."""
    H, D = 4, 64
    T = 900
    q, k, v = (torch.randn(T, H, D, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    for lengths in ((300, 600), (850, 50), (300, 600)):
        cu = _cu(lengths)
        out = tilewright.flash_attention_varlen(q, k, v, cu, cu, 850, 850, causal=True)
        grad = torch.randn_like(out)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad)
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        ro, _ = varlen_attention_reference(qd, kd, vd, cu, cu, True)
        rdq, rdk, rdv = torch.autograd.grad(ro, (qd, kd, vd), grad.double())
        for got, ref in ((out, ro), (dq, rdq), (dk, rdk), (dv, rdv)):
            assert _rel(got, ref) <= 2e-2, lengths
