"""DTensor sharding strategies of tilewright's custom ops, so the ops take ``torch.distributed.tensor.DTensor``
arguments (tensor parallelism, FSDP2's unsharded parameters, sequence / data parallelism).

How: ``torch.distributed.tensor.experimental.register_sharding`` gives DTensor, per op, the input placements under
which running the op on every rank's local shards is exact, and the output placements that result. DTensor
redistributes the inputs to the cheapest listed combination, runs the op locally (the kernels see plain tensors)
and wraps the outputs. The strategies are registered the first time a DTensor reaches an op (:func:`ensure`), so
``import tilewright`` does not import ``torch.distributed``.

The rules (per mesh dimension; R = Replicate, S(d) = Shard(d), P = Partial sum):

* ``gemm`` - ``act(a @ b + bias) + residual``, a (M, K), b (K, N), bias (N,), residual (R0, P, N): all R; column-
  parallel (b S(1), bias S(0), residual S(2) -> out S(1)); row-sharded a (a S(0) -> out S(0), without a residual:
  its (R0, P) row grouping does not follow a row split); K-sharded (a S(1), b S(0) -> out P) only without bias,
  activation and residual - the epilogue is not linear in the partial sums, so a fused epilogue there would be
  wrong, and DTensor then picks a strategy that all-gathers instead.
* ``flash_attn_fwd`` / ``flash_attn_bwd`` - (B, H, S, D) tensors: all R, or every q / k / v / out / grad tensor
  sharded over batch (S(0)) or over heads (S(1); GQA keeps its ratio when both head counts divide by the mesh size),
  LSE (B, H, S) alike. Never over the sequence or head dim: a row's softmax spans every key.
* ``swiglu`` / ``swiglu_backward`` - (M, 2F) / (M, F) rows: all R, or S(0) on every tensor (the gate / up halves of a
  row stay together).
* ``rotary`` - x (B, S, H, D), cos / sin (S, D/2): all R, x S(0) or S(2) with the tables R.
* ``scaled_mm`` (FP8) - as ``gemm`` without residual: all R, column-parallel (b S(1); rowwise scale_b and bias
  S(0)), rows sharded (a S(0); rowwise scale_a S(0)), K-sharded to Partial sums without a bias; per-tensor scales
  replicated.
* ``rms_norm_linear`` - x (M, K), g (K,), weight (N, K): all R; column-parallel (weight S(0), bias S(0) -> out S(1),
  rstd R); row-sharded x (x S(0) -> out S(0), rstd S(0)). Not K-sharded: the norm's sum of squares spans K.
  ``rms_norm_backward`` follows: rows sharded, all R, or (column parallel) du Partial -> dx, dg Partial.

Everything else (sequence-sharded attention, ...) has no strategy: DTensor redistributes to one that exists, or
raises naming the op and the placements. A K-sharded GEMM with an epilogue - tensor parallelism's row-parallel
output projection with the residual fused - does not reach the op as one call: ops/gemm.py runs the product alone
(:func:`k_sharded`), reduces it (:func:`reduced`) and applies the epilogue with torch ops, one all-reduce as
torch's own row-parallel linear does.
"""
from __future__ import annotations

_registered = False


def ensure(t) -> None:
    """Register the strategies once, when ``t`` (a tensor subclass reaching an op) is a DTensor."""
    global _registered
    if _registered or not is_dtensor(t):
        return
    _registered = True
    _register()


def unused_output_grad(grad, like):
    """The gradient ``grad`` of an op's second output (the GEMM's pre-activation, attention's LSE), or None where it
    is autograd's materialized zeros for an unused output of a DTensor call: autograd makes those as a plain tensor,
    while a real gradient of the output comes from the same DTensor graph as ``like`` (the main output's gradient)."""
    if grad is not None and type(grad) is not type(like) and is_dtensor(like):
        return None
    return grad


def is_dtensor(t) -> bool:
    """Whether ``t`` is a DTensor, by type name: no torch.distributed import for the plain tensors of every call."""
    return type(t).__name__ == "DTensor"


def k_sharded(a, b) -> bool:
    """Whether a GEMM's a (M, K) and b (K, N) are DTensors split over K on some mesh dimension (a Shard(1), b
    Shard(0): row-parallel), so the product is a partial sum per rank."""
    if not (is_dtensor(a) and is_dtensor(b)):
        return False
    return any(getattr(pa, "dim", None) == a.dim() - 1 and getattr(pb, "dim", None) == 0
               for pa, pb in zip(a.placements, b.placements))


def reduced(t):
    """``t`` with every Partial placement reduced (all-reduce): what an epilogue must read."""
    from torch.distributed.tensor import Partial, Replicate

    if not any(isinstance(p, Partial) for p in t.placements):
        return t
    return t.redistribute(t.device_mesh, [Replicate() if isinstance(p, Partial) else p for p in t.placements])


def replicated_like(t, like):
    """A plain tensor ``t`` (the same on every rank) as a Replicate DTensor on ``like``'s mesh."""
    from torch.distributed.tensor import DTensor, Replicate

    mesh = like.device_mesh
    return DTensor.from_local(t, mesh, [Replicate()] * mesh.ndim, run_check=False)


def _register() -> None:
    import math

    import torch
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding

    ops = torch.ops.tilewright
    R = Replicate()

    def opt(t, placement):
        """An optional tensor argument's placement: None for an absent tensor."""
        return None if t is None else placement

    @register_sharding(ops.gemm.default)
    def gemm(a, b, bias, residual, activation, out_dtype, save_preact, backend):
        rest = [None, None, None, None]
        pre = lambda p: p if save_preact else R  # the empty pre-activation (save_preact False) is replicated
        out = [([R, R], [R, R, opt(bias, R), opt(residual, R), *rest])]
        out.append(([Shard(1), pre(Shard(1))], [R, Shard(1), opt(bias, Shard(0)), opt(residual, Shard(2)), *rest]))
        if residual is None:
            out.append(([Shard(0), pre(Shard(0))], [Shard(0), R, opt(bias, R), None, *rest]))
        if bias is None and residual is None and activation is None:
            out.append(([Partial(), pre(Partial())], [Shard(1), Shard(0), None, None, *rest]))
        return out

    def attention_strategies(n_in: int, n_out: int, extra: int, optional: dict):
        """All R, batch-sharded, head-sharded: every 4-D tensor S(d), the LSE (3-D) S(d) too, absent tensors None."""
        strategies = []
        for p in (R, Shard(0), Shard(1)):
            ins = [None if i in optional and optional[i] is None else p for i in range(n_in)] + [None] * extra
            strategies.append(([p] * n_out, ins))
        return strategies

    @register_sharding(ops.flash_attn_fwd.default)
    def attn_fwd(q, k, v, causal, bottom_right, scale, softcap, backend, window_left=-1, window_right=-1):
        return attention_strategies(3, 2, 7, {})

    @register_sharding(ops.flash_attn_bwd.default)
    def attn_bwd(grad_out, grad_lse, q, k, v, out, lse, causal, bottom_right, scale, softcap, backend,
                 window_left=-1, window_right=-1):
        return attention_strategies(7, 3, 7, {1: grad_lse})

    @register_sharding(ops.swiglu.default)
    def swiglu(x, up):
        return [([R], [R, opt(up, R)]), ([Shard(0)], [Shard(0), opt(up, Shard(0))])]

    @register_sharding(ops.swiglu_backward.default)
    def swiglu_backward(dy, x, up):
        return [([R, R], [R, R, opt(up, R)]),
                ([Shard(0), Shard(0) if up is not None else R], [Shard(0), Shard(0), opt(up, Shard(0))])]

    @register_sharding(ops.rotary.default)
    def rotary(x, cos, sin, rotary_dim, backward):
        return [([R], [R, R, R, None, None]), ([Shard(0)], [Shard(0), R, R, None, None]),
                ([Shard(2)], [Shard(2), R, R, None, None])]

    @register_sharding(ops.scaled_mm.default)
    def scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, backend):
        # a scale is one per tensor (1 element: replicated) or one per row of a / column of b, which then follows
        # that dimension's sharding
        per = lambda scale, placement: placement if math.prod(getattr(scale, "shape", (1,))) > 1 else R
        rest = [None, None, None]
        out = [([R], [R, R, R, R, opt(bias, R), *rest]),
               ([Shard(1)], [R, Shard(1), R, per(scale_b, Shard(0)), opt(bias, Shard(0)), *rest]),
               ([Shard(0)], [Shard(0), R, per(scale_a, Shard(0)), R, opt(bias, R), *rest])]
        if bias is None:  # the scales multiply each rank's partial product: exact as a Partial sum, a bias is not
            out.append(([Partial()], [Shard(1), Shard(0), R, R, None, *rest]))
        return out

    @register_sharding(ops.rms_norm_linear.default)
    def rms_norm_linear(x, norm_weight, weight, bias, eps, backend):
        return [([R, R], [R, R, R, opt(bias, R), None, None]),
                ([Shard(1), R], [R, R, Shard(0), opt(bias, Shard(0)), None, None]),
                ([Shard(0), Shard(0)], [Shard(0), R, R, opt(bias, R), None, None])]

    @register_sharding(ops.rms_norm_backward.default)
    def rms_norm_backward(x, du, norm_weight, rstd, need_dx, need_dg, need_u, backend):
        # dg sums over rows: with rows sharded each rank holds a partial sum of it
        rows = lambda need: Shard(0) if need else R
        # Column parallel: du = dy @ W summed over the rank's output features is a Partial sum, and dx and dg are
        # linear in du (x, g and rstd fixed), so each rank's are its share of a Partial sum; u does not read du.
        # Without this strategy DTensor moved du to rows-sharded (all-to-all, all-gather, reduce-scatter a call).
        partial = lambda need: Partial() if need else R
        return [([R, R, R], [R, R, R, R, None, None, None, None]),
                ([rows(need_dx), partial(need_dg), rows(need_u)],
                 [Shard(0), Shard(0), R, Shard(0), None, None, None, None]),
                ([partial(need_dx), partial(need_dg), R], [R, Partial(), R, R, None, None, None, None])]
