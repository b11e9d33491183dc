"""``flash_attention_varlen``: attention over packed batches of sequences of different lengths (flash-attn's varlen
convention), forward and backward.

Contract (flash-attn's ``flash_attn_varlen_func``, which training and inference engines already call):

* q: (total_q, Hq, D), k / v: (total_k, Hkv, D) / (total_k, Hkv, Dv) - the sequences' tokens packed one after the
  other, no padding. ``cu_seqlens_q`` / ``cu_seqlens_k``: int32 (batch + 1,) on q's device, 0 first, nondecreasing,
  the total last: sequence b owns rows ``cu[b] .. cu[b + 1] - 1``. ``max_seqlen_q`` / ``max_seqlen_k``: the longest
  sequence (an upper bound is fine; the launch grid covers that many rows a sequence).
* GQA / MQA: query head h reads kv head ``h // (Hq // Hkv)``.
* ``causal`` is **bottom-right** aligned per sequence (flash-attn's): with Sq_b queries and Skv_b keys, query i sees
  key j iff ``j <= i + Skv_b - Sq_b``; equal lengths make it the usual causal mask. ``window=(left, right)`` keeps
  keys within [p - left, p + right] of that position p = i + Skv_b - Sq_b. A row that sees no key (e.g. Sq_b >
  Skv_b under causal, or a sequence with no keys) gives output 0 and LSE -inf, and zero gradients.
* Returns out (total_q, Hq, Dv) in q's dtype, or (out, lse) with lse (Hq, total_q) fp32, natural log (flash-attn's
  varlen LSE layout). Differentiable in q, k, v (and through the LSE).

The forward runs the sm_90a CUDA kernel's packed build on Hopper where its measured table prefers it to Triton at
the batch's mean lengths (cuda_fallback/attention_sm90.varlen_route: one CTA per (query tile, head, sequence), TMA
over the packed tensors, each sequence's rows through cu_seqlens), else the Triton flash-attention kernels
(triton_kernels/attention.py with ``VARLEN``, the same grid). The backward runs the sm_90a dK / dV (and dQ) kernels'
packed builds where the dense backward's measured rule takes the batch's mean sequence (ops/attention._cuda_backward),
else Triton's. CPU tensors without ``TRITON_INTERPRET=1`` take the reference formula (correct, slow).

Checks: shapes, dtypes, devices and the cu_seqlens' dtype and length raise naming the argument; their values (0
first, nondecreasing, the totals last, no sequence longer than max_seqlen) are checked with one device-to-host read
unless ``validate=False`` - once per offsets tensor: the other layers of a step, passing the same unmodified
tensors, skip it (``_checks.CheckedValues``) - and skipped while a CUDA graph is captured or torch.compile traces.
Unchecked offsets that break those rules can make the kernels read and write outside q / k / v / out: pass
``validate=False`` only for cu_seqlens built by code you trust.
"""
from __future__ import annotations

from typing import Optional

import torch

from .._codes import Varlen
from .._env import interpreting
from ._checks import (CheckedValues, check_index_tensor, check_same_device, check_same_dtype, check_tensor,
                      values_readable)
from ._eager import call_op, register_fast_dispatch
from .attention import (HEAD_DIMS_TEXT, _band, _check_scale, _check_softcap, _check_window, _head_dim_problem,
                        _nonnegative_scale, _unit_last, _window)


def _as_bhsd(x: torch.Tensor) -> torch.Tensor:
    """(total, H, D) -> the kernels' (1, H, total, D) view (no copy)."""
    return x.unsqueeze(0).transpose(1, 2)


def _varlen(cu_q, cu_k, max_q: int, max_k: int):
    """The kernels' ``Varlen`` (both backends'): they read cu_seqlens as dense arrays (a strided view is copied)."""
    return Varlen(cu_q.contiguous(), cu_k.contiguous(), int(max_q), int(max_k))


def _use_kernels(q: torch.Tensor) -> bool:
    return q.is_cuda or interpreting()


@torch.library.custom_op("tilewright::flash_attn_varlen_fwd", mutates_args=())
def varlen_fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                  cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool, scale: float,
                  softcap: float, window_left: int, window_right: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (total_q, Hq, Dv), lse (Hq, total_q)) for checked inputs (the public function checks)."""
    total_q, Hq, _ = q.shape
    out = q.new_empty((total_q, Hq, v.shape[-1]))
    lse = torch.empty((Hq, total_q), device=q.device, dtype=torch.float32)
    if not _use_kernels(q):
        from ..reference import varlen_attention_reference

        o, l_ = varlen_attention_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, softcap,
                                           _window(window_left, window_right))
        out.copy_(o)
        lse.copy_(l_)
        return out, lse
    from ..triton_kernels.attention import attention_forward

    upper, offset, window_offset = _band(0, 0, causal, True, window_left, window_right)
    qk, scale, _ = _nonnegative_scale(_unit_last(q), scale)
    k_in, v_in = _unit_last(k), _unit_last(v)
    rows = _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    if q.is_cuda and v.shape[-1] == q.shape[-1]:
        from ..cuda_fallback import attention_sm90

        if attention_sm90.varlen_route(qk, k_in, v_in, rows.cu_q, rows.max_q, rows.max_k)[0] and \
                attention_sm90.try_launch_varlen(qk, k_in, v_in, out, lse, rows.cu_q, rows.cu_k, rows.max_q,
                                                 rows.max_k, upper, scale, causal_offset=offset,
                                                 window_offset=window_offset, softcap=softcap):
            return out, lse
    attention_forward(_as_bhsd(qk), _as_bhsd(k_in), _as_bhsd(v_in), _as_bhsd(out), lse[None],
                      upper, scale, causal_offset=offset, softcap=softcap, window_offset=window_offset, varlen=rows)
    return out, lse


@varlen_fwd_op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, softcap, window_left,
      window_right):
    total_q, Hq, _ = q.shape
    return q.new_empty((total_q, Hq, v.shape[-1])), q.new_empty((Hq, total_q), dtype=torch.float32)


@torch.library.custom_op("tilewright::flash_attn_varlen_bwd", mutates_args=())
def varlen_bwd_op(grad_out: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                  cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool, scale: float,
                  softcap: float, window_left: int, window_right: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of :func:`varlen_fwd_op` (``grad_lse``: the LSE output's gradient, or None)."""
    if not _use_kernels(q):
        return _reference_backward(grad_out, grad_lse, q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, softcap,
                                   _window(window_left, window_right))
    from ..triton_kernels.attention import attention_backward

    upper, offset, window_offset = _band(0, 0, causal, True, window_left, window_right)
    q_in, scale, flipped = _nonnegative_scale(_unit_last(q), scale)
    k_in, v_in = _unit_last(k), _unit_last(v)
    dq, dk, dv = torch.empty_like(q_in), torch.empty_like(k_in), torch.empty_like(v_in)
    dlse = None if grad_lse is None else grad_lse.float().contiguous()[None]
    rows = _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    views = [_as_bhsd(t) for t in (_unit_last(grad_out), q_in, k_in, v_in, out, dq, dk, dv)]
    g4, q4, k4, v4, o4, dq4, dk4, dv4 = views
    dkdv_launch = dq_launch = None
    if q.is_cuda and v.shape[-1] == q.shape[-1]:
        from .attention import _cuda_backward

        dkdv_launch, dq_launch, _ = _cuda_backward(g4, q4, k4, v4, lse[None], dq4, dk4, dv4, upper, scale, offset,
                                                   window_offset, softcap, "cuda", packed=rows)
    attention_backward(g4, q4, k4, v4, o4, lse[None], dq4, dk4, dv4, upper, scale, dlse=dlse,
                       causal_offset=offset, softcap=softcap, window_offset=window_offset,
                       dkdv_launch=dkdv_launch, dq_launch=dq_launch, varlen=rows)
    return (dq.neg_() if flipped else dq), dk, dv


def _reference_backward(grad_out, grad_lse, q, k, v, cu_q, cu_k, causal, scale, softcap, window):
    """The backward by the reference formulas, sequence by sequence (CPU without the interpreter)."""
    from ..reference import attention_grad_reference

    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):
        rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if cq[b + 1] == cq[b] or ck[b + 1] == ck[b]:
            continue
        bhsd = lambda x, r: x[r].transpose(0, 1)[None]  # noqa: E731
        glse = None if grad_lse is None else grad_lse[:, rq][None]
        gq, gk, gv = attention_grad_reference(bhsd(grad_out, rq), bhsd(q, rq), bhsd(k, rk), bhsd(v, rk), causal, scale,
                                              glse, True, softcap, window)
        dq[rq], dk[rk], dv[rk] = gq[0].transpose(0, 1), gk[0].transpose(0, 1), gv[0].transpose(0, 1)
    return dq, dk, dv


@varlen_bwd_op.register_fake
def _(grad_out, grad_lse, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale,
      softcap, window_left, window_right):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, softcap, window_left, window_right = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
    ctx.options = (max_q, max_k, causal, scale, softcap, window_left, window_right)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv = call_op(varlen_bwd_op, grad_out, grad_lse, q, k, v, out, lse, cu_q, cu_k, *ctx.options)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None


def _no_double_backward(ctx, *grads):
    raise RuntimeError("tilewright.flash_attention_varlen: double backward is not supported (the attention backward "
                       "is a fused kernel without a derivative of its own)")


varlen_fwd_op.register_autograd(_backward, setup_context=_setup_context)
varlen_bwd_op.register_autograd(_no_double_backward)
register_fast_dispatch(varlen_fwd_op)
register_fast_dispatch(varlen_bwd_op)


def _check(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) -> None:
    """Ranks, dtypes, devices, shapes, cu_seqlens' dtype / device / length and the max lengths' types."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, dims=(3,))
    check_same_dtype("q", q, k=k, v=v)
    check_same_device("q", q, k=k, v=v)
    total_q, Hq, D = q.shape
    if k.shape[-1] != D:
        raise ValueError(f"k: head dim {k.shape[-1]} differs from q's {D}; they must be equal")
    for name, d in (("q", D), ("v", v.shape[-1])):
        problem = _head_dim_problem(d)
        if problem:
            raise ValueError(f"{name}: head dim {d} is not supported: {problem}; the op takes {HEAD_DIMS_TEXT}")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"v: shape {tuple(v.shape)} must match k's {tuple(k.shape)} in tokens and heads")
    Hkv = k.shape[1]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"k: {Hkv} kv heads do not divide q's {Hq} query heads; GQA/MQA needs Hq % Hkv == 0")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        check_index_tensor(name, cu, q.device)
        if cu.dim() != 1 or cu.shape[0] < 1:
            raise ValueError(f"{name}: expected a 1-D (batch + 1,) tensor of offsets, got shape {tuple(cu.shape)}")
    if cu_seqlens_q.shape != cu_seqlens_k.shape:
        raise ValueError(f"cu_seqlens_k: {cu_seqlens_k.shape[0] - 1} sequences but cu_seqlens_q has "
                         f"{cu_seqlens_q.shape[0] - 1}; each sequence needs its query and key offsets")
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise TypeError(f"{name}: expected an int >= 0 (the longest sequence), got {m!r}")


_checked = CheckedValues()


def _check_values(cu_q, cu_k, total_q: int, total_k: int, max_q: int, max_k: int) -> None:
    """The offsets' values: 0 first, nondecreasing, the totals last, no sequence longer than its max (one read; not
    again for the same unmodified tensors with the same totals, see ``CheckedValues``)."""
    if not values_readable(cu_q):
        return
    extra = (total_q, total_k, max_q, max_k)
    if _checked.seen((cu_q, cu_k), extra):
        return
    stats = []
    for cu in (cu_q, cu_k):
        lengths = cu[1:] - cu[:-1]
        stats += [cu[0], cu[-1], lengths.min() if lengths.numel() else cu[0] * 0,
                  lengths.max() if lengths.numel() else cu[0] * 0]
    q0, q_last, q_min, q_max, k0, k_last, k_min, k_max = torch.stack(stats).tolist()
    for name, first, last, lo, hi, total, mx, mx_name in (
            ("cu_seqlens_q", q0, q_last, q_min, q_max, total_q, max_q, "max_seqlen_q"),
            ("cu_seqlens_k", k0, k_last, k_min, k_max, total_k, max_k, "max_seqlen_k")):
        if first != 0:
            raise ValueError(f"{name}: must start at 0, starts at {first}")
        if lo < 0:
            raise ValueError(f"{name}: offsets must be nondecreasing (a sequence of length {lo} found)")
        if last != total:
            raise ValueError(f"{name}: the last offset {last} must equal the packed tensor's {total} rows")
        if hi > mx:
            raise ValueError(f"{mx_name}: {mx} is shorter than the longest sequence ({hi}); pass at least {hi}")
    _checked.add((cu_q, cu_k), extra)


def flash_attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, *, causal: bool = False,
                           scale: float | None = None, window=None, softcap: float | None = None,
                           return_lse: bool = False, validate: bool = True):
    """Attention over packed sequences of different lengths (module docstring has the full contract).

    Args:
        q: (total_q, Hq, D); k, v: (total_k, Hkv, D) / (total_k, Hkv, Dv); float16 / bfloat16 (float32 accepted,
            slower). Any strides with a unit last dim.
        cu_seqlens_q, cu_seqlens_k: int32 (batch + 1,) offsets of each sequence's first row, then the total.
        max_seqlen_q, max_seqlen_k: the longest query / key sequence (ints; an upper bound works).
        causal: causal mask, **bottom-right** aligned per sequence (flash-attn's convention).
        scale: score scale, default 1/sqrt(D).
        window: (left, right) sliding window around each query's bottom-right-aligned position; None sides unbounded.
        softcap: logit soft cap (Gemma 2), None / 0 for none.
        return_lse: also return the LSE, (Hq, total_q) fp32, natural log.
        validate: check the offsets' values with one device-to-host read (see the module docstring).
    Returns:
        out (total_q, Hq, Dv), or (out, lse).
    """
    _check(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    scale = _check_scale(scale, q.shape[-1])
    softcap = _check_softcap(softcap)
    left, right = _check_window(window, causal)
    if validate:
        _check_values(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0], max_seqlen_q, max_seqlen_k)
    out, lse = call_op(varlen_fwd_op, q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                       bool(causal), scale, softcap, left, right)
    return (out, lse) if return_lse else out
