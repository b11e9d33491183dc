"""A value head dim of its own (issue 15 item 3; DeepSeek MLA: q/k 192, v 128): v and the output (B, H, S, Dv), dV
like v, in the three Triton kernels - forward, LSE and gradients against the float64 reference within 2x the
same-dtype reference's error; the output keeps q's dim order; unsupported value head dims raise naming v."""
import pytest
import torch

import tilewright
from tilewright.reference import attention_reference


def _check(q, k, v, **options):
    out, lse = tilewright.flash_attention(q, k, v, return_lse=True, **options)
    assert out.shape == (*q.shape[:-1], v.shape[-1])
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), do)
    causal = options.get("causal", False)
    bottom_right = options.get("causal_align") == "bottom_right"
    window = options.get("window")
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = attention_reference(q64, k64, v64, causal, None, bottom_right, window=window)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    low, _ = attention_reference(ql, kl, vl, causal, None, bottom_right, window=window)
    low_grads = torch.autograd.grad(low, (ql, kl, vl), do)
    assert (out.double() - ref).abs().max() <= 2 * (low.double() - ref).abs().max() + 1e-3
    finite = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse[finite].double(), ref_lse[finite], rtol=0, atol=2e-3)
    for name, got, want, base in zip(("dq", "dk", "dv"), grads, ref_grads, low_grads):
        assert got.shape == want.shape, name
        e, b = (got.double() - want).abs().max().item(), (base.double() - want).abs().max().item()
        assert e <= 2 * b + 2e-3, (name, e, b)
    return out


@pytest.mark.parametrize("D,Dv", [(48, 16), (16, 40), (24, 24), (72, 32)])
@pytest.mark.parametrize("causal", [False, True])
def test_value_head_dim_matches_the_reference(D, Dv, causal):
    torch.manual_seed(D * 100 + Dv)
    q = torch.randn(1, 4, 70, D, dtype=torch.float16, requires_grad=True)
    k = torch.randn(1, 2, 90, D, dtype=torch.float16, requires_grad=True)
    v = torch.randn(1, 2, 90, Dv, dtype=torch.float16, requires_grad=True)
    _check(q, k, v, causal=causal)


def test_value_head_dim_with_window_and_strided_bshd_layout():
    """(B, S, H, D) tensors viewed as (B, H, S, D): the output comes back as a (B, S, H, Dv) tensor's view."""
    torch.manual_seed(3)
    q = torch.randn(1, 70, 4, 40, dtype=torch.float16).transpose(1, 2).requires_grad_()
    k = torch.randn(1, 100, 2, 40, dtype=torch.float16).transpose(1, 2).requires_grad_()
    v = torch.randn(1, 100, 2, 24, dtype=torch.float16).transpose(1, 2).requires_grad_()
    out = _check(q, k, v, causal=True, causal_align="bottom_right", window=(20, 0))
    assert out.transpose(1, 2).is_contiguous()


def test_unsupported_value_head_dim_raises_naming_v():
    q = torch.randn(1, 2, 8, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"v: value head dim 12"):
        tilewright.flash_attention(q, q, torch.randn(1, 2, 8, 12, dtype=torch.float16))
