"""Plain-torch reference implementations: the "torch" backend, the CPU fallback, and the tests' references.

Each computes in the dtype of its inputs, step by step, the way a user would write it unfused. Tests call them on
float64 copies of the inputs to get a high-precision reference.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._codes import FP8_SCALE_BLOCK


def activation_reference(x: torch.Tensor, activation: str | None) -> torch.Tensor:
    """activation(x) with torch's own functions."""
    if activation is None:
        return x
    if activation == "relu":
        return torch.relu(x)
    if activation == "gelu":
        return F.gelu(x)
    if activation == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if activation == "silu":
        return F.silu(x)
    raise ValueError(f"activation: unsupported {activation!r}")


def activation_grad_reference(grad: torch.Tensor, preact: torch.Tensor, activation: str,
                              compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """d activation(z) / dz * grad, computed in ``compute_dtype`` (float32 by default), returned in grad's dtype."""
    z = preact.to(compute_dtype)
    g = grad.to(compute_dtype)
    if activation == "relu":
        d = (z > 0).to(compute_dtype)
    elif activation == "silu":
        s = torch.sigmoid(z)
        d = s * (1 + z * (1 - s))
    elif activation == "gelu":
        cdf = 0.5 * (1 + torch.erf(z * 0.7071067811865476))
        pdf = torch.exp(-0.5 * z * z) * 0.3989422804014327
        d = cdf + z * pdf
    elif activation == "gelu_tanh":
        k = 0.7978845608028654
        u = k * (z + 0.044715 * z ** 3)
        t = torch.tanh(u)
        d = 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k * (1 + 3 * 0.044715 * z * z)
    else:
        raise ValueError(f"activation: unsupported {activation!r}")
    return (g * d).to(grad.dtype)


def epilogue_reference(y, bias=None, activation=None, residual=None) -> torch.Tensor:
    """activation(y + bias) + residual in y's dtype: the fused epilogues' order, on a product computed elsewhere."""
    if bias is not None:
        y = y + bias.to(y.dtype)
    y = activation_reference(y, activation)
    if residual is not None:
        y = y + residual.to(y.dtype)
    return y


def folded_rms_norm_linear_reference(x, folded, sumsq, bias, eps, activation=None, residual=None):
    """The folded RMSNorm-linear kernels' contract in fp32 (cuda_fallback/rstd_gemm_sm90.py and the in-kernel sum of
    squares build of rmsnorm_gemm_sm90.py): ``(x @ folded^T) * rstd + bias``, activation, + residual with
    ``rstd = 1 / sqrt(sumsq / K + eps)`` and ``folded = g * W``; returns (y, rstd)."""
    rstd = 1.0 / torch.sqrt(sumsq / x.shape[1] + eps)
    return epilogue_reference((x.float() @ folded.float().t()) * rstd[:, None], bias, activation, residual), rstd


def gemm_reference(a, b, bias=None, residual=None, activation=None, out_dtype=None) -> torch.Tensor:
    """activation(a @ b + bias) + residual, unfused, in the inputs' dtype, cast to out_dtype at the end."""
    return epilogue_reference(a @ b, bias, activation, residual).to(out_dtype or a.dtype)


def causal_visible(Sq: int, Skv: int, bottom_right: bool, device) -> torch.Tensor:
    """(Sq, Skv) bool: query i sees key j iff ``j <= i`` (top-left, SDPA's ``is_causal``) or ``j <= i + Skv - Sq``
    (bottom-right: the last query sees every key, flash-attn's convention for Sq != Skv)."""
    return torch.ones(Sq, Skv, dtype=torch.bool, device=device).tril(Skv - Sq if bottom_right else 0)


def band_visible(Sq: int, Skv: int, causal: bool, bottom_right: bool, window, device) -> torch.Tensor | None:
    """(Sq, Skv) bool visibility of the causal mask and / or a sliding window, None when every key is visible.
    Query i sits at key position ``p = i + (Skv - Sq if bottom_right else 0)``; causal: j <= p; ``window = (left,
    right)`` (each None: unbounded on that side): p - left <= j <= p + right."""
    left, right = window if window is not None else (None, None)
    if not causal and left is None and right is None:
        return None
    p = torch.arange(Sq, device=device)[:, None] + (Skv - Sq if bottom_right else 0)
    j = torch.arange(Skv, device=device)[None, :]
    visible = torch.ones(Sq, Skv, dtype=torch.bool, device=device)
    if causal:
        visible &= j <= p
    if right is not None:
        visible &= j <= p + right
    if left is not None:
        visible &= j >= p - left
    return visible


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        scale: float | None = None, bottom_right: bool = False,
                        softcap: float = 0.0, window=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention, unfused, in the inputs' dtype: returns (out, lse).

    q: (B, Hq, Sq, D), k/v: (B, Hkv, Skv, D) with Hq % Hkv == 0 (kv heads are repeated here - a reference may copy).
    causal: top-left aligned like ``F.scaled_dot_product_attention(is_causal=True)``: query i sees key j iff j <= i;
    with ``bottom_right`` iff j <= i + Skv - Sq (:func:`causal_visible`). ``softcap`` > 0: scores are
    ``softcap * tanh(scale * q k^T / softcap)`` before the mask (Gemma 2). ``window``: (left, right) sliding window
    (:func:`band_visible`), aligned like the causal mask.
    lse: natural-log logsumexp of the scaled scores, (B, Hq, Sq); a row with no visible key gives out 0 and lse -inf.
    """
    import math

    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    group = q.shape[1] // k.shape[1]
    if group != 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-2, -1)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    visible = band_visible(q.shape[-2], k.shape[-2], causal, bottom_right, window, q.device)
    if visible is not None:
        s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    # rows without a visible key: subtract 0 (exp(-inf) = 0) rather than -inf (NaN, also in the gradient)
    lse_safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    p = torch.exp(s - lse_safe.unsqueeze(-1))
    return p @ v, lse


def kvcache_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                seqlens: torch.Tensor, block_table: torch.Tensor | None = None, causal: bool = True,
                                scale: float | None = None, softcap: float = 0.0,
                                window=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of ``flash_attention_with_kvcache`` by gathering each sequence's keys and running
    :func:`attention_reference` bottom-right aligned, in q's dtype. q (B, Sq, Hq, D); caches (B, S_cache, Hkv, D), or
    paged (num_pages, page_size, Hkv, D) with block_table (B, max_pages); seqlens (B,): keys per sequence."""
    B, Sq, Hq, D = q.shape
    outs, lses = [], []
    for b in range(B):
        n = int(seqlens[b])
        if block_table is None:
            kb, vb = k_cache[b, :n], v_cache[b, :n]
        else:
            page = k_cache.shape[1]
            pages = block_table[b, :-(-n // page)].long()
            kb = k_cache[pages].reshape(-1, *k_cache.shape[2:])[:n]
            vb = v_cache[pages].reshape(-1, *v_cache.shape[2:])[:n]
        qb = q[b].transpose(0, 1)[None]  # (1, Hq, Sq, D)
        kb, vb = (t.to(q.dtype).transpose(0, 1)[None] for t in (kb, vb))
        if n == 0:
            outs.append(torch.zeros_like(qb))
            lses.append(torch.full((1, Hq, Sq), float("-inf"), dtype=q.dtype, device=q.device))
            continue
        o, lse = attention_reference(qb, kb, vb, causal, scale, True, softcap, window)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs).transpose(1, 2), torch.cat(lses)


def varlen_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                               cu_seqlens_k: torch.Tensor, causal: bool = False, scale: float | None = None,
                               softcap: float = 0.0, window=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of ``flash_attention_varlen`` sequence by sequence with :func:`attention_reference`, bottom-right
    aligned, in q's dtype. q (total_q, Hq, D), k / v (total_k, Hkv, D); cu_seqlens (batch + 1,). Returns out
    (total_q, Hq, Dv) and lse (Hq, total_q); a sequence without keys gives 0 and -inf."""
    outs, lses = [], []
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        qb = q[cq[b]:cq[b + 1]].transpose(0, 1)[None]  # (1, Hq, Sq, D)
        kb = k[ck[b]:ck[b + 1]].transpose(0, 1)[None]
        vb = v[ck[b]:ck[b + 1]].transpose(0, 1)[None]
        if kb.shape[2] == 0 or qb.shape[2] == 0:
            outs.append(q.new_zeros((qb.shape[2], q.shape[1], v.shape[-1])))
            lses.append(torch.full((q.shape[1], qb.shape[2]), float("-inf"), dtype=q.dtype, device=q.device))
            continue
        o, lse = attention_reference(qb, kb, vb, causal, scale, True, softcap, window)
        outs.append(o[0].transpose(0, 1))
        lses.append(lse[0])
    if not outs:
        return q.new_zeros((0, q.shape[1], v.shape[-1])), q.new_zeros((q.shape[1], 0))
    return torch.cat(outs), torch.cat(lses, dim=1)


def attention_grad_reference(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             causal: bool = False, scale: float | None = None,
                             grad_lse: torch.Tensor | None = None,
                             bottom_right: bool = False,
                             softcap: float = 0.0, window=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of :func:`attention_reference` by the explicit formulas (no autograd, so it also runs inside a
    custom op's implementation): dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O) + dLSE), dQ = scale dS K,
    dK = scale dS^T Q; kv-head gradients are summed over their query-head group. With ``softcap`` dS is multiplied
    by the cap's derivative, 1 - tanh^2."""
    import math

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    group = Hq // Hkv
    kr = k.repeat_interleave(group, dim=1) if group != 1 else k
    vr = v.repeat_interleave(group, dim=1) if group != 1 else v
    out, lse = attention_reference(q, k, v, causal, scale, bottom_right, softcap, window)
    lse_safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    s = (q @ kr.transpose(-2, -1)) * scale
    if softcap > 0:
        t = torch.tanh(s / softcap)
        s = softcap * t
    visible = band_visible(Sq, Skv, causal, bottom_right, window, q.device)
    if visible is not None:
        s = s.masked_fill(~visible, float("-inf"))
    p = torch.exp(s - lse_safe.unsqueeze(-1))
    dv = p.transpose(-2, -1) @ grad_out
    dp = grad_out @ vr.transpose(-2, -1)
    delta = (grad_out * out).sum(-1, keepdim=True)
    if grad_lse is not None:
        delta = delta - grad_lse.unsqueeze(-1).to(delta.dtype)
    ds = p * (dp - delta)
    if softcap > 0:
        ds = ds * (1 - t * t)
    dq = (ds @ kr) * scale
    dk = (ds.transpose(-2, -1) @ q) * scale
    if group != 1:
        dk = dk.view(B, Hkv, group, Skv, D).sum(2)
        dv = dv.view(B, Hkv, group, Skv, D).sum(2)
    return dq, dk, dv


def rms_norm_linear_reference(x, norm_weight, weight, bias=None, eps: float = 1e-6) -> torch.Tensor:
    """``F.linear(F.rms_norm(x, (K,), norm_weight, eps), weight, bias)``: the unfused pipeline, in x's dtype."""
    return F.linear(F.rms_norm(x, (x.shape[-1],), norm_weight, eps), weight, bias)


# ---- FP8 (scaled_mm) ----
FP8_BLOCK = FP8_SCALE_BLOCK  # block scales: one per 128 elements of K (and per 128 columns of b)


def per_element_scales(scale: torch.Tensor, bm: int, bk: int, rows: int, cols: int) -> torch.Tensor:
    """A (ceil(rows / bm), ceil(cols / bk)) grid of block scales repeated to one per element, (rows, cols)."""
    return scale.repeat_interleave(bm, 0)[:rows].repeat_interleave(bk, 1)[:, :cols]


def is_block_layout(scale_a, scale_b, M: int, K: int, N: int) -> bool:
    """Whether FP8 scales are block scales: (M, K / 128) and (K / 128, N / 128), rounded up, and not the rowwise
    (M, 1) / (1, N) pair (where a shape is both - K <= 128 and N == 1 - both readings give one result)."""
    if not (isinstance(scale_a, torch.Tensor) and isinstance(scale_b, torch.Tensor)
            and scale_a.dim() == 2 and scale_b.dim() == 2):
        return False
    kb, nb = -(-K // FP8_BLOCK), -(-N // FP8_BLOCK)
    return (tuple(scale_a.shape) == (M, kb) and tuple(scale_b.shape) == (kb, nb)
            and not (tuple(scale_a.shape) == (M, 1) and tuple(scale_b.shape) == (1, N)))


def scaled_mm_reference(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, compute_dtype=torch.float32):
    """``tilewright.scaled_mm`` in torch: dequantize and multiply in ``compute_dtype`` (the torch backend; float64
    for test references). Block scales (2-D scale_a (M, K blocks), scale_b (K blocks, N blocks)) dequantize each
    operand block by block first."""
    if is_block_layout(scale_a, scale_b, a.shape[0], *b.shape):
        K, N = b.shape
        sa = per_element_scales(scale_a.to(compute_dtype), 1, FP8_BLOCK, a.shape[0], K)
        sb = per_element_scales(scale_b.to(compute_dtype), FP8_BLOCK, FP8_BLOCK, K, N)
        y = (a.to(compute_dtype) * sa) @ (b.to(compute_dtype) * sb)
        return (y if bias is None else y + bias.to(compute_dtype)).to(out_dtype)
    sa = scale_a.to(compute_dtype).reshape(-1, 1) if scale_a.numel() > 1 else scale_a.to(compute_dtype).reshape(())
    sb = scale_b.to(compute_dtype).reshape(1, -1) if scale_b.numel() > 1 else scale_b.to(compute_dtype).reshape(())
    y = (a.to(compute_dtype) @ b.to(compute_dtype)) * sa * sb
    if bias is not None:
        y = y + bias.to(compute_dtype)
    return y.to(out_dtype)
