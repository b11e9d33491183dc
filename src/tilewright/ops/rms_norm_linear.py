"""RMSNorm-fused linear as a torch op: ``tilewright.rms_norm_linear``.

``y = F.linear(F.rms_norm(x, (K,), norm_weight, eps), weight, bias)`` with the norm computed inside the GEMM's
forward kernel (triton_kernels/rmsnorm_gemm.py): one read of x, no normalised copy of x in memory - or, at the large
sizes where that fused kernel measured slower than torch's unfused pair, in two passes (:func:`_two_pass`).

Ops (``torch.library.custom_op`` for the reason given in ops/gemm.py):

* ``tilewright::rms_norm_linear(x, norm_weight, weight, bias, eps, backend) -> (y, rstd)``: 2-D core. ``rstd``
  (fp32, (M,)) is the per-row ``1/sqrt(mean(x^2) + eps)`` that the kernel computed; the backward reuses it.
* ``tilewright::rms_norm_backward(x, du, norm_weight, rstd, need_dx, need_dg, need_u, backend) -> (dx, dg, u)``:
  the norm's backward given ``du = dy @ weight``, plus ``u = rms_norm(x) * g`` for the weight gradient.

Backward (registered with ``register_autograd``), with dy (M, N):
``du = dy @ W`` (GEMM op) -> ``dx, dg, u`` (one Triton pass over x and du) -> ``dW = dy^T @ u`` (GEMM op),
``dbias = sum_m dy`` (fp32). Memory: the forward saves x, rstd (and the parameters) - less than the unfused pipeline,
which keeps the normalised (M, K) activation alive between forward and backward; the backward's (M, K) temporaries
(du, u, dx) are the ones the unfused backward has too (it holds u from the forward, and du, dx).
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
from numbers import Real
from typing import Optional

import torch

from .. import router
from .._env import interpreting
from ..reference import rms_norm_linear_reference
from ._checks import (check_backend, check_choice, check_optional_tensor, check_same_device, check_same_dtype,
                      check_tensor, contiguous_vector, dense_grad, output_view, traced_into_graph, unit_last)
from . import _aten, _dtensor, _fast
from ._eager import call_checked, call_op, register_fast_dispatch
from .gemm import gemm_op, linear, plain_gemm
from .swiglu import swiglu
from .swiglu_linear import fused_applies, fused_or_pair, fused_region, records_grad


@torch.library.custom_op("tilewright::rms_norm_linear", mutates_args=())
def rms_norm_linear_op(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                       eps: float, backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """2-D core: x (M, K), norm_weight (K,), weight (N, K), bias (N,) -> (y (M, N), rstd (M,) fp32). A call on plain
    CUDA tensors at a signature seen before replays its launch (``_fast.replayed_op``)."""
    return _fast.replayed_op(_op_replays, (x, norm_weight, weight, bias), ("a_ptr", "g_ptr", "b_ptr", "bias_ptr"),
                             (eps, backend), ("c_ptr", "rstd_ptr"),
                             lambda: _rms_norm_linear_full(x, norm_weight, weight, bias, eps, backend), _LAUNCHES)


_op_replays = _fast.new_cache()
# The two-pass forward is two recorded launches with nothing between them (the norm pass writes u and rstd, the GEMM
# reads u): both replay (ops/_fast.build). The fused forward is one.
_LAUNCHES = 2


@torch.library.custom_op("tilewright::rms_norm_linear_inference", mutates_args=())
def rms_norm_linear_inference_op(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor,
                                 bias: Optional[torch.Tensor], eps: float,
                                 backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rms_norm_linear_op` for a call autograd does not record, as torch.compile traces it (no autograd
    formula: a graph that needs gradients calls the other op). Why a second op: inside a compiled graph's call the
    op cannot tell whether gradients flow - a custom op's forward runs with grad mode off either way - so
    rms_norm_linear_op decides by the weight's requires_grad (:func:`_keeps_fold`), and a model's parameters in eval
    (requires_grad, called under no_grad) never kept the folded weight: every compiled inference call ran the two
    passes. This op tells the full path that no gradient flows (as the eager call does), so the fold is kept and
    the folded GEMM runs. Its own replay cache: a replay recorded by the other op (the two passes) would keep it off
    the fold."""
    tensors = (x, norm_weight, weight, bias)
    if not _fast.eligible(*tensors) or (x.is_cuda and torch.cuda.is_current_stream_capturing()):
        # (capture runs the two passes: a replay recorded here would keep later calls off the fold)
        with _call_records(False):
            return _rms_norm_linear_full(x, norm_weight, weight, bias, eps, backend)
    # A folded call replays as the public function's does (_FoldedReplay on the kept copy): in a compiled inference
    # graph this op is every call's path, and without it each call ran the full path - router, fold checks, launch
    # preparation - as eager calls did before their replay.
    key = (*[_fast.sig(t) for t in tensors], eps, backend, _fast.state())
    replay = _inference_replays.get(key)
    if replay is not None:
        outputs = replay(x.device, *tensors)
        if outputs is not None:  # (None: the fold went stale - the full path refolds and records again)
            return tuple(outputs)
    folded = []

    def call():
        with _call_records(False, folded):
            return _rms_norm_linear_full(x, norm_weight, weight, bias, eps, backend)

    return _fast.run_recorded(_inference_replays, key, call, lambda: _replay_roles(folded[0], *tensors),
                              _output_roles, _LAUNCHES, wrap=lambda replay: _fold_replay(replay, folded[0]))


def _replay_roles(folded, x, norm_weight, weight, bias) -> dict:
    """The recorded launch's input roles (:func:`._fast.build`): the call's tensors, or - after a folded call, whose
    GEMM read the folded copy where the weight and the norm weight would be (its g argument is the copy's first row)
    - that copy in the weight's place (:class:`_FoldedReplay`)."""
    if folded is None:
        return {"a_ptr": (0, x), "g_ptr": (1, norm_weight), "b_ptr": (2, weight), "bias_ptr": (3, bias)}
    return {"a_ptr": (0, x), "g_ptr": (2, folded), "b_ptr": (2, folded), "bias_ptr": (3, bias)}


def _output_roles(result) -> dict:
    return {"c_ptr": (0, result[0]), "rstd_ptr": (1, result[1])}


def _fold_replay(replay, folded):
    """What a replay cache keeps of a recorded call: the replay, or a :class:`_FoldedReplay` after a folded call."""
    return replay if folded is None else _FoldedReplay(replay, folded)


_inference_replays = _fast.new_cache()


def _rms_norm_linear_full(x, norm_weight, weight, bias, eps, backend):
    """The op's full path: router, launch (the torch reference for the torch backend and empty dims)."""
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    rstd = torch.empty((M,), device=x.device, dtype=torch.float32)
    # every backend's kernel reads g[k] at g_ptr + k and bias[n] at bias_ptr + n
    norm_weight, bias = contiguous_vector(norm_weight), contiguous_vector(bias)
    decision = router.decide("rms_norm_linear", x, norm_weight, weight, bias, backend=backend)
    choice = decision.backend
    if M == 0:
        return y, rstd
    if choice == "torch" or K == 0 or N == 0:
        rstd.copy_(_rstd_torch(x, eps))
        if N:
            y.copy_(rms_norm_linear_reference(x, norm_weight, weight, bias, eps))
        return y, rstd
    if two_pass_applies(decision, x, N, weight, bias):
        if _folded(x, norm_weight, weight, bias, eps, y, rstd):
            return y, rstd
        return _two_pass(x, norm_weight, weight, bias, eps, rstd)
    if choice == "cuda":
        # False: the kernel failed once (warned, now disabled): Triton serves, unless "cuda" was forced
        if decision.launch(x, norm_weight, weight, y, rstd, eps, bias=bias):
            return y, rstd
        if decision.forced:
            raise ValueError("rms_norm_linear: backend 'cuda' was forced but the CUDA kernel is disabled after a "
                             "failed launch; use backend='triton' or let the router choose")
    from ..triton_kernels.rmsnorm_gemm import launch_rmsnorm_gemm

    launch_rmsnorm_gemm(x, norm_weight, weight.t(), y, rstd, eps, bias=bias)
    return y, rstd


# The two-pass forward (below) instead of the fused CUDA kernel where the router picks that kernel; "0" keeps the fused
# kernel (A/B measurements). Read by the router's and the replays' keys through the CUDA record's env list.
TWO_PASS_ENV = "TILEWRIGHT_RMS_TWO_PASS"


TWO_PASS_MIN_FLOPS = 2.0 ** 36
# Decode rows: the fused Triton kernel ran 31.0-31.9 us at M 16-128 x 4096 x 4096 where the plain GEMM alone takes
# 15.1-16.7 and the norm pass ~2.4 (H200, perf/results/h200/gemm/decode_probe_2026-11-28.txt)
TWO_PASS_MAX_ROWS = 256


def two_pass_applies(decision, x: torch.Tensor, N: int, weight: torch.Tensor | None = None, bias=None) -> bool:
    """Whether the forward runs in two passes (:func:`_two_pass`) for this router decision: nothing forced, a CUDA
    tensor in bf16 / fp16, ``TILEWRIGHT_RMS_TWO_PASS`` not "0", and either the router picked the fused CUDA kernel
    (its measured region), or the fused Triton kernel at >= 2^36 FLOPs (H100: 3000 x 5120 x 5120 ran 1.40x a bare GEMM
    fused, 1.14x as torch's unfused pair), or at most :data:`TWO_PASS_MAX_ROWS` rows (decode), or (given ``weight``)
    the plain GEMM would go to cuBLAS
    (cublas_routes.cublas_preferred: decode and small problems): there the fused kernel's GEMM is the Triton one that
    lost to cuBLAS - 128 x 4096 x 4096 on an H200 ran 31.9 us fused where cuBLAS alone takes 16.0 and the norm pass
    ~2.5 (perf/results/h200/gemm/decode_probe_2026-11-28.txt). Other small calls keep the fused kernel. Both passes'
    launches replay (ops/_fast.py), so the second launch costs the host little."""
    if decision.forced or decision.backend not in ("cuda", "triton") or not x.is_cuda or x.dtype == torch.float32:
        return False
    if os.environ.get(TWO_PASS_ENV) == "0":
        return False
    M, K = x.shape
    if decision.backend == "cuda" or 2.0 * M * N * K >= TWO_PASS_MIN_FLOPS or M <= TWO_PASS_MAX_ROWS:
        return True
    if weight is None:
        return False
    from ..cublas_routes import cublas_preferred

    return cublas_preferred(x, weight.t(), bias)[0]


def _two_pass(x, norm_weight, weight, bias, eps, rstd):
    """``u = rms_norm(x) * g`` and rstd in one pass over x (triton_kernels/rmsnorm_gemm.launch_rmsnorm_fwd), then the
    plain GEMM ``u @ W^T + bias`` on whichever backend the router gives it (the sm_90a GEMM or cuBLAS here).

    Why, where the fused kernel would run: every fused design measured so far puts per-K-step work (the x * g
    transform, the sums of squares) in front of the tensor cores - 1.19-1.31x a bare cuBLAS GEMM on the issue's
    large rows (H100), slower than torch's own unfused pair (1.03-1.07x), whose norm costs one read and one write of
    x. This is that pair with tilewright's kernels: the same traffic, rstd saved for the backward (which is
    unchanged), and one rounding of ``x * rstd * g`` where torch rounds ``x * rstd`` and then ``* g``. Both launches
    replay: the norm pass records u as a buffer it writes, which the replay allocates for the GEMM (ops/_fast.build).
    (An x that is not unit-stride is copied first - no launch makes that copy, so such a call does not replay.)"""
    from ..triton_kernels.rmsnorm_gemm import launch_rmsnorm_fwd

    u = launch_rmsnorm_fwd(unit_last(x), norm_weight, rstd, eps)
    y = call_op(gemm_op, u, weight.t(), bias, None, None, x.dtype, False, None)[0]
    return y, rstd


@torch.library.custom_op("tilewright::rms_norm_linear_sumsq", mutates_args=())
def rms_norm_linear_sumsq_op(x: torch.Tensor, sumsq: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor,
                             bias: Optional[torch.Tensor], eps: float,
                             backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """2-D core with the rows' sums of squares given: x (M, K), sumsq (M,) fp32, norm_weight (K,), weight (N, K),
    bias (N,) -> (y (M, N), rstd (M,) fp32), ``rstd = 1 / sqrt(sumsq / K + eps)`` on every route (see
    :func:`rms_norm_linear`'s ``sumsq``)."""
    return _rms_norm_linear_sumsq_full(x, sumsq, norm_weight, weight, bias, eps, backend)


@torch.library.custom_op("tilewright::rms_norm_linear_sumsq_inference", mutates_args=())
def rms_norm_linear_sumsq_inference_op(x: torch.Tensor, sumsq: torch.Tensor, norm_weight: torch.Tensor,
                                       weight: torch.Tensor, bias: Optional[torch.Tensor], eps: float,
                                       backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rms_norm_linear_sumsq_op` for a call autograd does not record, as torch.compile traces it: the full path
    told that no gradient flows, so a weight that requires grad may keep its folded copy (the reason
    :func:`rms_norm_linear_inference_op` exists)."""
    with _call_records(False):
        return _rms_norm_linear_sumsq_full(x, sumsq, norm_weight, weight, bias, eps, backend)


def _rms_norm_linear_sumsq_full(x, sumsq, norm_weight, weight, bias, eps, backend):
    """The sums-of-squares op's body (both ops'): the route, then the launch."""
    M, K = x.shape
    N = weight.shape[0]
    norm_weight, bias, sumsq = contiguous_vector(norm_weight), contiguous_vector(bias), contiguous_vector(sumsq)
    # No router decision: its choice for the norm op is a fused kernel whose sums this call does not need (deciding
    # would also run that kernel's first-use self-check, a compile). The routes below: torch's formula off the
    # kernels' devices or when forced; the folded rstd-GEMM (forced 'cuda', or where it applies); else two passes.
    forced, source = (backend, "backend= argument") if backend is not None else router._forced()
    if forced is not None and forced not in router.BACKENDS:
        raise ValueError(f"{source}: unknown backend {forced!r}; expected one of {router.BACKENDS}")
    rstd = torch.empty((M,), device=x.device, dtype=torch.float32)
    if M == 0 or N == 0 or K == 0 or forced == "torch" or not (x.is_cuda or interpreting()):
        if forced not in (None, "torch") and not (x.is_cuda or interpreting()):
            raise ValueError(f"rms_norm_linear: backend {forced!r} was forced, but x is on {x.device}: the kernels "
                             "need a CUDA device (or TRITON_INTERPRET=1 for Triton on the CPU)")
        rstd.copy_(_rstd_of_sumsq(sumsq, K, eps))
        if M == 0 or N == 0:
            return x.new_empty((M, N)), rstd
        return _unfused_with_rstd(x, rstd, norm_weight, weight, bias), rstd
    forced_cuda = forced == "cuda"
    if forced_cuda or (forced is None and folded_applies(x, N, weight, norm_weight)):
        # The folded forward with nothing left for it to sum: the plain GEMM's mainloop, rstd from the given sums
        # in its epilogue (cuda_fallback/rstd_gemm_sm90.py) - the call costs the bare GEMM and M floats read.
        from ..cuda_fallback import rstd_gemm_sm90

        ok, why = rstd_gemm_sm90.ready(x, weight.t(), sumsq, bias)  # (the folded weight has the weight's layout)
        if ok:
            y = torch.empty((M, N), device=x.device, dtype=x.dtype)
            wg = folded_weight(weight, norm_weight, cache=_keeps_fold(weight))
            if rstd_gemm_sm90.try_launch(x, wg.t(), y, sumsq, rstd, eps, bias=bias):
                return y, rstd
            why = "the kernel is disabled after a failed launch"
        if forced_cuda:
            raise ValueError(f"rms_norm_linear: backend 'cuda' was forced with sumsq, but the sm_90a rstd-GEMM cannot "
                             f"run this call ({why}); use backend='triton' or let the router choose")
    # Two passes: u = x * rstd * g from the given sums (one read of x, one write of u, no reduction), then the plain
    # GEMM on the router's backend (or the forced Triton one).
    from ..triton_kernels.rmsnorm_gemm import launch_rmsnorm_fwd

    u = launch_rmsnorm_fwd(unit_last(x), norm_weight, rstd, eps, sumsq=sumsq)
    gemm_backend = "triton" if forced is not None else None
    return call_op(gemm_op, u, weight.t(), bias, None, None, x.dtype, False, gemm_backend)[0], rstd


def _rstd_of_sumsq(sumsq: torch.Tensor, K: int, eps: float) -> torch.Tensor:
    """``1 / sqrt(sumsq / K + eps)`` in fp32 (IEEE division and square root, as the kernels); K = 0:
    ``1 / sqrt(eps)``."""
    if K == 0:
        return torch.full(sumsq.shape, 1.0 / math.sqrt(eps), device=sumsq.device)
    return 1.0 / torch.sqrt(sumsq.float() / K + eps)


def _unfused_with_rstd(x, rstd, norm_weight, weight, bias):
    """The torch route of a call with given sums of squares: ``u = x * rstd * g`` rounded once to x's dtype (the
    two-pass kernel's numerics), then ``F.linear``."""
    u = (x.float() * rstd[:, None] * norm_weight.float()).to(x.dtype)
    return torch.nn.functional.linear(u, weight, bias)


@rms_norm_linear_sumsq_op.register_fake
def _(x, sumsq, norm_weight, weight, bias, eps, backend):
    return x.new_empty((x.shape[0], weight.shape[0])), x.new_empty((x.shape[0],), dtype=torch.float32)


rms_norm_linear_sumsq_inference_op.register_fake(_)


def _setup_context_sumsq(ctx, inputs, output):
    x, sumsq, norm_weight, weight, bias, eps, backend = inputs
    ctx.save_for_backward(x, norm_weight, weight, output[1])
    ctx.has_bias = bias is not None
    ctx.backend = backend


def _backward_sumsq(ctx, dy, _drstd):
    """The norm's backward as without given sums: dx includes rstd's dependence on x (the sums are x's own), so
    ``sumsq`` itself gets no gradient - giving it one would count that term twice."""
    need_dx, _, need_dg, need_dw, need_db = ctx.needs_input_grad[:5]
    dx, dg, dw, db = _norm_linear_grads(ctx, dy, need_dx, need_dg, need_dw, need_db)
    return dx, None, dg, dw, db, None, None


rms_norm_linear_sumsq_op.register_autograd(_backward_sumsq, setup_context=_setup_context_sumsq)
register_fast_dispatch(rms_norm_linear_sumsq_op)
register_fast_dispatch(rms_norm_linear_sumsq_inference_op)  # (no autograd: a graph without gradients calls it)


# "0": never the folded forward (A/B measurements); "nocache": fold the weight on every call instead of keeping it;
# "capture": fold inside CUDA-graph capture too (see folded_applies: the caller promises no in-place weight update
# before the graph's replays)
FOLDED_ENV = "TILEWRIGHT_RMS_FOLDED"


def _folded(x, norm_weight, weight, bias, eps, y, rstd) -> bool:
    """The folded forward where the sm_90 CUDA GEMM is the plain GEMM's choice: the norm weight folded into the
    weight once (``g * W``, rounded once, kept beside the weight: :func:`folded_weight`), then one GEMM with rstd in
    its epilogue whose producer warpgroup sums each row's squares from the x tiles already in shared memory
    (cuda_fallback/rmsnorm_gemm_sm90.FOLDED_VARIANT) - the norm costs no pass of its own. Where that build declines,
    a read-only pass for the sums of squares and the rstd GEMM (cuda_fallback/rstd_gemm_sm90.py): a read of x where
    the two passes read x, write u and read u. False (the two passes run) where neither applies."""
    if not folded_applies(x, weight.shape[0], weight, norm_weight):
        return False
    from ..cuda_fallback import rmsnorm_gemm_sm90, rstd_gemm_sm90

    # First choice: one kernel whose idle producer warps take the sums of squares from the x tiles in shared memory
    # (rmsnorm_gemm_sm90.FOLDED_VARIANT, 2-5% faster than the pass below on the measured rows); the weight's layout
    # stands in for the folded copy's in the check, so a declined call folds nothing.
    if rmsnorm_gemm_sm90.folded_ready(x, weight, bias)[0]:
        keep = _keeps_fold(weight)
        wg = folded_weight(weight, norm_weight, cache=keep)
        if rmsnorm_gemm_sm90.try_launch_folded(x, wg, y, rstd, eps, bias=bias):
            if keep and getattr(_call_state, "records", None) is False:
                _call_state.folded = wg  # the public function's replay reads the kept copy (_FoldedReplay)
            return True
    from ..triton_kernels.rmsnorm_gemm import launch_row_sumsq

    M = x.shape[0]
    sumsq = torch.empty((M,), device=x.device, dtype=torch.float32)
    if not rstd_gemm_sm90.ready(x, weight.t(), sumsq, bias)[0]:  # (the folded weight has the weight's layout)
        return False
    wg = folded_weight(weight, norm_weight, cache=_keeps_fold(weight))
    launch_row_sumsq(x, sumsq)
    return rstd_gemm_sm90.try_launch(x, wg.t(), y, sumsq, rstd, eps, bias=bias)


def folded_applies(x: torch.Tensor, N: int, weight: torch.Tensor | None = None,
                   norm_weight: torch.Tensor | None = None) -> bool:
    """Whether a two-pass call (:func:`two_pass_applies`) runs folded instead (:func:`_folded`): a unit-stride bf16
    x on an sm_90 GPU, a shape inside the plain sm_90 GEMM's measured win region (``gemm_sm90.preferred``: elsewhere
    cuBLAS runs the two passes' GEMM faster - 3000 x 5120 x 5120: 214.6 vs 199.6 us, H200), ``TILEWRIGHT_RMS_FOLDED``
    not "0", no CUDA-graph capture in progress (unless ``TILEWRIGHT_RMS_FOLDED=capture``: a graph would hold the
    folded copy and miss later in-place weight updates), and a fold that is paid once: the weight's folded copy is
    current or will be kept for the next calls (:func:`_keeps_fold`: a weight that does not train - inference,
    frozen weights). A training step would fold
    every call: on traffic alone that pays where 3N < M (6NK bytes of fold against the 2MK the two passes' u costs
    more than the sum of squares), but measured (H200, fwd+bwd loops) the folded call's full Python path - it cannot
    replay, its weight operand being a copy - made those steps host-bound (0.58-1.00x eager on the five folded rows,
    three of them 0.58-0.83x, where the two passes ran 0.97-1.01x), so training keeps the two passes. Without
    ``weight`` only the first conditions are checked. (The kernel's first-use self-check can still send a call to
    the two passes.)"""
    mode = os.environ.get(FOLDED_ENV)
    if mode == "0" or not x.is_cuda or x.stride(-1) != 1 or x.dtype != torch.bfloat16:
        return False  # (fp16: g * W could overflow where torch's pipeline does not - docs/numerics_rmsnorm.md)
    if mode != "capture" and torch.cuda.is_current_stream_capturing():
        # a captured graph would read the folded copy, not the weight: an in-place weight update between replays
        # (inference engines load new weights into the same tensors) would go unseen - silently stale outputs. The
        # two passes read the weight itself.
        return False
    from ..cuda_fallback import gemm_sm90

    M, K = x.shape
    if torch.cuda.get_device_capability(x.device)[0] != 9 or not (gemm_sm90.preferred(M, N, K)[0]
                                                                  or wave_tile_folds(M, N, K)):
        return False
    return weight is None or _keeps_fold(weight) or _folded_is_current(weight, norm_weight)


def wave_tile_folds(M: int, N: int, K: int) -> bool:
    """Whether a shape outside the plain GEMM's win region (M not a multiple of 64) folds anyway: where the
    128 x 192 tile balances the waves (``gemm_sm90.pick_variant`` picks it) on whole 128-column / 64-deep tiles
    above the FLOPs floor. H200, issue 17's 3000 x 5120 x 5120 (perf/results/h200/gemm/wave_tile_ab_2026-11-29_s35.txt,
    rms_norm_linear/sumsq_handoff_2026-11-29_s35.txt): the rstd-GEMM on that tile 214.9 us against cuBLAS's 211.9,
    the two passes (norm, then cuBLAS) 223.4 against 206.0."""
    from ..cuda_fallback import gemm_sm90

    return (M >= gemm_sm90.PREFER_MIN_M and N % 128 == 0 and K % 64 == 0 and K >= gemm_sm90.PREFER_MIN_K
            and 2 * M * N * K >= gemm_sm90.PREFER_MIN_FLOPS
            and gemm_sm90.pick_variant(M, N, K).name == gemm_sm90.WAVE_VARIANT)


# Whether autograd records the public call in progress (set by rms_norm_linear around its op call; None for the op
# called directly or from a compiled graph). Inside the op it cannot be read off grad mode: a custom op's forward
# runs with grad mode off whenever autograd records it.
_call_state = threading.local()


@contextlib.contextmanager
def _call_records(records: bool, folded: list | None = None):
    """``_call_state.records`` set for the calls inside (what the full path's fold rule reads: :func:`_keeps_fold`),
    then cleared with the kept fold :func:`_folded` notes - neither outlives the call; ``folded``: a list that gets
    that note (the folded copy the call's GEMM read, else None) appended, for the caller's replay."""
    _call_state.records = records
    _call_state.folded = None
    try:
        yield
    finally:
        if folded is not None:
            folded.append(_call_state.folded)
        _call_state.records = _call_state.folded = None


def _keeps_fold(weight: torch.Tensor) -> bool:
    """Whether the folded copy is kept on the weight for the next call: not when asked not to
    (``TILEWRIGHT_RMS_FOLDED=nocache``), nor in a call autograd records (a training step: its weight changes every
    step, and its two-pass forward replays - see :func:`folded_applies`); for the op called directly, not for a
    weight that requires grad."""
    if os.environ.get(FOLDED_ENV) == "nocache":
        return False
    records = getattr(_call_state, "records", None)
    return not (records if records is not None else weight.requires_grad)


def _version(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError:  # an inference tensor keeps no version counter: it is never cached
        return None


def _fold_key(weight, norm_weight) -> tuple:
    return (weight.device, weight.data_ptr(), weight.shape, weight.stride(), weight.dtype, _version(weight),
            norm_weight.data_ptr(), norm_weight.stride(), norm_weight.dtype, _version(norm_weight))


def _kept_fold(weight, norm_weight, key: tuple | None = None) -> torch.Tensor | None:
    """The folded copy ``weight`` keeps for ``norm_weight`` (:func:`folded_weight`) while it is current - both
    tensors' addresses, layouts and version counters unchanged (``key``: their :func:`_fold_key`, if computed) - else
    None. The one test of a kept copy: the full path's, :func:`folded_weight`'s and the folded replay's."""
    held = getattr(weight, "_tilewright_folded", None)
    if held is None:
        return None
    key = key or _fold_key(weight, norm_weight)
    return held[1] if held[0] == key and None not in key else None


def _folded_is_current(weight, norm_weight) -> bool:
    if os.environ.get(FOLDED_ENV) == "nocache":
        return False  # (folded_weight ignores a kept copy then)
    return _kept_fold(weight, norm_weight) is not None


def folded_weight(weight: torch.Tensor, norm_weight: torch.Tensor, cache: bool = True) -> torch.Tensor:
    """``weight * norm_weight`` ((N, K) * (K,), computed in fp32 and rounded once to the weight's dtype), kept on the
    weight tensor while neither tensor changes: the key holds both tensors' addresses, layouts and version counters,
    which every in-place update through the tensor (optimizer steps, ``copy_``, ``load_state_dict``) advances.
    Writes through ``.data`` bypass version counters (as they bypass autograd's own checks): after such a write call
    :func:`clear_folded` or set ``TILEWRIGHT_RMS_FOLDED=nocache``. Costs one extra copy of the weight's memory.

    ``cache`` False: keep no new copy - but a current kept one is still the answer (it is ``weight * norm_weight``
    until either changes), except inside CUDA-graph capture: the graph would hold the kept copy's address, and an
    in-place update of a weight that trains would go unseen by its replays; there the product is computed in the
    graph, as before. Why: a call that may not keep a fold (a compiled graph's call on a weight that requires grad,
    :func:`_keeps_fold`) took the folded route because an earlier eager inference call had kept one
    (:func:`folded_applies`), then recomputed the product on every call - two elementwise passes over the QKV and
    gate/up weights, ~176 MB a Llama B 8 x 2k forward (~50 us at an H200's bandwidth, estimated), part of its
    compiled forward's 4% gap to eager (measured: 2.81 against 2.69 ms)."""
    key = _fold_key(weight, norm_weight)
    readable = os.environ.get(FOLDED_ENV) != "nocache" and (
        cache or not (weight.is_cuda and torch.cuda.is_current_stream_capturing()))
    held = _kept_fold(weight, norm_weight, key) if readable else None
    if held is not None:
        return held
    wg = torch.mul(weight, norm_weight)
    if cache and None not in key:
        try:
            weight._tilewright_folded = (key, wg)
        except (AttributeError, RuntimeError):  # a tensor subclass without Python attributes: no cache
            pass
    return wg


def clear_folded(weight: torch.Tensor) -> None:
    """Drop the folded copy :func:`folded_weight` keeps on ``weight`` (frees its memory; the next call folds again)."""
    if hasattr(weight, "_tilewright_folded"):
        del weight._tilewright_folded


def _rstd_torch(x: torch.Tensor, eps: float) -> torch.Tensor:
    return _rstd_of_sumsq(x.float().pow(2).sum(-1), x.shape[-1], eps)


@rms_norm_linear_op.register_fake
def _(x, norm_weight, weight, bias, eps, backend):
    return x.new_empty((x.shape[0], weight.shape[0])), x.new_empty((x.shape[0],), dtype=torch.float32)


rms_norm_linear_inference_op.register_fake(_)


@torch.library.custom_op("tilewright::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(x: torch.Tensor, du: torch.Tensor, norm_weight: torch.Tensor, rstd: torch.Tensor,
                         need_dx: bool, need_dg: bool, need_u: bool,
                         backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward of ``u = x * rstd * g`` given du: (dx, dg (fp32), u); an output not asked for is an empty tensor.

    x, du: (M, K); norm_weight: (K,); rstd: (M,) fp32 from the forward.
    """
    M, K = x.shape
    norm_weight, rstd = contiguous_vector(norm_weight), contiguous_vector(rstd)  # read as ptr + k / ptr + m
    if backend == "cuda" or (backend is None and router._forced()[0] == "cuda"):
        backend = "triton"  # the CUDA kernel is the forward only; the norm backward is Triton's
    choice = router.dispatch("rms_norm_linear", x, du, norm_weight, backend=backend)
    if choice == "torch" or M == 0 or K == 0:
        xhat = x.float() * rstd[:, None]
        g = norm_weight.float()
        dx = dg = u = None
        if need_dx:
            dug = du.float() * g
            dx = (rstd[:, None] * (dug - xhat * (dug * xhat).mean(-1, keepdim=True))).to(x.dtype)
        if need_dg:
            dg = (du.float() * xhat).sum(0)
        if need_u:
            u = (xhat * g).to(x.dtype)
    else:
        from ..triton_kernels.rmsnorm_gemm import launch_rmsnorm_bwd

        x = x if x.stride(-1) == 1 else x.contiguous()
        du = du if du.stride(-1) == 1 else du.contiguous()
        dx, u, dg = launch_rmsnorm_bwd(x, du, norm_weight, rstd, need_dx=need_dx, need_u=need_u, need_dg=need_dg)
    # outputs not asked for are distinct empty tensors (custom ops may not return aliases of each other)
    return (dx if need_dx else x.new_empty((0,)), dg if need_dg else x.new_empty((0,), dtype=torch.float32),
            u if need_u else x.new_empty((0,)))


@rms_norm_backward_op.register_fake
def _(x, du, norm_weight, rstd, need_dx, need_dg, need_u, backend):
    M, K = x.shape
    return (x.new_empty((M, K) if need_dx else (0,)),
            x.new_empty((K,) if need_dg else (0,), dtype=torch.float32),
            x.new_empty((M, K) if need_u else (0,)))


def _setup_context(ctx, inputs, output):
    x, norm_weight, weight, bias, eps, backend = inputs
    ctx.save_for_backward(x, norm_weight, weight, output[1])
    ctx.has_bias = bias is not None
    ctx.backend = backend


def _backward(ctx, dy, _drstd):
    return (*_norm_linear_grads(ctx, dy, *ctx.needs_input_grad[:4]), None, None)


def _norm_linear_grads(ctx, dy, need_dx, need_dg, need_dw, need_db):
    """(dx, dg, dW, dbias) of ``y = (x * rstd * g) @ W^T + bias`` from the tensors the forward saved (x, g, W and its
    rstd), each None where not needed - the backward of both forward ops (with and without given sums of squares)."""
    x, norm_weight, weight, rstd = ctx.saved_tensors
    need_db = need_db and ctx.has_bias
    dx = dg = dw = db = None
    dy = dense_grad(dy)
    if dy.dtype != x.dtype:  # (a no-op .to still costs a few us of host: see ops/gemm._backward)
        dy = dy.to(x.dtype)
    forced = ctx.backend is not None or router._forced()[0] is not None
    if need_dx or need_dg:
        du = plain_gemm(dy, weight, x.dtype,  # (M, N) @ (N, K)
                        router.backward_backend("gemm", ctx.backend, dy, weight, None, None) if forced else None)
    else:
        du = x.new_empty((0, x.shape[1]))
    if need_dx or need_dg or need_dw:
        dx, dg, u = call_op(rms_norm_backward_op, x, du, norm_weight, rstd, need_dx, need_dg, need_dw, ctx.backend)
        del du
        dx = dx if need_dx else None
        dg = dg.to(norm_weight.dtype) if need_dg else None
        if need_dw:
            dyt = dy.t()
            dw = plain_gemm(dyt, u, weight.dtype,  # (N, M) @ (M, K)
                            router.backward_backend("gemm", ctx.backend, dyt, u, None, None) if forced else None)
    if need_db:
        db = dy.sum(0, dtype=torch.float32).to(x.dtype)
    return dx, dg, dw, db


rms_norm_linear_op.register_autograd(_backward, setup_context=_setup_context)


def _no_double_backward(ctx, *grads):
    raise RuntimeError("tilewright.rms_norm_linear: double backward (a gradient of a gradient, e.g. "
                       "torch.autograd.grad(..., create_graph=True) followed by another backward) is not supported: "
                       "the norm's backward is a fused kernel without a derivative of its own. For second-order "
                       "gradients compute the norm unfused: tilewright.linear(F.rms_norm(x, ...), weight, bias).")


# Registered so a second backward through the norm's backward stops with the message above instead of torch's
# generic "no autograd formula" error.
rms_norm_backward_op.register_autograd(_no_double_backward)
register_fast_dispatch(rms_norm_linear_op)
register_fast_dispatch(rms_norm_linear_inference_op)
register_fast_dispatch(rms_norm_backward_op)


def _check_norm_input(x, norm_weight) -> int:
    """The checks of x (..., K) and the RMSNorm scale (K,) that rms_norm_linear and rms_norm_linears share; K."""
    check_tensor("x", x, min_dim=1)
    check_tensor("norm_weight", norm_weight, dims=(1,))
    check_same_dtype("x", x, norm_weight=norm_weight)
    check_same_device("x", x, norm_weight=norm_weight)
    K = x.shape[-1]
    if norm_weight.shape[0] != K:
        raise ValueError(f"norm_weight: expected shape ({K},) with K = x.shape[-1] = {K}, "
                         f"got {tuple(norm_weight.shape)}")
    return K


def _check_projection(x, weight, bias, weight_name: str = "weight", bias_name: str = "bias") -> None:
    """The checks of one projection's (N, K) weight and optional (N,) bias against x (..., K), errors naming them
    ``weight_name`` / ``bias_name`` (rms_norm_linears: ``weights[i]`` / ``biases[i]``)."""
    check_tensor(weight_name, weight, dims=(2,))
    check_optional_tensor(bias_name, bias)
    check_same_dtype("x", x, **{weight_name: weight})
    check_same_device("x", x, **{weight_name: weight, bias_name: bias})
    K = x.shape[-1]
    if weight.shape[1] != K:
        raise ValueError(f"{weight_name}: expected shape (N, {K}) with K = x.shape[-1] = {K}, "
                         f"got {tuple(weight.shape)}")
    if bias is not None:
        check_tensor(bias_name, bias, dims=(1,))
        check_same_dtype("x", x, **{bias_name: bias})
        if bias.shape[0] != weight.shape[0]:
            raise ValueError(f"{bias_name}: expected shape ({weight.shape[0]},) with N = {weight_name}.shape[0], "
                             f"got {tuple(bias.shape)}")


def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, Real):
        raise TypeError(f"eps: expected a positive float, got {type(eps).__name__}")
    eps = float(eps)
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps: must be a finite number > 0 (the norm divides by sqrt(mean(x^2) + eps)), got {eps}")
    return eps


_replays = _fast.new_cache()


def _replay_key(x, norm_weight, weight, bias, eps, backend):
    """The eager replay key of a call (ops/_fast.py), or None when it may not replay. Whether autograd records is
    its second-to-last entry (read as ``key[-2]``): the forward launch is the same either way (it always stores the
    rstd the backward reads), but a recorded call replays inside the op's autograd node. Whether a CUDA graph is being
    captured is in it too: a small call without autograd takes the ATen route (ops/_aten.py) except under capture."""
    if torch.compiler.is_compiling():
        return None  # traced: nothing replays, and reading no further keeps the machinery out of the guards (_fast)
    if not (type(eps) in _TAIL_TYPES[0] and type(backend) in _TAIL_TYPES[1]):
        return None
    key = _fast.replay_key((), (x, norm_weight, weight, bias), (eps, backend))
    # (x is a CUDA tensor once there is a key, unless it is None - the full path's error; _fast.hit's capture)
    return None if key is None or x is None else (_aten.capturing(x), *key)


# The options the key takes, by exact type (eps, backend); _fast.hit makes the same test.
_TAIL_TYPES = ((float,), (str, type(None)))


def _autograd_records(*tensors) -> bool:
    """Whether autograd records a call on ``tensors`` (None entries skipped)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def rms_norm_linear(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor,
                    bias: torch.Tensor | None = None, *, eps: float = 1e-6,
                    backend: str | None = None, sumsq: torch.Tensor | None = None,
                    activation: str | None = None) -> torch.Tensor:
    """``F.linear(F.rms_norm(x, (K,), norm_weight, eps), weight, bias)`` with the norm fused into the GEMM.

    Args:
        x: (..., K) float16 / bfloat16 / float32.
        norm_weight: (K,), the RMSNorm scale (``torch.nn.RMSNorm.weight``).
        weight: (N, K), the ``nn.Linear`` layout.
        bias: optional (N,).
        eps: > 0, added to the mean square (note: ``F.rms_norm``'s default ``eps=None`` means
            ``torch.finfo(x.dtype).eps``; pass that explicitly to match it).
        backend: None (router decides), "cuda" (sm_90a forward kernel, cuda_fallback/rmsnorm_gemm_sm90.py; the
            backward stays Triton), "triton" or "torch".
        sumsq: optional (...,) float32, x's rows' sums of squares ``(x.float() ** 2).sum(-1)`` where something
            upstream already has them - :func:`tilewright.linear` ``(..., residual=h, return_sumsq=True)`` returns
            them for the residual stream it writes. The norm then sums nothing: ``rstd = 1 / sqrt(sumsq / K + eps)``
            on the kernels' routes. Inference on sm_90 in bf16 (the folded forward's conditions, below) runs one
            GEMM with rstd in its epilogue, the bare GEMM's cost; elsewhere the two passes run with the pass's
            reduction skipped. A call that takes torch's own ops (the ATen route, below: small problems, training
            calls whose GEMM cuBLAS runs) does not read them - ``F.rms_norm`` sums x there, as fast. They must be
            x's own sums: the result is the norm of x only if they are. Under autograd, x's gradient includes rstd's
            dependence on x as without ``sumsq``, and ``sumsq`` gets none. Not with DTensor arguments.
        activation: None, or "swiglu": ``tilewright.swiglu`` of the projection - weight (2F, K) holds the gate's
            rows then the up's, the result is (..., F). A call autograd does not record on an H100 / H200 (bf16 /
            fp16, no bias, sumsq or backend, the GEMM's measured region) runs the norm pass and one GEMM whose
            epilogue stores ``silu(gate) * up`` alone (:func:`tilewright.swiglu_linear`); every other call runs this
            function, then ``swiglu`` - for a small call torch's ops both (``F.rms_norm``, ``F.linear``,
            ``F.silu(gate) * up``), which its repeats then run from one eager hit.
    Returns:
        (..., N) in x's dtype; differentiable in x, norm_weight, weight and bias.

    Numerics: sum of squares and rstd in fp32; the GEMM operand is ``x * norm_weight`` rounded once to x's dtype
    (exact for an all-ones norm weight) and rstd scales the fp32 accumulator, so the normalised x is never rounded to
    bf16/fp16 as it is in the unfused pipeline. fp16: the product is formed as ``x * (norm_weight * 2^-e)`` with
    ``max|norm_weight| < 2^e`` and 2^e applied to the accumulator, so it cannot overflow fp16 (where an unscaled
    ``x * norm_weight`` past 65504 would give NaN rows). See docs/numerics_rmsnorm.md.

    Two-pass forward: with no backend forced, a bf16 / fp16 call on a GPU where the router picks the fused CUDA
    kernel, or the fused Triton kernel at >= 2^36 FLOPs, at <= 256 rows (decode) or where the plain GEMM goes to
    cuBLAS (small problems), runs one pass writing ``x * rstd * g`` (rounded once) and
    rstd, then the plain GEMM on the router's backend (:func:`two_pass_applies`): the fused kernels measured
    1.19-1.40x a bare GEMM there (their per-K-step norm work sits in front of the tensor cores), the two passes
    torch's own unfused cost. ``TILEWRIGHT_RMS_TWO_PASS=0`` keeps the fused kernels. The backward is the same.

    Folded forward (:func:`folded_applies`): on sm_90, in bf16, for a call autograd does not record (inference, or
    frozen weights under no_grad) at a shape in the plain WGMMA GEMM's region, the norm weight is folded into the
    weight once - ``g * W``, kept on the weight tensor until either tensor changes (:func:`folded_weight`; memory:
    one more copy of the weight; ``TILEWRIGHT_RMS_FOLDED=nocache`` folds per call instead, ``=0`` never folds) - one
    read-only pass sums each row's squares, and the GEMM applies rstd in its epilogue: 1.02-1.06x torch eager on the
    large rows where the two passes run 0.99-1.01x (H200). Writes through ``.data`` bypass the version counters:
    call ``tilewright.clear_folded(weight)`` after them. A call captured in a CUDA graph runs the two passes (the
    graph then reads the weight itself, so in-place weight updates between replays are seen);
    ``TILEWRIGHT_RMS_FOLDED=capture`` folds there too, for graphs whose weights never change in place.

    With no backend given, a small problem (2MNK under 2^35) - eager with or without autograd, or traced by
    torch.compile - runs ``F.linear(F.rms_norm(...))`` (ops/_aten.py: host-bound sizes, torch's numerics); inside a
    CUDA-graph capture a call without autograd keeps the kernels (GPU time is what a graph replays);
    ``TILEWRIGHT_ATEN_BELOW=0`` keeps every call on the fused kernel. An eager call autograd records takes that
    route at any size where the plain GEMM goes to cuBLAS (``cublas_routes.cublas_preferred``, e.g. M not a multiple
    of 64): the op would run the same unfused pair there, under Python autograd nodes (3000 x 5120 x 5120 on an H200:
    0.73x eager's training step before).
    """
    if activation is not None:
        if activation == "swiglu" and sumsq is None and not torch.compiler.is_compiling():
            # a repeat of a small call, whose gated path ran torch's ops: those ops from one C hit
            # (_aten.AtenRmsNormSwigluLinear; the only entries _swiglu_routes holds)
            got = _fast.hit(_swiglu_routes, (), (x, norm_weight, weight, bias), (eps, backend), _TAIL_TYPES, True)
            if got is not None and type(got) is not tuple:
                return got
        check_choice("activation", activation, (None, "swiglu"))
        return _rms_norm_swiglu_linear(x, norm_weight, weight, bias, eps, backend, sumsq)
    got = None
    if sumsq is None and not torch.compiler.is_compiling():
        # an eager hit in one call (ops/_fast.hit): an ATen route's result, or the replay and its key
        got = _fast.hit(_replays, (), (x, norm_weight, weight, bias), (eps, backend), _TAIL_TYPES, True)
        if got is not None and type(got) is not tuple:
            return got
    if sumsq is not None:
        return _rms_norm_linear_sumsq(x, sumsq, norm_weight, weight, bias, eps, backend)
    if got is None and _dtensor.is_dtensor(weight):  # tensor parallelism: the rank's shards through the fast path
        out = _dtensor.tensor_parallel_rms_norm_linear(rms_norm_linear, x, norm_weight, weight, bias, eps, backend)
        if out is not None:
            return out
    if got is not None:
        replay, key = got
    else:
        key = _replay_key(x, norm_weight, weight, bias, eps, backend)
        replay = None if key is None else _replays.get(key)
    if replay is not None:
        if type(replay) is _aten.AtenRmsNormLinear:
            return replay(x, norm_weight, weight, bias)
        if key[-2]:  # autograd records
            x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
            y = call_checked(rms_norm_linear_op, replay.impl(4), True, x2, norm_weight, weight, bias, eps,
                             backend)[0]
            return output_view(y, (*x.shape[:-1], weight.shape[0]))
        outputs = replay(x.device, x, norm_weight, weight, bias)
        if outputs is not None:  # (None: a folded replay whose fold is stale - the full path below refolds)
            return output_view(outputs[0], (*x.shape[:-1], weight.shape[0]))
    K = _check_norm_input(x, norm_weight)
    _check_projection(x, weight, bias)
    check_backend(backend)
    N = weight.shape[0]
    eps = _check_eps(eps)
    if key is not None:
        # a small eager call: ATen's ops, decided once per signature (ops/_aten.py)
        aten = _aten.rms_norm_linear(x, weight, eps, backend, key[-2], bias)
        if aten is not None:
            _fast.store(_replays, key, aten)
            return aten(x, norm_weight, weight, bias)
    elif _aten.compiling(x):
        # a small call traced by torch.compile: ATen's ops in the graph
        aten = _aten.rms_norm_linear(x, weight, eps, backend, True, eager=False)
        if aten is not None:
            return aten(x, norm_weight, weight, bias)
    x2 = x.reshape(math.prod(x.shape[:-1]), K)
    folded = []  # the folded weight the call ran on (see _folded), else None

    def call():
        with _call_records(key[-2] if key is not None else _autograd_records(x, norm_weight, weight, bias), folded):
            return call_op(rms_norm_linear_op, x2, norm_weight, weight, bias, eps, backend)

    if key is None and traced_into_graph(x) and not _autograd_records(x, norm_weight, weight, bias):
        # traced without gradients: the op that carries that into the graph (rms_norm_linear_inference_op) - asked
        # of the tensor, not torch.compiler.is_compiling() alone, which torch 2.11 leaves False while AOT autograd
        # runs this function on fake tensors (the op is one node of dynamo's graph: ops/_opaque.py)
        return output_view(call_op(rms_norm_linear_inference_op, x2, norm_weight, weight, bias, eps, backend)[0],
                           (*x.shape[:-1], N))
    if key is None:
        return output_view(call()[0], (*x.shape[:-1], N))

    # one launch of the GEMM with its norm prologue; fp16's weight-scale kernel is a second launch (its g_scale is
    # no argument of the call): no replay there, nor for a strided norm weight or bias the op made contiguous
    y, _ = _fast.run_recorded(_replays, key, call, lambda: _replay_roles(folded[0], x, norm_weight, weight, bias),
                              _output_roles, _LAUNCHES, wrap=lambda replay: _fold_replay(replay, folded[0]))
    return output_view(y, (*x.shape[:-1], N))


# ------------------------------------------------------------------------------------------------ with the RMSNorm
@torch.library.custom_op("tilewright::rms_norm_swiglu_linear", mutates_args=())
def rms_norm_swiglu_linear_op(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor,
                              eps: float) -> torch.Tensor:
    """2-D core, inference only: ``swiglu(rms_norm_linear(x, norm_weight, weight))`` as the norm pass (``u = x * rstd *
    g``, rounded once: the two-pass forward's first launch) and the gated-linear GEMM on u where
    :func:`fused_applies`, else the pair of ops."""
    if x.is_cuda and fused_applies(x, weight)[0]:
        from ..triton_kernels.rmsnorm_gemm import launch_rmsnorm_fwd

        rstd = torch.empty((x.shape[0],), device=x.device, dtype=torch.float32)
        u = launch_rmsnorm_fwd(unit_last(x), contiguous_vector(norm_weight), rstd, eps)
        return fused_or_pair(u, weight)
    return swiglu(rms_norm_linear(x, norm_weight, weight, eps=eps))


@rms_norm_swiglu_linear_op.register_fake
def _(x, norm_weight, weight, eps):
    return x.new_empty((x.shape[0], weight.shape[0] // 2))


register_fast_dispatch(rms_norm_swiglu_linear_op)


# rms_norm_linear(activation="swiglu")'s ATen routes by signature (the _replays key): see _remember_aten_pair
_swiglu_routes = _fast.new_cache()


def _remember_aten_pair(x, norm_weight, weight, bias, eps, backend, h) -> None:
    """After an eager gated call ran the pair: where both of its calls took torch's ops - rms_norm_linear's ATen route
    (which that call has just stored under this very key) and ``swiglu``'s formula on h - keep the two as one route
    for the signature (:class:`_aten.AtenRmsNormSwigluLinear`), which the next call's C hit runs directly. Anything
    else (a kernel route, a call that may not replay) stores nothing and keeps the full path."""
    key = _replay_key(x, norm_weight, weight, bias, eps, backend)
    if key is None or type(_replays.get(key)) is not _aten.AtenRmsNormLinear:
        return
    if interpreting() or traced_into_graph(h) or not _aten.swiglu_formula_eager(h):
        return  # (swiglu's own test for its formula, on the tensor it was given)
    _fast.store(_swiglu_routes, key, _aten.AtenRmsNormSwigluLinear(eps, x.shape[-1]))


def _rms_norm_swiglu_linear(x, norm_weight, weight, bias, eps, backend, sumsq) -> torch.Tensor:
    """:func:`tilewright.rms_norm_linear` with ``activation="swiglu"``: ``swiglu(rms_norm_linear(...))``, the norm
    pass and one gated-linear GEMM for a call autograd does not record where that GEMM applies (no bias, sums or
    forced backend), else the two ops."""
    check_tensor("weight", weight, dims=(2,))
    if weight.shape[0] % 2:
        raise ValueError(f"weight: with activation='swiglu' its rows hold [gate; up] and must be even in number, "
                         f"got {tuple(weight.shape)}")
    if bias is not None or sumsq is not None or backend is not None or not isinstance(x, torch.Tensor) \
            or x.numel() == 0 or records_grad(x, norm_weight, weight) or _dtensor.is_dtensor(x) \
            or _dtensor.is_dtensor(weight) or not fused_region(x, weight)[0]:
        # (rms_norm_linear checks the rest; a small call keeps its routes - ATen's ops, fused under compile)
        h = rms_norm_linear(x, norm_weight, weight, bias, eps=eps, backend=backend, sumsq=sumsq)
        y = swiglu(h)
        if sumsq is None:
            _remember_aten_pair(x, norm_weight, weight, bias, eps, backend, h)
        return y
    _check_norm_input(x, norm_weight)
    _check_projection(x, weight, bias)
    eps = _check_eps(eps)
    lead = x.shape[:-1]
    y = call_op(rms_norm_swiglu_linear_op, x.reshape(math.prod(lead), x.shape[-1]), norm_weight, weight, eps)
    return output_view(y, (*lead, y.shape[-1]))


def _rms_norm_linear_sumsq(x, sumsq, norm_weight, weight, bias, eps, backend) -> torch.Tensor:
    """:func:`rms_norm_linear` with given sums of squares: checks, then the op (its full path every call: no replay;
    the calls that would take the ATen route take it without the sums)."""
    K = _check_norm_input(x, norm_weight)
    _check_projection(x, weight, bias)
    check_backend(backend)
    eps = _check_eps(eps)
    if not isinstance(sumsq, torch.Tensor):
        raise TypeError(f"sumsq: expected a torch.Tensor, got {type(sumsq).__name__}")
    if sumsq.dtype != torch.float32:
        raise TypeError(f"sumsq: expected float32 sums of squares, got {sumsq.dtype}")
    if tuple(sumsq.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"sumsq: expected shape {tuple(x.shape[:-1])} (x.shape[:-1], one sum per row of x), got "
                         f"{tuple(sumsq.shape)}")
    check_same_device("x", x, sumsq=sumsq)
    if any(_dtensor.is_dtensor(t) for t in (x, sumsq, norm_weight, weight, bias) if t is not None):
        raise ValueError("sumsq: not supported with DTensor arguments (tensor parallelism); call without it")
    # Where the call without sums takes torch's own ops (ops/_aten.py: a small problem, eager or traced, or a training
    # call whose GEMM cuBLAS runs), that route runs and F.rms_norm sums x itself: at those sizes the host is the
    # limit, and this op's Python path (no replay) would cost more than the reduction it saves. The result is the
    # same - the sums are x's own - up to the order of the fp32 additions.
    key = _replay_key(x, norm_weight, weight, bias, eps, backend)
    if key is not None:
        aten = _aten.rms_norm_linear(x, weight, eps, backend, key[-2], bias) is not None
    else:
        aten = _aten.compiling(x) and _aten.rms_norm_linear(x, weight, eps, backend, True, eager=False) is not None
    if aten:
        return rms_norm_linear(x, norm_weight, weight, bias, eps=eps, backend=backend)
    M = math.prod(x.shape[:-1])
    records = _autograd_records(x, norm_weight, weight, bias)
    # traced without gradients: the op that carries that into the graph (as rms_norm_linear's)
    op = rms_norm_linear_sumsq_inference_op if traced_into_graph(x) and not records else \
        rms_norm_linear_sumsq_op
    with _call_records(records):
        y = call_op(op, x.reshape(M, K), sumsq.reshape(M), norm_weight, weight, bias, eps, backend)[0]
    return output_view(y, (*x.shape[:-1], weight.shape[0]))


class _FoldedReplay:
    """The replay of a folded call (:func:`_folded`): the recorded launch reads the folded copy the weight keeps
    (:func:`folded_weight`), checked current on every call - the same key the full path checks: both tensors'
    addresses, layouts and version counters - and at the recorded copy's signature (alignment included). A stale
    fold returns None and the caller runs the full path, which folds again and records a new replay.

    Why: the folded call could not replay (its GEMM reads a copy, not an input), so every inference call ran the full
    path: 1.1-1.2 ms of host a Llama B8 x S2048 forward for its two norm GEMMs, with 2.4 ms of kernels (H200,
    perf/LOG.md session 28)."""

    __slots__ = ("_replay", "_fold_sig")

    def __init__(self, replay, wg: torch.Tensor):
        self._replay = replay
        self._fold_sig = _fast.sig(wg)

    def __call__(self, device, x, norm_weight, weight, bias):
        wg = _kept_fold(weight, norm_weight)
        if wg is None or _fast.sig(wg) != self._fold_sig:
            return None
        return self._replay(device, x, norm_weight, wg, bias)


def _check_sequence(name: str, items, what: str) -> None:
    """``items`` is a list or tuple (a lone tensor, generator or other iterable is a TypeError naming ``name``)."""
    if isinstance(items, torch.Tensor):
        hint = ("call tilewright.rms_norm_linear for a single projection, or pass [weight]" if name == "weights"
                else "pass one bias per weight, e.g. [bias] (None entries for weights without one)")
        raise TypeError(f"{name}: expected a list or tuple of {what}, got a single Tensor; {hint}")
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"{name}: expected a list or tuple of {what}, got {type(items).__name__}")


def rms_norm_linears(x: torch.Tensor, norm_weight: torch.Tensor, weights, biases=None, *, eps: float = 1e-6,
                     backend: str | None = None) -> tuple[torch.Tensor, ...]:
    """Several projections of one RMSNorm: ``tuple(F.linear(F.rms_norm(x, (K,), norm_weight, eps), w, b) for w, b
    in zip(weights, biases))`` - a Llama layer's separate q / k / v or gate / up weights.

    Args:
        x: (..., K) float16 / bfloat16 / float32.
        norm_weight: (K,), the RMSNorm scale shared by every projection.
        weights: a non-empty list or tuple of (N_i, K) tensors (the ``nn.Linear`` layout); each N_i of its own.
        biases: None, or a list or tuple of the same length as ``weights`` whose entries are None or (N_i,) tensors.
        eps: > 0, added to the mean square (``F.rms_norm``'s ``eps=None`` is ``torch.finfo(x.dtype).eps``; pass that
            explicitly to match it).
        backend: None (router decides), "cuda", "triton" or "torch", as in :func:`rms_norm_linear` (on the training
            route it is the projections' backend; the norm there is always torch's ``F.rms_norm``).
    Returns:
        A tuple with one (..., N_i) tensor in x's dtype per weight, in the order of ``weights``; differentiable in
        x, norm_weight, every weight and every bias.

    Routes (the values are the same expression on each; what differs is how often the norm is computed):

    * Any DTensor argument (tensor parallelism): one :func:`rms_norm_linear` call per weight, each taking the local
      route that call takes on its own (column-parallel shards through the fast path).
    * A call autograd does not record (grad mode off, or nothing requires grad - inference): one
      :func:`rms_norm_linear` call per weight. There is no norm backward to share, and each call can take the
      folded forward (:func:`folded_applies`: sm_90, bf16, the plain GEMM's region), which reads x once inside its
      GEMM with no norm pass of its own - a shared norm pass would add a read and a write of x there, not save them.
    * A call autograd records (training): ``u = F.rms_norm(x, (K,), norm_weight, eps)`` once, then
      :func:`tilewright.linear` ``(u, w, b)`` per weight. Why: per-weight :func:`rms_norm_linear` calls normalise the
      same x - and run the norm's backward - once per weight (three times for q / k / v, twice for gate / up);
      here autograd sums the projections' gradients into one du and torch's norm backward runs once. A Llama
      layer's separate q / k / v and gate / up weights (4 layers, B 2 x S 2048, H200, fwd + bwd): 18.39 -> 16.99 ms a
      step on one GPU, 34.75 -> 33.58 under FSDP2 on two (torch 15.36 / 27.88; the rest of the gap is the other
      ops' host time). Memory: u (M, K) stays saved for the backward, as in torch's unfused pipeline, where a single
      :func:`rms_norm_linear` saves x and the fp32 rstd.

    Numerics: the training route's norm is torch's ``F.rms_norm`` - the normalised x is rounded to x's dtype
    before the GEMMs, as in torch's unfused pipeline, and autograd sums the projections' contributions to du in
    x's dtype, as it does for torch's pipeline. The per-weight routes keep :func:`rms_norm_linear`'s numerics (the fused
    forward rounds ``x * norm_weight`` once and applies rstd to the fp32 accumulator; see that function).
    """
    K = _check_norm_input(x, norm_weight)
    _check_sequence("weights", weights, "(N, K) tensors")
    if not weights:
        raise ValueError("weights: expected at least one (N, K) tensor, got an empty "
                         f"{type(weights).__name__}")
    n = len(weights)
    if biases is None:
        biases = (None,) * n
    else:
        _check_sequence("biases", biases, "(N,) tensors or None")
        if len(biases) != n:
            raise ValueError(f"biases: expected {n} entries (one per weight, None for none), got {len(biases)}")
    check_backend(backend)
    for i, (w, b) in enumerate(zip(weights, biases)):
        _check_projection(x, w, b, f"weights[{i}]", f"biases[{i}]")
    eps = _check_eps(eps)
    tensors = (x, norm_weight, *weights, *(b for b in biases if b is not None))
    if any(_dtensor.is_dtensor(t) for t in tensors) or not _autograd_records(*tensors):
        # tensor parallelism: each call's local route; inference: each call may fold the norm into its GEMM
        return tuple(rms_norm_linear(x, norm_weight, w, b, eps=eps, backend=backend) for w, b in zip(weights, biases))
    # training: one norm (forward and backward) for every projection; autograd sums their du
    u = torch.nn.functional.rms_norm(x, (K,), norm_weight, eps)
    return tuple(linear(u, w, b, backend=backend) for w, b in zip(weights, biases))
