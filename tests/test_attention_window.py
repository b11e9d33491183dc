"""Sliding-window attention in the Triton kernels (issue 15 item 3), CPU tier: the kernels' band - an upper edge
(causal / the window's right side, ``causal_offset``) and a lower edge (the window's left side, ``window_offset``,
whose key blocks below are skipped) - against the float64 reference with the same band, within 2x the same-dtype
reference's error. Shapes straddle the interpreter's tiles (forward 64 x 32, dK/dV 32 x 64, dQ 64 x 32) so every
range split runs: blocks below the window, straddling both edges, fully inside, ragged tails."""
import pytest
import torch

from tilewright.reference import attention_reference, band_visible
from tilewright.triton_kernels import attention as A

WINDOWS = [(0, None), (None, 3), (17, 9), (40, 0)]  # (5, None), (0, 0) also passed; cut for the CPU tier's time


def _kernel_band(Sq, Skv, causal, bottom_right, window):
    """(kernel CAUSAL flag, causal_offset, window_offset) of a (causal, alignment, window) request."""
    left, right = window
    off = Skv - Sq if bottom_right else 0
    upper = causal or right is not None
    causal_offset = off + (0 if causal else right) if upper else 0
    return upper, causal_offset, None if left is None else off - left


def _run(q, k, v, do, causal, bottom_right, window, scale):
    B, Hq, Sq, D = q.shape
    Skv = k.shape[2]
    upper, c_off, w_off = _kernel_band(Sq, Skv, causal, bottom_right, window)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((B, Hq, Sq), float("nan"), dtype=torch.float32)
    A.attention_forward(q, k, v, out, lse, upper, scale, causal_offset=c_off, window_offset=w_off)
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    A.attention_backward(do, q, k, v, out, lse, dq, dk, dv, upper, scale, causal_offset=c_off, window_offset=w_off)
    return out, lse, dq, dk, dv


@pytest.mark.parametrize("Sq,Skv", [(100, 100), (60, 110), (110, 60)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bottom_right", [False, True])
@pytest.mark.parametrize("window", WINDOWS, ids=str)
def test_window_matches_the_banded_reference(Sq, Skv, causal, bottom_right, window):
    if causal and window[1] not in (None, 0):
        pytest.skip("causal fixes the right edge at 0 (the op rejects a wider one)")
    if Sq == Skv and bottom_right:
        pytest.skip("same as top-left")
    torch.manual_seed(Sq * 7 + Skv)
    B, Hq, Hkv, D = 1, 2, 1, 32
    q = torch.randn(B, Hq, Sq, D, dtype=torch.float16)
    k = torch.randn(B, Hkv, Skv, D, dtype=torch.float16)
    v = torch.randn(B, Hkv, Skv, D, dtype=torch.float16)
    do = torch.randn(B, Hq, Sq, D, dtype=torch.float16)
    scale = D ** -0.5
    out, lse, dq, dk, dv = _run(q, k, v, do, causal, bottom_right, window, scale)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = attention_reference(q64, k64, v64, causal, scale, bottom_right, window=window)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
    ql, kl, vl = (t.float().requires_grad_() for t in (q, k, v))  # fp32 math: the interpreter's half matmul is slow
    low, _ = attention_reference(ql.half(), kl.half(), vl.half(), causal, scale, bottom_right, window=window)
    low_grads = torch.autograd.grad(low, (ql, kl, vl), do)
    empty = ~band_visible(Sq, Skv, causal, bottom_right, window, "cpu").any(-1)  # rows that see no key
    assert torch.isneginf(lse[..., empty]).all() and torch.isfinite(lse[..., ~empty]).all()
    assert (out[..., empty, :] == 0).all()
    torch.testing.assert_close(lse[..., ~empty].double(), ref_lse[..., ~empty], rtol=0, atol=2e-3)
    e_out = (out.double() - ref).abs().max().item()
    e_low = (low.double() - ref).abs().max().item()
    assert e_out <= 2 * e_low + 1e-3, (e_out, e_low)
    for name, got, want, base in zip(("dq", "dk", "dv"), (dq, dk, dv), ref_grads, low_grads):
        assert torch.isfinite(got).all(), name
        e_got = (got.double() - want).abs().max().item()
        e_base = (base.double() - want).abs().max().item()
        assert e_got <= 2 * e_base + 2e-3, (name, e_got, e_base)


def test_window_skips_key_blocks_below_it():
    """Block-level skipping, not masking: a window of 8 over 512 keys. K rows far below every query's window are
    poisoned with NaN; a kernel that loaded them (even masked, exp(NaN) propagates through the running max) would
    return NaN."""
    torch.manual_seed(0)
    S, D = 256, 32
    q, k, v, do = (torch.randn(1, 1, S, D, dtype=torch.float16) for _ in range(4))
    k[..., :64, :] = float("nan")  # query rows >= 128 never see keys < 120
    v[..., :64, :] = float("nan")
    out, lse, dq, dk, dv = _run(q[..., 128:, :], k, v, do[..., 128:, :], True, True, (8, 0), D ** -0.5)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all() and torch.isfinite(dq).all()
    assert torch.isfinite(dk[..., 64:, :]).all() and (dk[..., :64, :] == 0).all()


# ---- the public op: flash_attention(window=...) ----
import tilewright  # noqa: E402


@pytest.mark.parametrize("causal,align,window", [
    (True, "top_left", (16, 0)), (False, "top_left", (7, 20)), (True, "bottom_right", (30, None)),
    (False, "bottom_right", (None, 5))], ids=str)
def test_flash_attention_window_matches_the_reference(causal, align, window):
    torch.manual_seed(1)
    q = torch.randn(1, 2, 70, 16, dtype=torch.float16, requires_grad=True)
    k = torch.randn(1, 1, 100, 16, dtype=torch.float16, requires_grad=True)
    v = torch.randn(1, 1, 100, 16, dtype=torch.float16, requires_grad=True)
    out, lse = tilewright.flash_attention(q, k, v, causal=causal, causal_align=align, window=window, return_lse=True)
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = attention_reference(q64, k64, v64, causal, None, align == "bottom_right", window=window)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    low, _ = attention_reference(ql, kl, vl, causal, None, align == "bottom_right", window=window)
    low_grads = torch.autograd.grad(low, (ql, kl, vl), do)
    assert (out.double() - ref).abs().max() <= 2 * (low.double() - ref).abs().max() + 1e-3
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    torch.testing.assert_close(lse[finite].double(), ref_lse[finite], rtol=0, atol=2e-3)
    for got, want, base in zip(grads, ref_grads, low_grads):
        assert (got.double() - want).abs().max() <= 2 * (base.double() - want).abs().max() + 2e-3
    # a second call at the same signature (the replay where one exists) gives the same answer
    assert torch.equal(tilewright.flash_attention(q, k, v, causal=causal, causal_align=align, window=window), out)


@pytest.mark.parametrize("window,causal,error,match", [
    ((3,), False, TypeError, "pair"), (5, False, TypeError, "pair"), ((1.5, 2), False, TypeError, "left side"),
    ((True, 2), False, TypeError, "left side"), ((-1, 2), False, ValueError, "left side must be >= 0"),
    ((2, -3), False, ValueError, "right side must be >= 0"), ((4, 2), True, ValueError, "right side must be 0"),
])
def test_window_input_errors_name_the_argument(window, causal, error, match):
    q = torch.randn(1, 2, 8, 16, dtype=torch.float16)
    with pytest.raises(error, match=match):
        tilewright.flash_attention(q, q, q, causal=causal, window=window)


def test_window_is_exact_where_it_covers_everything():
    """A window wider than the sequence changes nothing: bitwise the unwindowed result's math (same kernels' band
    with its edges outside every row), within the reference's tolerance."""
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 2, 70, 32, dtype=torch.float16) for _ in range(3))
    plain = tilewright.flash_attention(q, k, v, causal=True)
    wide = tilewright.flash_attention(q, k, v, causal=True, window=(1000, 0))
    torch.testing.assert_close(wide, plain, rtol=0, atol=2e-3)


def test_window_opcheck():
    from tilewright.ops.attention import flash_attn_bwd_op, flash_attn_fwd_op

    q = torch.randn(1, 1, 24, 16, dtype=torch.float16, requires_grad=True)
    torch.library.opcheck(flash_attn_fwd_op, (q, q.detach().clone().requires_grad_(), q.detach().clone(), True,
                                              False, 0.25, 0.0, None, 5, 0))
    out, lse = flash_attn_fwd_op(q.detach(), q.detach(), q.detach(), False, True, 0.25, 0.0, None, 5, 3)
    torch.library.opcheck(flash_attn_bwd_op, (torch.randn_like(out), None, q.detach(), q.detach(), q.detach(), out,
                                              lse, False, True, 0.25, 0.0, None, 5, 3))
