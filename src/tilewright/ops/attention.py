"""Flash attention as a torch op: ``tilewright.flash_attention`` and the SDPA drop-in
``tilewright.scaled_dot_product_attention``.

Two custom ops: ``tilewright::flash_attn_fwd`` -> (out, lse) and ``tilewright::flash_attn_bwd`` -> (dq, dk, dv);
the forward op's autograd calls the backward op, so both halves run through the router and stay opaque to
torch.compile (no graph breaks). Why ``torch.library.custom_op`` rather than ``triton_op``: see ops/gemm.py - it is
the only style that works under the interpreter, so CI tests the very registration the GPU runs.

Semantics (documented contract):
* q: (B, Hq, Sq, D), k/v: (B, Hkv, Skv, D), Hq % Hkv == 0 (GQA/MQA: query head h uses kv head h // (Hq // Hkv)).
  Any strides with a unit last dim are read in place; a tensor whose last dim is not unit-stride is copied once.
* dtypes: float16, bfloat16 (the fast path) and float32 (supported, computed with IEEE fp32 dots - correct, slow).
* head dims: every multiple of 8 from 8 to 256 (8, 16, 24, ..., 248, 256: ``SUPPORTED_HEAD_DIMS``,
  ``supported_head_dim``); any other D (not a multiple of 8, below 8 or above 256) raises a ValueError naming q.
  The Triton kernels pad D inside the kernel to a power-of-two tile of at least 16 columns (96 -> 128, 40 -> 64,
  8 -> 16; masked loads / TMA zero-fill, no padded copy of q/k/v), so a D between powers of two costs the MMA
  work of the padded width. The sm_90a CUDA forward (backend="cuda") has builds for 64, 128 and 256; a multiple of 8
  from 72 to 256 runs on the next build up (zero-filled in shared memory); D < 64 runs in Triton.
* causal=True is top-left aligned exactly like ``F.scaled_dot_product_attention(is_causal=True)``: query i sees key
  j iff j <= i, also when Sq != Skv. ``flash_attention(..., causal_align="bottom_right")`` shifts the diagonal to
  flash-attn's convention, j <= i + Skv - Sq (new queries against a longer KV cache, chunked prefill); every kernel
  (Triton and sm_90a, forward and backward) takes the shift as a runtime offset of its band mask: whole blocks inside
  the band stay unmasked, blocks outside it are skipped.
* a row with no visible key (Skv == 0, or bottom-right with Sq > Skv) gives output 0 and LSE -inf, and zero
  gradients; so does a row whose visible scores are all -inf (an infinite input), as SDPA's fused kernels give (the
  math formula's softmax would give NaN). Otherwise NaN/Inf propagate like torch: a +inf score gives LSE +inf and NaN
  outputs.
  A NaN/Inf in the value (or key) of a key a query cannot see (causal) is implementation-defined for that query, as
  in SDPA's fused kernels: keys in a loaded tile meet a zero probability (0 * NaN = NaN), keys past it are not read.
  An Inf in v gives Inf in the outputs that weigh it, or NaN where the weight underflowed to exactly 0 in fp32.
* lse: natural-log logsumexp of the scaled scores, fp32, (B, Hq, Sq); it is differentiable.
* the output has q's layout (``torch.empty_like(q)``; with a value head dim of its own, q's dim order with Dv last).
"""
from __future__ import annotations

import math
from numbers import Real
from typing import Optional

import torch

from .. import router
from .._env import capability, read_env, sm_count
from .._record import is_recording, record, tensor_signature
from ..reference import attention_grad_reference, attention_reference
from .._codes import (HEAD_DIM_MULTIPLE, MAX_HEAD_DIM, MIN_HEAD_DIM, SUPPORTED_HEAD_DIMS,  # noqa: F401
                      supported_head_dim)
from ._checks import check_backend, check_choice, check_same_device, check_same_dtype, check_tensor, unit_last
from . import _aten, _dtensor, _fast
from ._eager import call_checked, call_op, register_fast_dispatch

HEAD_DIMS_TEXT = (f"head dims that are multiples of {HEAD_DIM_MULTIPLE} from {MIN_HEAD_DIM} to {MAX_HEAD_DIM} "
                  f"({MIN_HEAD_DIM}, {2 * MIN_HEAD_DIM}, {3 * MIN_HEAD_DIM}, ..., {MAX_HEAD_DIM})")


def _head_dim_problem(d: int) -> str:
    """Why ``d`` is not a supported head dim (a clause), '' when it is."""
    if d < MIN_HEAD_DIM:
        return f"it is smaller than {MIN_HEAD_DIM}"
    if d > MAX_HEAD_DIM:
        return f"it is larger than {MAX_HEAD_DIM}"
    if d % HEAD_DIM_MULTIPLE:
        lo = d // HEAD_DIM_MULTIPLE * HEAD_DIM_MULTIPLE
        return f"it is not a multiple of {HEAD_DIM_MULTIPLE} (nearest supported: {lo} or {lo + HEAD_DIM_MULTIPLE})"
    return ""


@torch.library.custom_op("tilewright::flash_attn_fwd", mutates_args=())
def flash_attn_fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, bottom_right: bool,
                      scale: float, softcap: float, backend: Optional[str], window_left: int = -1,
                      window_right: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of softmax(scale * q k^T [causal mask]) v; inputs already checked by the public functions.
    ``bottom_right``: the causal mask's alignment (query i sees key j iff j <= i + Skv - Sq) instead of top-left.
    ``softcap`` > 0: scores ``softcap * tanh(scale * q k^T / softcap)`` (0: none). ``window_left`` /
    ``window_right`` >= 0: a sliding window (query i, at key position p, sees keys p - left .. p + right; -1:
    unbounded on that side), aligned like the causal mask.
    A call on plain CUDA tensors at a signature seen before replays its launch (``_fast.replayed_op``)."""
    return _fast.replayed_op(_op_replays, (q, k, v), ("Q", "K", "V"),
                             (causal, bottom_right, scale, softcap, backend, window_left, window_right), ("O", "LSE"),
                             lambda: _flash_attn_fwd_full(q, k, v, causal, bottom_right, scale, softcap, backend,
                                                          window_left, window_right))


_op_replays = _fast.new_cache()


def _band(Sq: int, Skv: int, causal: bool, bottom_right: bool, window_left: int, window_right: int):
    """The Triton kernels' band for a causal / window request: (upper-edge flag, its offset, the lower edge's offset
    or None). Query i sits at key position p = i + (Skv - Sq if bottom_right else 0); it sees keys j <= p (causal),
    j <= p + right and j >= p - left (window)."""
    shift = Skv - Sq if bottom_right else 0
    upper = causal or window_right >= 0
    upper_offset = shift + (0 if causal else window_right) if upper else 0
    return upper, upper_offset, (shift - window_left if window_left >= 0 else None)


def _window(window_left: int, window_right: int):
    """The reference's (left, right) window, None sides for -1."""
    if window_left < 0 and window_right < 0:
        return None
    return (window_left if window_left >= 0 else None, window_right if window_right >= 0 else None)


def _flash_attn_fwd_full(q, k, v, causal, bottom_right, scale, softcap, backend, window_left=-1, window_right=-1):
    """The forward op's full path: unit-last copies, router, launch."""
    B, Hq, Sq, _ = q.shape
    upper, offset, window_offset = _band(Sq, k.shape[2], causal, bottom_right, window_left, window_right)
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)  # the kernels assume a unit stride along D
    q, scale, _ = _nonnegative_scale(q, scale)
    out = _out_like(q, v.shape[-1])
    lse = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
    decision = router.decide("attention", q, k, v, backend=backend)
    choice = decision.backend
    if choice == "torch":
        o32, l32 = attention_reference(q.float(), k.float(), v.float(), causal, scale, bool(bottom_right), softcap,
                                       _window(window_left, window_right))
        out.copy_(o32)
        lse.copy_(l32)
        return out, lse
    value_dim = v.shape[-1] != q.shape[-1]
    if choice == "cuda" and value_dim:
        # the sm_90a forward has one head dim for q, k and v: a value head dim of its own runs in Triton
        if decision.forced:
            raise ValueError("flash_attention: backend 'cuda' was forced but the CUDA forward's value head dim must "
                             "equal the query's; use backend='triton' or let the router choose")
    elif choice == "cuda":
        # sm_90a forward, with the same band and soft cap as Triton's (same out / LSE layout, so either backward
        # follows it); it declines (False) on a launch failure and Triton serves the call.
        if decision.launch(q, k, v, out, lse, upper, scale, causal_offset=offset, window_offset=window_offset,
                           softcap=softcap):
            return out, lse
        if decision.forced:
            raise ValueError("flash_attention: backend 'cuda' was forced but the CUDA forward cannot run this call "
                             "(it is disabled after a failed launch); use backend='triton' or let the router choose")
    from ..triton_kernels.attention import attention_forward

    attention_forward(q, k, v, out, lse, upper, scale, causal_offset=offset, softcap=softcap,
                      window_offset=window_offset)
    return out, lse


@flash_attn_fwd_op.register_fake
def _(q, k, v, causal, bottom_right, scale, softcap, backend, window_left=-1, window_right=-1):
    B, Hq, Sq, _ = q.shape
    return _out_like(q, v.shape[-1]), q.new_empty((B, Hq, Sq), dtype=torch.float32)


@torch.library.custom_op("tilewright::flash_attn_bwd", mutates_args=())
def flash_attn_bwd_op(grad_out: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, causal: bool, bottom_right: bool,
                      scale: float, softcap: float, backend: Optional[str], window_left: int = -1,
                      window_right: int = -1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) given dOut (and optionally dLSE) and the forward's saved out / lse."""
    replay_key = _bwd_replay_key(grad_out, grad_lse, q, k, v, out, lse, causal, bottom_right, scale, softcap,
                                 backend, window_left, window_right)
    if replay_key is not None:
        replay = _bwd_replays.get(replay_key)
        if replay is not None:
            return replay(grad_out, q, k, v, out, lse)
    # The kernels take (B, H, S, D) strides with a unit last dim; the row statistics (lse, dlse) are read as
    # contiguous (B, H, S). Direct callers of this op (torch.ops.tilewright.flash_attn_bwd) may pass any layout.
    grad_out, q, k, v, out = (_unit_last(t) for t in (grad_out, q, k, v, out))
    lse = lse if lse.is_contiguous() else lse.contiguous()
    q, scale, flipped = _nonnegative_scale(q, scale)
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    choice = router.dispatch("attention", q, k, v, backend=backend)
    if choice == "torch":
        g = attention_grad_reference(grad_out.float(), q.float(), k.float(), v.float(), causal, scale,
                                     None if grad_lse is None else grad_lse.float(), bool(bottom_right), softcap,
                                     _window(window_left, window_right))
        for dst, src in zip((dq, dk, dv), g):
            dst.copy_(src)
        return (dq.neg_() if flipped else dq), dk, dv
    from ..triton_kernels.attention import attention_backward

    dlse = None if grad_lse is None else grad_lse.float().contiguous()
    upper, offset, window_offset = _band(q.shape[2], k.shape[2], causal, bottom_right, window_left, window_right)
    plan = _cuda_plan(grad_out, q, k, v, lse, dq, dk, dv, upper, scale, offset, window_offset, softcap, choice,
                      backend)
    dkdv_launch, dq_launch, stats = (None, None, None) if plan is None else \
        _cuda_launches(plan, grad_out, q, k, v, lse, dq, dk, dv, upper, scale)
    attention_backward(grad_out, q, k, v, out, lse, dq, dk, dv, upper, scale, dlse=dlse, causal_offset=offset,
                       softcap=softcap, window_offset=window_offset, dkdv_launch=dkdv_launch, dq_launch=dq_launch,
                       stats=stats)
    if replay_key is not None and plan is not None and dq_launch is not None:
        # the call went to the CUDA kernels with dQ in the dK / dV pass or the dQ kernel: replayable once the
        # preprocess is bound (replay_key held only for calls the lines above change nothing of: no copies, no
        # flipped scale, no dLSE)
        from ..triton_kernels.attention import bound_preprocess

        pre = bound_preprocess(grad_out, q, k, v, out, lse, dq, dk, dv, upper, scale, offset, softcap, window_offset,
                               stats)
        if pre is not None:
            _fast.store(_bwd_replays, replay_key, _BackwardReplay(plan, pre, upper, scale, lse, dq))
    return (dq.neg_() if flipped else dq), dk, dv


_bwd_replays = _fast.new_cache()


def _bwd_replay_key(grad_out, grad_lse, q, k, v, out, lse, causal, bottom_right, scale, softcap, backend,
                    window_left, window_right):
    """The backward replay's key of a call (:class:`_BackwardReplay`), or None where the full path must run: a
    traced call, tensors that are not plain CUDA tensors, the interpreter (``_fast.eligible``), an LSE gradient, a
    scale that is not positive, or an input the full path would copy (a non-unit last stride, a non-contiguous
    lse). The key holds everything the full path reads besides the addresses: the tensors' signatures, the options,
    the deterministic-algorithms flag, the CUDA backward's switches and ``_fast.state()`` (the router's and the
    records' switches, the tuning cache generation, the router's and readiness epochs, a forced backend, the
    current device)."""
    if grad_lse is not None or type(scale) is not float or not scale > 0 or \
            not _fast.eligible(grad_out, q, k, v, out, lse):
        return None
    if grad_out.stride(-1) != 1 or q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1 or \
            out.stride(-1) != 1 or not lse.is_contiguous():
        return None
    sig = _fast.sig
    return (sig(grad_out), sig(q), sig(k), sig(v), sig(out), sig(lse), causal, bottom_right, scale, softcap, backend,
            window_left, window_right, torch.are_deterministic_algorithms_enabled(), _cuda_bwd_switches(),
            _fast.state())


class _BackwardReplay:
    """The CUDA backward of one call signature with its decisions made: the router's pick, the
    :class:`_CudaPlan` and the bound preprocess. A call allocates dq / dk / dv, delta and the packed statistics, and
    makes the launches :func:`attention_backward` makes for it on its bound path: the preprocess, then the plan's
    dK / dV (and dQ) launches.

    Why: the backward's Python path - the router, the plan's lookup, the Triton driver's own signature check - re-
    derived per call what the first call at a signature knew, with three signature passes over up to eleven tensors;
    on the device's host that made a small step's fwd + bwd 2-3x cuDNN's host time (perf/LOG.md, session 27)."""

    __slots__ = ("_plan", "_pre", "_causal", "_scale", "_delta_shape", "_acc_layout")

    def __init__(self, plan, pre, causal: bool, scale: float, lse, dq):
        self._plan, self._pre, self._causal, self._scale = plan, pre, causal, scale
        self._delta_shape = tuple(lse.shape)
        self._acc_layout = _dense_layout(dq)  # (dq is empty_like(q): the same layout every call)

    def __call__(self, grad_out, q, k, v, out, lse):
        dq = torch.empty_like(q)
        dk = torch.empty_like(k)
        dv = torch.empty_like(v)
        delta = torch.empty(self._delta_shape, device=q.device, dtype=torch.float32)
        dkdv_launch, dq_launch, stats = _cuda_launches(self._plan, grad_out, q, k, v, lse, dq, dk, dv, self._causal,
                                                       self._scale, acc_layout=self._acc_layout)
        self._pre(out.data_ptr(), grad_out.data_ptr(), delta.data_ptr(), delta.data_ptr(), lse.data_ptr(),
                  stats.data_ptr())
        dkdv_launch(delta)
        dq_launch(delta)
        if is_recording():
            record(None, {})  # as attention_backward reports: not an op's single replayable launch
        return dq, dk, dv


# (signature, options, switches) of a backward call -> (variant, dQ mode) of the CUDA kernels, or None (Triton's):
# the constraints, capability and environment checks run once per signature, not per call.
_cuda_plans: dict = {}
_CUDA_PLANS_MAX = 1024
_cuda_bwd_env: tuple | None = None  # attention_bwd_sm90.PLAN_SWITCHES and their bytes, for read_env


def _cuda_bwd_switches() -> tuple:
    """The values of the switches a CUDA backward plan depends on (attention_bwd_sm90.PLAN_SWITCHES; the kernel
    module is imported on first use, as everywhere in this layer)."""
    global _cuda_bwd_env
    if _cuda_bwd_env is None:
        from ..cuda_fallback import attention_bwd_sm90 as cb

        _cuda_bwd_env = (cb.PLAN_SWITCHES, tuple(n.encode() for n in cb.PLAN_SWITCHES))
    return read_env(*_cuda_bwd_env)


def _cuda_backward(grad_out, q, k, v, lse, dq, dk, dv, causal, scale, offset, window_offset, softcap, choice,
                   backend=None, packed=None):
    """The sm_90a backward kernels as the Triton backward's ``(dkdv_launch, dq_launch, stats)`` where they take the
    call and :func:`attention_bwd_sm90.enabled` says they win (``TILEWRIGHT_CUDA_ATTN_BWD`` overrides); (None, None,
    None) - Triton's kernels - otherwise, and always when the caller asked for ``backend="triton"``. ``stats``: the
    buffer the Triton preprocess fills with the dK / dV kernel's packed row statistics (dense calls; None for packed
    batches, whose kernel reads lse and delta itself), which ``dkdv_launch`` then reads. dQ per
    :func:`attention_bwd_sm90.dq_mode`: in the dK / dV pass (an fp32 workspace, converted into dq afterwards; the
    launch of dq is then nothing), the separate dQ kernel, or Triton's. ``packed``: a ``_codes.Varlen`` for a
    packed variable-length batch (ops/varlen.py; the tensors are then the (1, H,
    total, D) views, the band's offsets relative to each sequence's corner, and the measured rule is asked at the
    batch's mean lengths)."""
    plan = _cuda_plan(grad_out, q, k, v, lse, dq, dk, dv, causal, scale, offset, window_offset, softcap, choice,
                      backend, packed)
    if plan is None:
        return None, None, None
    return _cuda_launches(plan, grad_out, q, k, v, lse, dq, dk, dv, causal, scale, packed)


def _cuda_plan(grad_out, q, k, v, lse, dq, dk, dv, causal, scale, offset, window_offset, softcap, choice,
               backend=None, packed=None):
    """The :class:`_CudaPlan` of a backward call (:func:`_cuda_backward`'s arguments), or None for Triton's kernels;
    decided once per signature."""
    if choice == "torch" or backend == "triton" or not q.is_cuda or not scale > 0:
        return None
    from ..cuda_fallback import attention_bwd_sm90 as cb

    key = (_cuda_bwd_switches(), torch.are_deterministic_algorithms_enabled(), bool(causal), float(scale),
           offset, window_offset, softcap, *(tensor_signature(t) for t in (grad_out, q, k, v, lse, dq, dk, dv)),
           None if packed is None else (packed.cu_q.shape[0], packed.max_q, packed.max_k))
    plan = _cuda_plans.get(key, False)
    if plan is False:
        plan = None
        batch, sq, skv = q.shape[0], q.shape[2], k.shape[2]
        if packed is not None:  # the measured rule at the mean sequence
            batch = max(1, packed.batch)
            sq, skv = max(1, sq // batch), max(1, skv // batch)
        if (capability(q.device) or (0,))[0] == 9 and \
                cb.constraints(grad_out, q, k, v, dk, dv)[0] and \
                cb.enabled(q.shape[-1], bool(causal), batch, k.shape[1], sq, skv):
            variant, mode = cb.pick_variant(), cb.dq_mode()
            if mode == "atomic" and cb.VARIANTS[variant] != 2:
                mode = "kernel"  # dQ in the pass takes two consumer warpgroups
            if mode == "kernel" and not cb.dq_fits(dq, q):
                mode = "triton"
            group = q.shape[1] // k.shape[1]
            # the dK / dV grid: key blocks (a packed batch's: of its longest sequence) x KV heads x sequences
            rows = k.shape[2] if packed is None else packed.max_k
            ctas = -(-rows // cb.block_n(variant)) * k.shape[1] * (q.shape[0] if packed is None else packed.batch)
            heads = cb.heads_per_cta(ctas, group, sm_count(q.device), skv)
            plan = _CudaPlan(cb, variant, mode, (offset, window_offset), softcap, heads if heads < group else None)
        if len(_cuda_plans) >= _CUDA_PLANS_MAX:
            _cuda_plans.clear()
        _cuda_plans[key] = plan
    return plan


def _cuda_launches(plan, grad_out, q, k, v, lse, dq, dk, dv, causal, scale, packed=None, acc_layout=None):
    """``plan``'s ``(dkdv_launch, dq_launch, stats)`` for this call's tensors (see :func:`_cuda_backward`);
    ``acc_layout``: dq's :func:`_dense_layout` where the caller has it (the backward replay keeps it)."""
    operands = (grad_out, q, k, v, lse)
    stats = None if packed is not None else torch.empty(plan.stats_shape(lse), device=q.device, dtype=torch.float32)
    if plan.mode == "atomic":
        def dkdv_and_dq(delta):
            # the fp32 workspace in dq's dim order: dq is usually a (B, H, S, D) view of (B, S, H, D) memory, and a
            # (B, H, S, D)-contiguous workspace made the conversion a transposing copy (0.106 ms a Llama B8 x S2048
            # step, ~1.9 TB/s) where a same-order one streams
            dims, perm = acc_layout or _dense_layout(dq)
            acc = torch.zeros(dims, device=dq.device, dtype=torch.float32).permute(perm)
            plan.dkdv((*operands, delta, dk, dv), causal, scale, acc, packed, stats)
            dq.copy_(acc)

        return dkdv_and_dq, _dq_done, stats
    dkdv = lambda delta: plan.dkdv((*operands, delta, dk, dv), causal, scale, None, packed, stats)  # noqa: E731
    if plan.mode == "kernel":
        return dkdv, lambda delta: plan.dq((*operands, delta, dq), causal, scale, packed), stats
    return dkdv, None, stats


class _CudaPlan:
    """The CUDA backward of one call signature: the kernels' variant, the dQ mode, and their launches bound on
    first use (runtime.launch.BoundCudaLaunch: later calls pass addresses only; a launch that cannot be bound goes
    through the kernel module's launch each call)."""

    __slots__ = ("_cb", "variant", "mode", "band", "softcap", "heads", "_dkdv", "_dq")

    def __init__(self, cb, variant: str, mode: str, band: tuple, softcap: float, heads: int | None = None):
        self._cb, self.variant, self.mode = cb, variant, mode  # cb: the kernels' host module, attention_bwd_sm90
        self.band = band  # (causal_offset, window_offset): the mask's edges, as the Triton kernels take them
        self.softcap = softcap
        self.heads = heads  # query heads a dK / dV CTA walks when the GQA group is split (cb.heads_per_cta), else None
        self._dkdv = self._dq = None

    def stats_shape(self, lse) -> tuple:
        """The packed row statistics' buffer shape for this call's (B, H, S) lse."""
        return self._cb.statistics_shape(*lse.shape)

    def dkdv(self, tensors, causal, scale, dq_accum=None, packed=None, stats=None):
        cb = self._cb
        # a split group: fresh fp32 partials a call, added into dk / dv below (None without a split)
        partial = cb.new_partials(tensors[1], tensors[2], tensors[6], self.heads)
        if self._dkdv is None:
            self._dkdv = cb.bind_dkdv(*tensors, causal, scale, self.variant, dq_accum, self.band, self.softcap,
                                      packed, stats, self.heads, partial) or False
        if self._dkdv:
            self._dkdv(*(t.data_ptr() for t in tensors), *(() if stats is None else (stats.data_ptr(),)),
                       *(() if dq_accum is None else (dq_accum.data_ptr(),)),
                       *(() if partial is None else (partial.data_ptr(),)), *_packed_pointers(packed))
            if partial is not None:
                cb.add_partials(partial, tensors[6], tensors[7])
        else:
            cb.launch_dkdv(*tensors, causal, scale, self.variant, dq_accum=dq_accum, validate=False,
                           causal_offset=self.band[0], window_offset=self.band[1], softcap=self.softcap,
                           packed=packed, stats=stats, heads_per_cta=self.heads)

    def dq(self, tensors, causal, scale, packed=None):
        cb = self._cb
        if self._dq is None:
            self._dq = cb.bind_dq(*tensors, causal, scale, self.band, self.softcap, packed) or False
        if self._dq:
            self._dq(*(t.data_ptr() for t in tensors), *_packed_pointers(packed))
        else:
            cb.launch_dq(*tensors, causal, scale, validate=False, causal_offset=self.band[0],
                         window_offset=self.band[1], softcap=self.softcap, packed=packed)


def _packed_pointers(packed) -> tuple:
    """The bound launches' trailing cu_q / cu_k addresses (attention_bwd_sm90.PACKED_ROLES) of a packed batch."""
    return () if packed is None else (packed.cu_q.data_ptr(), packed.cu_k.data_ptr())


def _dq_done(delta) -> None:
    """dq_launch when the dK / dV pass wrote dq already."""


@flash_attn_bwd_op.register_fake
def _(grad_out, grad_lse, q, k, v, out, lse, causal, bottom_right, scale, softcap, backend, window_left=-1,
      window_right=-1):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, bottom_right, scale, softcap, backend, window_left, window_right = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal = causal
    ctx.bottom_right = bottom_right
    ctx.scale = scale
    ctx.softcap = softcap
    ctx.backend = backend
    ctx.window = (window_left, window_right)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    grad_lse = _dtensor.unused_output_grad(grad_lse, grad_out)
    dq, dk, dv = call_op(flash_attn_bwd_op, grad_out, grad_lse, q, k, v, out, lse, ctx.causal, ctx.bottom_right,
                         ctx.scale, ctx.softcap, ctx.backend, *ctx.window)
    return dq, dk, dv, None, None, None, None, None, None, None


flash_attn_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def _no_double_backward(ctx, *grads):
    raise RuntimeError("tilewright.flash_attention: double backward (a gradient of a gradient, e.g. "
                       "torch.autograd.grad(..., create_graph=True) followed by another backward) is not supported: "
                       "the attention backward is a fused kernel without a derivative of its own. For second-order "
                       "gradients use torch.nn.functional.scaled_dot_product_attention with the math backend.")


# Registered so a second backward through the attention backward stops with the message above instead of torch's
# generic "no autograd formula" error.
flash_attn_bwd_op.register_autograd(_no_double_backward)
register_fast_dispatch(flash_attn_fwd_op)
register_fast_dispatch(flash_attn_bwd_op)


def _check(q, k, v, names=("q", "k", "v")) -> None:
    nq, nk, nv = names
    for name, t in zip(names, (q, k, v)):
        check_tensor(name, t, dims=(4,))
    check_same_dtype(nq, q, **{nk: k, nv: v})
    check_same_device(nq, q, **{nk: k, nv: v})
    B, Hq, Sq, D = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"{nk}/{nv}: batch sizes {k.shape[0]}/{v.shape[0]} differ from {nq}'s {B}; expected "
                         f"{nq} (B, Hq, Sq, D) and {nk}/{nv} (B, Hkv, Skv, D)")
    if k.shape[-1] != D:
        raise ValueError(f"{nk}: head dim {k.shape[-1]} differs from {nq}'s head dim {D}; they must be equal")
    if v.shape[-1] != D and _head_dim_problem(v.shape[-1]):
        raise ValueError(f"{nv}: value head dim {v.shape[-1]} is not supported: {_head_dim_problem(v.shape[-1])}; it "
                         f"may differ from {nq}'s {D} (e.g. 128 against 192) but must itself be one of "
                         f"{HEAD_DIMS_TEXT}")
    if k.shape[1:3] != v.shape[1:3]:
        raise ValueError(f"{nv}: shape {tuple(v.shape)} must match {nk}'s {tuple(k.shape)} in heads and length")
    Hkv = k.shape[1]
    if Hkv == 0 or Hq % Hkv != 0:
        raise ValueError(f"{nk}: {Hkv} kv heads do not divide {nq}'s {Hq} query heads; GQA/MQA needs Hq % Hkv == 0")
    problem = _head_dim_problem(D)
    if problem:
        raise ValueError(f"{nq}: head dim {D} is not supported: {problem}; flash attention takes {HEAD_DIMS_TEXT} "
                         f"- q and k share it")


def _nonnegative_scale(q: torch.Tensor, scale: float):
    """(q, scale, flipped) with scale >= 0: softmax(s q k^T) = softmax(|s| (-q) k^T). The kernels take the running row
    max of the unscaled scores and scale it afterwards, which holds only for s >= 0 (a negative scale gave NaN/inf
    rows); the backward maps dq back with the same sign (d/dq of f(-q) is -f'(-q))."""
    if scale < 0:
        return -q, -scale, True
    return q, scale, False


def _check_scale(scale, head_dim: int) -> float:
    """The score scale as a float: None means 1/sqrt(head_dim); anything but a real number is a TypeError."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, Real):
        raise TypeError(f"scale: expected a float or None, got {type(scale).__name__}")
    return float(scale)


def _check_softcap(softcap) -> float:
    """The soft cap as a float, 0.0 for none (None or 0); a non-number, a negative or a non-finite cap raises."""
    if softcap is None:
        return 0.0
    if isinstance(softcap, bool) or not isinstance(softcap, Real):
        raise TypeError(f"softcap: expected a positive float or None, got {type(softcap).__name__}")
    if not (math.isfinite(softcap) and softcap >= 0):
        raise ValueError(f"softcap: expected a positive finite number (or None / 0 for no cap), got {softcap}")
    return float(softcap)


def _check_window(window, causal) -> tuple[int, int]:
    """The sliding window as the op's (left, right), -1 for an unbounded side; None is no window. A non-pair, a
    side that is neither None nor a non-negative int, or a right side other than 0 / None with ``causal`` raises."""
    if window is None:
        return -1, -1
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise TypeError(f"window: expected a (left, right) pair of ints or None, got {window!r}")
    sides = []
    for name, side in zip(("left", "right"), window):
        if side is None:
            sides.append(-1)
            continue
        if isinstance(side, bool) or not isinstance(side, int):
            raise TypeError(f"window: the {name} side must be an int >= 0 or None, got {type(side).__name__}")
        if side < 0:
            raise ValueError(f"window: the {name} side must be >= 0 (None: unbounded), got {side}")
        sides.append(int(side))
    if causal and sides[1] > 0:
        raise ValueError(f"window: with causal=True a query sees no key after its own position, so the right side "
                         f"must be 0 or None, got {sides[1]}")
    return sides[0], sides[1]


def _out_like(q: torch.Tensor, head_dim_v: int) -> torch.Tensor:
    """The attention output: q's shape with the value head dim last, in q's dim order (a (B, S, H, D) tensor's
    (B, H, S, D) view gives a (B, S, H, Dv) tensor's view, so the caller's transpose back stays free)."""
    if head_dim_v == q.shape[-1]:
        return torch.empty_like(q)
    return _dense_in_order(q, [*q.shape[:-1], head_dim_v], q.new_empty)


def _dense_in_order(t: torch.Tensor, shape, factory) -> torch.Tensor:
    """``factory(dims)`` for a tensor of ``shape`` laid out densely in ``t``'s dim order (outermost stride first),
    viewed back in ``t``'s dim order."""
    dims, perm = _dense_layout(t, shape)
    return factory(dims).permute(perm)


def _dense_layout(t: torch.Tensor, shape=None) -> tuple[list, list]:
    """(dims, perm) of :func:`_dense_in_order`: a tensor of ``shape`` (default ``t``'s) dense in ``t``'s dim order is
    ``empty(dims).permute(perm)``."""
    shape = t.shape if shape is None else shape
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), d))
    return [shape[d] for d in order], [order.index(d) for d in range(t.dim())]


_unit_last = unit_last  # the kernels assume a unit stride along D (ops/_checks.unit_last); varlen / kvcache use it


_replays = _fast.new_cache()
CAUSAL_ALIGNS = ("top_left", "bottom_right")


def _replay_key(q, k, v, causal, scale, backend, *extra):
    """The eager replay key of a forward call (ops/_fast.py), or None when it may not replay (see _fast.py; options
    of a type the full path must judge also go there). Whether autograd records is in it: the kernels' launch is
    the same either way, but the ATen route's decision is not (ops/_aten.cudnn_faster)."""
    if torch.compiler.is_compiling():
        return None  # traced: nothing replays, and reading no further keeps the machinery out of the guards (_fast)
    if not (type(causal) in _TAIL_TYPES[0] and type(scale) in _TAIL_TYPES[1] and type(backend) in _TAIL_TYPES[2]):
        return None
    return _fast.replay_key((), (q, k, v), (causal, scale, backend, *extra))


# The options of a forward key, by exact type - causal, scale, backend, then flash_attention's causal_align and
# softcap; _fast.hit makes the same test.
_TAIL_TYPES = ((bool,), (float, int, type(None)), (str, type(None)), (str,), (float, int, type(None)))


def _records_grad(q, k, v) -> bool:
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


def _replayed(replay, q, k, v, causal, scale, backend, bottom_right=False, softcap=0.0, window=(-1, -1)):
    """(out, lse) from a recorded replay: called directly, or inside the op's eager autograd.Function when autograd
    records (the forward launch is the same either way: it always writes the LSE the backward reads)."""
    if _records_grad(q, k, v):
        return call_checked(flash_attn_fwd_op, replay.impl(3), True, q, k, v, causal, bottom_right,
                            float(scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])), softcap, backend,
                            *window)
    return replay(q.device, q, k, v)


def _forward(key, q, k, v, causal: bool, scale: float, backend, bottom_right: bool = False, softcap: float = 0.0,
             window: tuple[int, int] = (-1, -1)):
    """(out, lse) of the checked forward through the op; records an eager replay under ``key`` (None: none)."""
    args = (_unit_last(q), _unit_last(k), _unit_last(v), causal, bottom_right, scale, softcap, backend, *window)
    if key is None:
        return call_op(flash_attn_fwd_op, *args)
    # The roles are checked against the caller's q, k, v - the tensors a replay receives - not against the unit-last
    # copies made above: a q/k/v copied here, or q negated for a negative scale, is at another address, so the launch
    # is not replayable (mapping it to the copy made a replay read the caller's strided tensor as if contiguous).
    return _fast.run_recorded(_replays, key, lambda: call_op(flash_attn_fwd_op, *args),
                              {"Q": (0, q), "K": (1, k), "V": (2, v)},
                              lambda result: {"O": (0, result[0]), "LSE": (1, result[1])})


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    scale: float | None = None, return_lse: bool = False, backend: str | None = None,
                    causal_align: str = "top_left", softcap: float | None = None,
                    window: tuple[int | None, int | None] | None = None):
    """Softmax attention ``softmax(scale * q @ k^T) @ v`` in one flash-attention kernel (forward and backward).

    Args:
        q, k: (B, Hq, Sq, D), (B, Hkv, Skv, D); v: (B, Hkv, Skv, Dv), with Hq % Hkv == 0 (GQA/MQA without copies).
            float16 / bfloat16 (float32 is accepted and computed in IEEE fp32, slowly). Any strides with a unit last
            dim, e.g. a (B, S, H, D) tensor ``.transpose(1, 2)``. D and Dv: multiples of 8 from 8 to 256 (others:
            ValueError); Dv may differ from D (DeepSeek MLA: 192 / 128) and then runs in Triton.
        causal: causal mask, top-left aligned by default, identical to SDPA's ``is_causal=True``: query i sees key
            j iff j <= i.
        scale: score scale (default 1/sqrt(D)).
        return_lse: also return the natural-log LSE (B, Hq, Sq) in fp32 (-inf for a row with no visible key).
        backend: None (router), "triton", "torch" or "cuda" (sm_90a forward for bf16/fp16; head dims other than
            64 / 128 / 256 run zero-padded on the next build up, in shared memory only). The backward of a
            non-"triton" call on sm_90 runs the sm_90a kernels where they take it and measured faster (head dims
            72-128, causal head dim 64; any mask, alignment, window or soft cap), Triton's otherwise;
            ``TILEWRIGHT_CUDA_ATTN_BWD=0`` / ``1`` forces that off / on. Its dQ is summed in a varying order (not
            bitwise reproducible) unless ``torch.use_deterministic_algorithms(True)`` is on. With no backend given,
            a small problem (under 2^35 FLOPs) without soft cap, window, LSE output, Dv != D or bottom-right
            alignment of Sq != Skv runs ``F.scaled_dot_product_attention`` (ops/_aten.py: host-bound sizes;
            ``TILEWRIGHT_ATEN_BELOW=0`` keeps it on the kernels); so does, at any size on sm_90 where SDPA would
            run cuDNN, a call autograd records and a forward-only call at head dim <= 64 or > 128 - cuDNN's
            kernels measured faster there (ops/_aten.cudnn_faster).
        causal_align: "top_left" (default, SDPA's convention) or "bottom_right" (flash-attn's for Sq != Skv: query
            i sees key j iff j <= i + Skv - Sq, so the last query sees every key - a chunk of new queries against a
            longer KV cache). With Sq > Skv the first Sq - Skv rows see no key: output 0, LSE -inf, zero gradients.
            Ignored without ``causal``.
        softcap: logit soft-capping (Gemma 2): scores become ``softcap * tanh(scale * q k^T / softcap)`` before the
            causal mask, forward and backward. None or 0: off; otherwise a positive finite number. The sm_90a
            kernels compute it with the MUFU tanh (relative error ~2^-11, below bf16's rounding of P).
        window: sliding-window (local) attention, ``(left, right)``: query i, at key position p (i, or
            i + Skv - Sq with ``causal_align="bottom_right"``, which aligns the window as it aligns the mask), sees
            keys p - left .. p + right; a side of None is unbounded. Mistral's window of W tokens is
            ``causal=True, window=(W - 1, 0)``; with ``causal`` the right side must be 0 or None. Key blocks
            outside the window are skipped, not masked, so the cost falls with the window. A row that sees no key
            gives output 0, LSE -inf and zero gradients.
    Returns:
        out (B, Hq, Sq, Dv) in q's dim order, or (out, lse).
    """
    key = got = None
    if window is None and not return_lse and not torch.compiler.is_compiling():
        # an eager hit in one call (ops/_fast.hit): SDPA's result on the ATen route, or the replay and its key
        got = _fast.hit(_replays, (), (q, k, v), (causal, scale, backend, causal_align, softcap), _TAIL_TYPES, False)
        if got is not None and type(got) is not tuple:
            return got
    if got is not None:
        replay, key = got
    elif type(causal_align) in _TAIL_TYPES[3] and type(softcap) in _TAIL_TYPES[4] and window is None:
        key = _replay_key(q, k, v, causal, scale, backend, causal_align, softcap)
        replay = None if key is None else _replays.get(key)
    if key is not None:
        if type(replay) is _aten.AtenAttention:
            if not return_lse:
                return replay(q, k, v)
            key = replay = None  # SDPA has no LSE output: the kernels, without replacing the ATen route
        if replay is not None:
            out, lse = _replayed(replay, q, k, v, causal, scale, backend, causal_align == "bottom_right",
                                 float(softcap or 0.0))
            return (out, lse) if return_lse else out
    _check(q, k, v)
    check_backend(backend)
    check_choice("causal_align", causal_align, CAUSAL_ALIGNS)
    scale = _check_scale(scale, q.shape[-1])
    softcap = _check_softcap(softcap)
    window = _check_window(window, bool(causal))
    if window != (-1, -1):  # (checked first: a window is a tuple or list of any ints until here)
        key = _replay_key(q, k, v, causal, scale, backend, causal_align, softcap, window)
        replay = None if key is None else _replays.get(key)
        if replay is not None:
            out, lse = _replayed(replay, q, k, v, causal, scale, backend, causal_align == "bottom_right", softcap,
                                 window)
            return (out, lse) if return_lse else out
    if not return_lse and (key is not None or _aten.compiling(q)):
        # a small eager call (decided once per signature) or one torch.compile traces: SDPA (ops/_aten.py)
        aten = _aten.attention(q, k, v, bool(causal), scale, backend, bottom_right=causal_align == "bottom_right",
                               softcap=softcap, window=window, records_grad=_records_grad(q, k, v))
        if aten is not None:
            if key is not None:
                _fast.store(_replays, key, aten)
            return aten(q, k, v)
    out, lse = _forward(key, q, k, v, bool(causal), scale, backend, causal_align == "bottom_right", softcap, window)
    return (out, lse) if return_lse else out


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention`` on (B, H, S, D) or (H, S, D) inputs.

    Supported: is_causal (top-left, same as SDPA), scale, enable_gqa (Hq % Hkv == 0). Not supported, with a
    NotImplementedError: attn_mask (use is_causal=True for a causal mask, or torch's SDPA / FlexAttention for
    arbitrary masks) and dropout_p > 0 (use torch's SDPA for attention dropout).
    """
    replay_key = None
    if attn_mask is None and type(dropout_p) is float and dropout_p == 0.0 and type(enable_gqa) is bool \
            and isinstance(query, torch.Tensor) and query.dim() == 4:
        replay_key = _replay_key(query, key, value, is_causal, scale, None, "sdpa", enable_gqa)
        if replay_key is not None:
            replay = _replays.get(replay_key)
            if type(replay) is _aten.AtenAttention:
                return replay(query, key, value)
            if replay is not None:
                return _replayed(replay, query, key, value, is_causal, scale, None)[0]
    if attn_mask is not None:
        raise NotImplementedError(
            "tilewright.scaled_dot_product_attention: attn_mask is not supported. For a causal mask pass "
            "is_causal=True; for arbitrary or padding masks use torch.nn.functional.scaled_dot_product_attention "
            "or torch.nn.attention.flex_attention.")
    if dropout_p > 0.0:
        raise NotImplementedError(
            f"tilewright.scaled_dot_product_attention: dropout_p={dropout_p} is not supported (no attention "
            "dropout); pass dropout_p=0.0 (e.g. in eval), or use torch.nn.functional.scaled_dot_product_attention "
            "when training with attention dropout.")
    squeeze = False
    if isinstance(query, torch.Tensor) and query.dim() == 3:
        if not (isinstance(key, torch.Tensor) and isinstance(value, torch.Tensor) and key.dim() == value.dim() == 3):
            raise ValueError("key/value: expected 3-D (H, S, D) like query")
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
        squeeze = True
    names = ("query", "key", "value")
    for name, t in zip(names, (query, key, value)):
        check_tensor(name, t, dims=(4,))
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(f"key: {key.shape[1]} heads differ from query's {query.shape[1]}; pass enable_gqa=True "
                         "for grouped-query attention")
    _check(query, key, value, names)
    scale = _check_scale(scale, query.shape[-1])
    if replay_key is not None or _aten.compiling(query):
        aten = _aten.attention(query, key, value, bool(is_causal), scale, None,
                               records_grad=_records_grad(query, key, value))
        if aten is not None:
            if replay_key is not None:
                _fast.store(_replays, replay_key, aten)
            out = aten(query, key, value)
            return out.squeeze(0) if squeeze else out
    out, _ = _forward(replay_key, query, key, value, bool(is_causal), scale, None)
    return out.squeeze(0) if squeeze else out
