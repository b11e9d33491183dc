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

The two layouts of tensor parallelism's projections skip DTensor's dispatch altogether
(:func:`tensor_parallel_linear`, :func:`tensor_parallel_rms_norm_linear`): a column-parallel weight (Shard(0)) with a
replicated input, or a row-parallel one (Shard(1)) with an input sharded over K, on a 1-D mesh. The op then runs on
this rank's local shards through its fast path and the result is wrapped with the placements DTensor's route would
give it - the same numbers, placements and gradients (the replicated input's gradient is declared a Partial sum, so
it is all-reduced where the input became a DTensor, as DTensor's route does) - without the 0.2-1.2 ms of host that
DTensor's dispatch of a custom op and of its backward cost per call (H200 host, torch.profiler: the GEMM 0.23 ms, the
RMSNorm-linear forward 0.53 ms, its backward 1.2 ms; a 4-layer TP=2 training step made ~100 such calls).

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


def _one_dim_shard(weight):
    """(mesh, shard dim) of a DTensor weight sharded on a 1-D mesh, else None (also with
    ``TILEWRIGHT_TP_LOCAL=0``, which sends every DTensor call through DTensor's dispatch: for A/B runs and tests)."""
    import os

    if os.environ.get("TILEWRIGHT_TP_LOCAL", "1") == "0":
        return None
    mesh = weight.device_mesh
    if mesh.ndim != 1:
        return None
    return mesh, getattr(weight.placements[0], "dim", None)


def _placement_is(t, kind: str, dim: int | None = None) -> bool:
    """Whether DTensor ``t``'s (1-D mesh) placement is Replicate ("R") or Shard(dim) ("S")."""
    p = t.placements[0]
    if kind == "R":
        return p.is_replicate()
    return p.is_shard() and p.dim % t.ndim == dim % t.ndim  # (a Shard(-1) of a hand-made spec counts as the last)


def _replicated_input(t, mesh):
    """This rank's copy of a replicated tensor (a plain one, the same on every rank, or a Replicate DTensor) for
    a local product with a column shard: its local gradient is a Partial sum, all-reduced in the backward where the
    tensor became a DTensor (by DTensor's from_local)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    if not t.requires_grad:
        return t.to_local() if is_dtensor(t) else t
    if not is_dtensor(t):
        t = DTensor.from_local(t, mesh, [Replicate()], run_check=False)
    return t.to_local(grad_placements=[Partial()])


def _local(t):
    return t.to_local() if is_dtensor(t) else t


def _wrap(out, mesh, placement, shape):
    """``out`` (this rank's part) as a DTensor of global ``shape`` (contiguous) with ``placement``."""
    import torch
    from torch.distributed.tensor import DTensor

    stride, acc = [], 1
    for n in reversed(shape):
        stride.append(acc)
        acc *= n
    return DTensor.from_local(out, mesh, [placement], run_check=False, shape=torch.Size(shape),
                              stride=tuple(reversed(stride)))


def tensor_parallel_linear(linear_fn, x, weight, bias, residual, activation, backend):
    """``linear`` of a column- or row-parallel DTensor ``weight`` on this rank's shards, or None for DTensor's route.

    Column parallel (weight Shard(0) on a 1-D mesh, bias Shard(0) or None, x replicated, no residual): out Shard(-1),
    the epilogue (bias, activation) exact per column. Row parallel (weight Shard(1), x Shard(-1)): each rank's
    product is a Partial sum; without an epilogue it is returned as such, with one the sum is all-reduced and the
    epilogue runs on the replicated result (torch ops: an epilogue on partial sums is not exact). ``linear_fn``:
    the op on plain tensors."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    got = _one_dim_shard(weight)
    if got is None:
        return None
    mesh, wdim = got
    out_shape = (*x.shape[:-1], weight.shape[0])
    if wdim == 0:
        if residual is not None or (is_dtensor(x) and not _placement_is(x, "R")) or \
                (bias is not None and not (is_dtensor(bias) and _placement_is(bias, "S", 0))):
            return None
        out = linear_fn(_replicated_input(x, mesh), weight.to_local(), _local(bias), activation=activation,
                        backend=backend)
        return _wrap(out, mesh, Shard(len(out_shape) - 1), out_shape)
    if wdim != 1 or not is_dtensor(x) or not _placement_is(x, "S", x.dim() - 1) or x.shape[-1] != weight.shape[1]:
        return None  # (a K that differs globally is DTensor's to report)
    for t in (bias, residual):
        if t is not None and is_dtensor(t) and not _placement_is(t, "R"):
            return None
    out = linear_fn(x.to_local(), weight.to_local(), backend=backend)
    partial = _wrap(out, mesh, Partial(), out_shape)
    if bias is None and residual is None and activation is None:
        return partial
    from ..reference import activation_reference

    y = partial.redistribute(mesh, [Replicate()]).to_local()
    if bias is not None:
        y = y + _local(bias)
    if activation is not None:
        y = activation_reference(y, activation)
    if residual is not None:
        y = y + _local(residual)
    return _wrap(y, mesh, Replicate(), tuple(y.shape))


def tensor_parallel_rms_norm_linear(op_fn, x, norm_weight, weight, bias, eps, backend):
    """``rms_norm_linear`` of a column-parallel DTensor ``weight`` (Shard(0) on a 1-D mesh, bias Shard(0) or None,
    x and norm_weight replicated) on this rank's shards: out Shard(-1), or None for DTensor's route. Each rank
    normalises its full copy of x (the sum of squares spans K, which is not split) and multiplies by its columns;
    the gradients of x and norm_weight are Partial sums, all-reduced where they became DTensors."""
    from torch.distributed.tensor import Shard

    got = _one_dim_shard(weight)
    if got is None or got[1] != 0:
        return None
    mesh = got[0]
    for t in (x, norm_weight):
        if is_dtensor(t) and not _placement_is(t, "R"):
            return None
    if bias is not None and not (is_dtensor(bias) and _placement_is(bias, "S", 0)):
        return None
    out = op_fn(_replicated_input(x, mesh), _replicated_input(norm_weight, mesh), weight.to_local(), _local(bias),
                eps=eps, backend=backend)
    out_shape = (*x.shape[:-1], weight.shape[0])
    return _wrap(out, mesh, Shard(len(out_shape) - 1), out_shape)


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

    def rms_norm_linear(x, norm_weight, weight, bias, eps, backend):
        return [([R, R], [R, R, R, opt(bias, R), None, None]),
                ([Shard(1), R], [R, R, Shard(0), opt(bias, Shard(0)), None, None]),
                ([Shard(0), Shard(0)], [Shard(0), R, R, opt(bias, R), None, None])]

    # (the inference op is the same computation, traced without gradients: ops/rms_norm_linear.py)
    register_sharding(ops.rms_norm_linear.default)(rms_norm_linear)
    register_sharding(ops.rms_norm_linear_inference.default)(rms_norm_linear)

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

    _hash_every_option(ops.gemm.default, ops.flash_attn_fwd.default, ops.flash_attn_bwd.default, ops.swiglu.default,
                       ops.swiglu_backward.default, ops.rotary.default, ops.scaled_mm.default,
                       ops.rms_norm_linear.default, ops.rms_norm_linear_inference.default,
                       ops.rms_norm_backward.default)


def _hash_every_option(*overloads) -> None:
    """Make DTensor's sharding cache key on every non-tensor argument of ``overloads``.

    ``register_sharding`` keys the cache (and the argument list it replays to the local op) on the tensors' specs and
    on the arguments from the first *int* one on: our ops have none, so their bools, strings and floats - an
    activation, ``need_dx``, eps - were left out, and a call differing only in them reused an earlier call's
    strategy and arguments (seen: a backward that needed dx ran with need_dx False and returned an empty dx). Every
    argument from the first non-tensor one on is now part of the key."""
    import torch
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

    def is_tensor(t) -> bool:
        if isinstance(t, torch.OptionalType):
            t = t.getElementType()
        return isinstance(t, torch.TensorType)

    propagator = DTensor._op_dispatcher.sharding_propagator
    for op in overloads:
        args = op._schema.arguments
        first = next((i for i, a in enumerate(args) if not is_tensor(a.type)), len(args))
        kwarg_names = [a.name for a in args[first:] if a.kwarg_only]
        propagator.op_to_schema_info[op] = RuntimeSchemaInfo(first, kwarg_names or None, needs_pytree=True)
