"""GPU tier for the sm_90a attention kernels' band masks and soft cap (Hopper only): bottom-right causal (Sq < Skv and
Sq > Skv, where rows see no key), sliding windows (left, right, both, with and without causal) and the logit soft
cap, through the forward kernel into NaN-poisoned outputs and through the public op with the CUDA forward and the CUDA
backward forced (both dQ modes), against fp64 with the rule "error <= 2x torch's own unfused computation in the same
dtype". Head dim 256 has no CUDA backward: its gradients come from Triton's."""
from __future__ import annotations

import pytest
import torch

import tilewright
from tilewright.reference import attention_grad_reference, attention_reference

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper")]
DEV = "cuda"


# (B, Hq, Hkv, Sq, Skv, D, causal, bottom_right, window, softcap)
CASES = [
    (1, 4, 2, 300, 500, 128, True, True, None, 0.0),          # bottom-right, more keys than queries
    (1, 4, 2, 500, 300, 128, True, True, None, 0.0),          # bottom-right, rows 0-199 see no key
    (2, 4, 4, 700, 700, 128, True, False, (200, 0), 0.0),     # causal + left window: key blocks skipped
    (1, 2, 1, 600, 600, 64, False, False, (150, 90), 0.0),    # two-sided window, no causal
    (1, 2, 2, 333, 333, 96, False, False, (None, 40), 0.0),   # right edge only, padded head dim
    (1, 4, 2, 1200, 1200, 128, True, False, (300, 0), 0.0),   # many blocks on both sides of the band
    (1, 2, 2, 64, 4096, 128, True, True, (1000, 0), 0.0),     # chunked prefill against a long cache, windowed
    (1, 4, 2, 300, 300, 128, True, False, None, 30.0),        # soft cap
    (1, 2, 2, 257, 257, 256, False, False, None, 20.0),       # soft cap, head dim 256
    (1, 2, 1, 500, 500, 64, True, False, (100, 0), 10.0),     # soft cap + window
]


def _id(c):
    B, Hq, Hkv, Sq, Skv, D, causal, br, window, cap = c
    return f"{B}x{Hq}/{Hkv}x{Sq}:{Skv}x{D}-{'br' if br else 'tl'}{'-causal' if causal else ''}-w{window}-cap{cap:g}"


def _band(Sq, Skv, causal, bottom_right, window):
    """The kernels' (upper flag, causal_offset, window_offset) of a request (the op layer's _band)."""
    from tilewright.ops.attention import _band as op_band

    left, right = window if window is not None else (None, None)
    return op_band(Sq, Skv, causal, bottom_right, -1 if left is None else left, -1 if right is None else right)


def _inputs(case, seed=0):
    B, Hq, Hkv, Sq, Skv, D, *_ = case
    g = torch.Generator(device="cpu").manual_seed(seed + Sq * 7 + Skv + D)
    return [torch.randn(B, H, S, D, generator=g).to(DEV, torch.bfloat16)
            for H, S in ((Hq, Sq), (Hkv, Skv), (Hkv, Skv), (Hq, Sq))]


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_forward_kernel_matches_the_reference(case):
    """Every element of out / lse written (NaN-poisoned beforehand); rows without a visible key give out 0 and
    lse -inf exactly, as the reference does."""
    from tilewright.cuda_fallback import attention_sm90 as ca

    B, Hq, Hkv, Sq, Skv, D, causal, br, window, cap = case
    q, k, v, _ = _inputs(case)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((B, Hq, Sq), float("nan"), device=DEV)
    upper, offset, window_offset = _band(Sq, Skv, causal, br, window)
    ca.launch_attention(q, k, v, out, lse, upper, None, causal_offset=offset, window_offset=window_offset,
                        softcap=cap)
    ro, rl = attention_reference(q.double(), k.double(), v.double(), causal, None, br, cap, window)
    to, _ = attention_reference(q, k, v, causal, None, br, cap, window)  # torch's own, in bf16
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert torch.equal(torch.isinf(lse), torch.isinf(rl)), "rows without a visible key must have lse -inf"
    assert _rel(out, ro) <= 2 * _rel(to, ro) + 1e-6
    finite = torch.isfinite(rl)
    assert (lse.double() - rl)[finite].abs().max().item() <= 5e-3
    assert (out[~finite.unsqueeze(-1).expand_as(out)] == 0).all()


@pytest.mark.parametrize("dq_mode", ["atomic", "kernel"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_op_forward_and_backward_on_the_cuda_kernels(monkeypatch, case, dq_mode):
    """flash_attention(backend="cuda") with the CUDA backward switched on: out, lse and dq / dk / dv within 2x the
    bf16 unfused computation's error of the fp64 formulas; the CUDA dK / dV kernel ran wherever it has a build (head
    dims up to 128)."""
    from tilewright.cuda_fallback import attention_bwd_sm90 as cb
    from tilewright.ops import attention as ops_attention

    B, Hq, Hkv, Sq, Skv, D, causal, br, window, cap = case
    monkeypatch.setattr(ops_attention, "_cuda_plans", {})
    monkeypatch.setattr(ops_attention, "_bwd_replays", {})  # (replays hold plans)
    monkeypatch.setenv(cb.ENV, "1")
    monkeypatch.setenv(cb.DQ_ENV, dq_mode)
    launches = []
    real = cb.bind_dkdv
    monkeypatch.setattr(cb, "bind_dkdv", lambda *a: launches.append(a) or real(*a))
    q, k, v, do = _inputs(case, seed=1)
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    out = tilewright.flash_attention(qq, kk, vv, causal=causal, backend="cuda", softcap=cap or None, window=window,
                                     causal_align="bottom_right" if br else "top_left")
    out.backward(do)
    assert bool(launches) == (D <= 128)
    ro, _ = attention_reference(q.double(), k.double(), v.double(), causal, None, br, cap, window)
    refs = attention_grad_reference(do.double(), q.double(), k.double(), v.double(), causal, None, None, br, cap,
                                    window)
    to, _ = attention_reference(q, k, v, causal, None, br, cap, window)
    peers = attention_grad_reference(do, q, k, v, causal, None, None, br, cap, window)  # torch's, in bf16
    assert _rel(out, ro) <= 2 * _rel(to, ro) + 1e-6
    for name, got, ref, peer in zip(("dq", "dk", "dv"), (qq.grad, kk.grad, vv.grad), refs, peers):
        assert torch.isfinite(got).all(), name
        assert _rel(got, ref) <= 2 * _rel(peer, ref) + 1e-6, f"{name}: {_rel(got, ref):.2e} vs {_rel(peer, ref):.2e}"
