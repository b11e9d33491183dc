"""GPU tier for the sm_90a flash-attention forward (Hopper only): every variant from simplest to full on ragged /
GQA / causal problems against fp64 with the rule "error <= 2x torch SDPA's error in the same dtype", the op path with
backend="cuda" (CUDA forward + Triton backward) including gradients, and repeated launches. The one-call device
script scripts/gpu_attention_sm90.sh runs a larger version of the same checks plus stress, sanitizer and benchmark."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright.reference import attention_reference

pytestmark = pytest.mark.gpu
DEV = "cuda"


def _ca():
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9):
        pytest.skip("sm_90a kernel: needs an H100/H200")
    from tilewright.cuda_fallback import attention_sm90
    from tilewright.cuda_fallback.runtime import build

    if build.toolchain() is None:
        pytest.skip("no CUDA compiler on this machine")
    return attention_sm90


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _qkv(B, Hq, Hkv, Sq, Skv, D, dtype=torch.bfloat16):
    return (torch.randn(B, Hq, Sq, D, device=DEV, dtype=dtype), torch.randn(B, Hkv, Skv, D, device=DEV, dtype=dtype),
            torch.randn(B, Hkv, Skv, D, device=DEV, dtype=dtype))


@pytest.mark.parametrize("variant", ["a", "b", "b_free", "c", "c64"])
@pytest.mark.parametrize("shape", [(1, 2, 2, 128, 128, 128), (2, 4, 2, 300, 300, 128), (1, 2, 1, 77, 333, 64),
                                   (1, 2, 1, 333, 77, 64), (1, 2, 2, 257, 190, 256), (1, 2, 2, 1500, 1500, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_variant_numerics(variant, shape, causal):
    ca = _ca()
    q, k, v = _qkv(*shape)
    out, lse = ca.cuda_attention(q, k, v, causal, None, variant)
    ro, rl = attention_reference(q.double(), k.double(), v.double(), causal)
    sd = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
    assert _rel(out, ro) <= max(2 * _rel(sd, ro), 1e-5)
    assert (lse.double() - rl).abs().max().item() <= 5e-3


def test_op_forward_and_backward_through_cuda():
    _ca()
    q, k, v = (t.requires_grad_() for t in _qkv(2, 4, 2, 300, 300, 128))
    out, lse = tilewright.flash_attention(q, k, v, causal=True, return_lse=True, backend="cuda")
    dout = torch.randn_like(out)
    g = torch.autograd.grad((out.float() * dout).sum() + lse.sum(), (q, k, v))
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ro, rl = attention_reference(qd, kd, vd, True)
    gr = torch.autograd.grad((ro * dout.double()).sum() + rl.sum(), (qd, kd, vd))
    qt, kt, vt = (t.detach().clone().requires_grad_() for t in (q, k, v))
    ot, lt = tilewright.flash_attention(qt, kt, vt, causal=True, return_lse=True, backend="triton")
    gt = torch.autograd.grad((ot.float() * dout).sum() + lt.sum(), (qt, kt, vt))
    for a, b, r in zip(g, gt, gr):
        assert _rel(a, r) <= 2 * _rel(b, r) + 1e-6


def test_repeated_launches_identical():
    ca = _ca()
    q, k, v = _qkv(2, 4, 2, 300, 300, 128)
    out0, lse0 = ca.cuda_attention(q, k, v, True)
    out, lse = torch.empty_like(out0), torch.empty_like(lse0)
    for _ in range(2000):
        ca.launch_attention(q, k, v, out, lse, True)
    torch.cuda.synchronize()
    assert torch.equal(out, out0) and torch.equal(lse, lse0)
