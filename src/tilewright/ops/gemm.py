"""GEMM with fused epilogue as a torch op: ``tilewright.matmul`` / ``tilewright.linear``.

One custom op, ``tilewright::gemm``, works on 2-D operands; the public functions flatten leading batch dims, bring
the residual to the (R0, P, N) form the kernel addresses (see triton_kernels/gemm.py) and check inputs.

Why ``torch.library.custom_op`` on GPU too (rather than ``triton_op``): it is the only registration style that
works under the interpreter, so the very code CI tests is what runs on the GPU, and the op stays opaque so the router
and autotuner run inside it without graph breaks. custom_op's own dispatch chain is not free (48 us a call on the H100
host): eager calls skip it (ops/_eager.call_op), and calls through the dispatcher - compiled graphs - enter a lean
autograd kernel registered per op (ops/_eager.register_fast_dispatch).
"""
from __future__ import annotations

import contextlib
import math
from typing import Optional

import torch

from .. import cublas_routes, router
from .._codes import ACTIVATIONS
from .._env import interpreting
from .._record import record
from ..reference import activation_grad_reference, activation_reference
from ._checks import (check_backend, check_choice, check_optional_tensor, check_out_dtype, check_same_device,
                      check_same_dtype, check_tensor, contiguous_vector, dense_grad, output_view)
from . import _aten, _dtensor, _fast
from ._eager import _PLAIN, call_checked, call_op, register_fast_dispatch, traced


_op_replays = _fast.new_cache()  # the op's own keys (its 2-D arguments)


@torch.library.custom_op("tilewright::gemm", mutates_args=())
def gemm_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], residual: Optional[torch.Tensor],
            activation: Optional[str], out_dtype: torch.dtype, save_preact: bool,
            backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """2-D core: returns (activation(a @ b + bias) + residual, pre-activation or an empty tensor).

    a: (M, K), b: (K, N), bias: (N,), residual: (R0, P, N) with R0 * P == M (row r reads residual[r // P, r % P]).

    A call on plain CUDA tensors at a signature seen before replays its launch (``_fast.replayed_op``).
    """
    return _fast.replayed_op(
        _op_replays, (a, b, bias, residual), ("a_ptr", "b_ptr", "bias_ptr", "res_ptr"),
        (activation, out_dtype, save_preact, backend), ("c_ptr", "preact_ptr"),
        lambda: _gemm_full(a, b, bias, residual, activation, out_dtype, save_preact, backend))


def _gemm_full(a, b, bias, residual, activation, out_dtype, save_preact, backend):
    """The op's full path: checks of the 2-D core's own, router, launch."""
    M, K = a.shape
    N = b.shape[1]
    out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    preact = torch.empty((M, N) if save_preact else (0,), device=a.device, dtype=out_dtype)
    bias = contiguous_vector(bias)  # every backend's kernel reads bias[n] at bias_ptr + n
    # what cuBLAS cannot fuse: the router hands it only GEMMs without one (cublas_routes.py)
    epilogue = activation if out_dtype == a.dtype else (activation, out_dtype)
    decision = router.decide("gemm", a, b, bias, residual, epilogue, backend=backend)
    choice = decision.backend
    if M == 0 or N == 0:
        return out, preact
    if choice == "torch" and K > 0 and out_dtype == a.dtype and residual is None and a.is_cuda:
        # cuBLAS in one call (bias through addmm's epilogue) into the op's output, then torch's activation in place
        # (or from the pre-activation output autograd keeps); replayable like a kernel launch
        roles = {"a_ptr": a, "b_ptr": b, "bias_ptr": bias, "c_ptr": out, "preact_ptr": preact if save_preact else None}
        roles = {role: t for role, t in roles.items() if t is not None}
        launch = _TorchGemm(*roles.values(), activation=activation, preact=save_preact)
        launch(*roles.values())
        record(launch, roles)
        return out, preact
    if choice == "torch" or K == 0:
        # K == 0: a @ b is all zeros; the reference gives torch's answer for the epilogue.
        z = a @ b if bias is None else a @ b + bias
        if save_preact:
            preact.copy_(z)
        res2d = None if residual is None else residual.reshape(M, N)
        out.copy_(_epilogue_torch(z, res2d, activation, out_dtype))
        return out, preact
    elif choice == "cuda":
        # False: the kernel declined (pre-activation output, mixed out dtype) or failed once (warned): Triton runs.
        if decision.launch(a, b, out, bias=bias, residual=residual, activation=activation,
                           preact=preact if save_preact else None):
            return out, preact
        if decision.forced:
            raise ValueError("gemm: backend 'cuda' was forced but the CUDA kernel cannot run this call (it does not "
                             "write the pre-activation autograd needs with an activation, nor an out_dtype other "
                             "than the inputs', and it is disabled after a failed launch); use backend='triton' or "
                             "let the router choose")
    from ..triton_kernels.gemm import launch_gemm

    launch_gemm(a, b, out, bias=bias, residual=residual, activation=ACTIVATIONS[activation],
                preact=preact if save_preact else None)
    return out, preact


class _TorchGemm:
    """The torch backend's plain GEMM (``torch.mm`` / ``torch.addmm`` into the op's output: cuBLAS) as a recorded
    launch, so an eager replay (ops/_fast.py) serves it like a kernel. It takes tensors, not addresses
    (``takes_tensors``): a replay hands over the caller's tensors at the recorded roles' addresses - possibly other
    views of them (a 3-D input, the weight rather than its transpose) - so each is first viewed with the recorded
    role's shape and strides (same address, same signature: the view is in bounds)."""

    takes_tensors = True
    __slots__ = ("_activation", "_layouts", "_preact")

    def __init__(self, *tensors, activation: str | None = None, preact: bool = False):
        # tensors as recorded: a, b, [bias,] out[, preact] - the last one the pre-activation output when ``preact``
        self._layouts = [(tuple(t.shape), t.stride()) for t in tensors]
        self._activation, self._preact = activation, preact

    def __call__(self, *tensors) -> None:
        views = [t if (tuple(t.shape), t.stride()) == layout else t.as_strided(*layout)
                 for t, layout in zip(tensors, self._layouts)]
        preact = views.pop() if self._preact else None
        out = views.pop()
        z = out if preact is None else preact
        if len(views) == 3:
            a, b, bias = views
            torch.addmm(bias, a, b, out=z)
        else:
            a, b = views
            torch.mm(a, b, out=z)
        if self._activation is not None:
            _ACTIVATE_INTO[self._activation](z, out)
        elif preact is not None:  # (the op called directly with save_preact and no activation: out = preact)
            out.copy_(z)


# torch's activations written into a given output (in place when it is the input), as the unfused
# ``F.gelu(F.linear(x, w, b))`` computes them: from the GEMM's output rounded to its dtype
_ACTIVATE_INTO = {
    "relu": lambda z, out: torch.clamp_min(z, 0, out=out),
    "gelu": lambda z, out: torch._C._nn.gelu(z, out=out),
    "gelu_tanh": lambda z, out: torch._C._nn.gelu(z, approximate="tanh", out=out),
    "silu": lambda z, out: torch._C._nn.silu(z, out=out),
}


def _epilogue_torch(z, res2d, activation, out_dtype):
    y = activation_reference(z, activation)
    if res2d is not None:
        y = y + res2d
    return y.to(out_dtype)


@gemm_op.register_fake
def _(a, b, bias, residual, activation, out_dtype, save_preact, backend):
    M, N = a.shape[0], b.shape[1]
    out = a.new_empty((M, N), dtype=out_dtype)
    preact = a.new_empty((M, N) if save_preact else (0,), dtype=out_dtype)
    return out, preact


def _setup_context(ctx, inputs, output):
    a, b, bias, residual, activation, out_dtype, save_preact, backend = inputs
    ctx.save_for_backward(a, b, output[1])
    ctx.activation = activation
    ctx.backend = backend
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.res_shape = None if residual is None else residual.shape
    ctx.res_dtype = None if residual is None else residual.dtype


def _backward(ctx, grad_out, grad_preact):
    """Gradients of ``out = act(z) + residual`` and of the ``preact = z`` output, ``z = a @ b + bias``.

    Written in differentiable ops only (this op, torch elementwise ops), so a double backward
    (``create_graph=True``) is exact: the second pass differentiates ``act'(preact)`` through the saved ``preact``
    output, whose own gradient (``grad_preact``) flows back into ``dz`` here. Ignoring it, as an earlier version did,
    dropped the second-order term of every activation but relu.
    """
    a, b, preact = ctx.saved_tensors
    grad_out = dense_grad(grad_out)
    dz = grad_out
    if ctx.activation is not None:
        if preact.numel() == 0 and grad_out.numel() > 0:
            raise RuntimeError("tilewright::gemm backward: the pre-activation was not saved; call the op with "
                               "save_preact=True when gradients are needed (tilewright.matmul does this)")
        if torch.is_grad_enabled():
            # create_graph (grad mode is on inside backward only then): the double backward differentiates this
            # formula. Autograd's chain of fp32 products through tanh / erf / sigmoid lost ~70 ulps of the second
            # derivative against torch's closed form (GPU fuzz, gelu_tanh, fp32, K = 1); float64 keeps it below
            # torch's error.
            dz = activation_grad_reference(grad_out, preact, ctx.activation, torch.float64)
        elif _fused_activation_grad_ok(grad_out, preact):
            from ..triton_kernels.activation import launch_activation_grad

            dz = launch_activation_grad(grad_out, preact, ACTIVATIONS[ctx.activation])
        else:
            dz = activation_grad_reference(grad_out, preact, ctx.activation)
    grad_preact = _dtensor.unused_output_grad(grad_preact, dz)
    if grad_preact is not None and grad_preact.numel():
        dz = dz + grad_preact
    # Each torch call costs 2-8 us of host in a backward that small steps wait on: no-op conversions are skipped, and
    # the forced-backend lookup is made once for both GEMMs when nothing is forced (the common case).
    if dz.dtype != a.dtype:
        dz = dz.to(a.dtype)
    needs = ctx.needs_input_grad
    forced = ctx.backend is not None or router._forced()[0] is not None
    da = db = dbias = dres = None
    if needs[0]:
        bt = b.t()
        da = plain_gemm(dz, bt, a.dtype, router.backward_backend("gemm", ctx.backend, dz, bt, None, None)
                        if forced else None)
    if needs[1]:
        if b.dim() == 2 and b.stride(0) == 1 and b.stride(1) != 1 and b.shape[1] > 1:
            # b is the transpose of a row-major (N, K) weight (nn.Linear's): its gradient computed as (dz^T a)^T
            # comes out in the weight's own layout, which autograd stores as is. a^T dz would be (K, N)-contiguous,
            # and accumulating it into the weight's .grad copies it transposed (two such copies a Llama-layer step,
            # torch.profiler). Same products, same reduction over M.
            dzt = dz.t()
            db = plain_gemm(dzt, a, b.dtype, router.backward_backend("gemm", ctx.backend, dzt, a, None, None)
                            if forced else None).t()
        else:
            at = a.t()
            db = plain_gemm(at, dz, b.dtype, router.backward_backend("gemm", ctx.backend, at, dz, None, None)
                            if forced else None)
    if ctx.bias_dtype is not None and needs[2]:
        dbias = dz.sum(0, dtype=torch.float32).to(ctx.bias_dtype)
    if ctx.res_shape is not None and needs[3]:
        dres = grad_out if grad_out.shape == ctx.res_shape else grad_out.reshape(ctx.res_shape)
        if dres.dtype != ctx.res_dtype:
            dres = dres.to(ctx.res_dtype)
    return da, db, dbias, dres, None, None, None, None


def _fused_activation_grad_ok(grad_out: torch.Tensor, preact: torch.Tensor) -> bool:
    """Whether the one-kernel ``grad * act'(preact)`` (triton_kernels/activation.py) takes these: one shape, both
    contiguous (the backward has made an expanded grad dense; a transposed one takes the torch formula), plain tensors
    outside any tracing
    (torch.compile's AOT backward sees fake / functional tensors and keeps the formula, which inductor fuses), on a CUDA
    device or under the interpreter."""
    return (type(grad_out) in _PLAIN and type(preact) in _PLAIN and not traced()
            and grad_out.shape == preact.shape and grad_out.is_contiguous() and preact.is_contiguous()
            and (grad_out.is_cuda or interpreting()))


gemm_op.register_autograd(_backward, setup_context=_setup_context)
register_fast_dispatch(gemm_op)

_replays = _fast.new_cache()  # public functions' (matmul / linear / plain_gemm) keys


def plain_gemm(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, backend: str | None) -> torch.Tensor:
    """``a @ b`` for 2-D operands through the op, for the backward passes (dA, dB, the norm's du and dW): an eager
    replay (ops/_fast.py) where one was recorded at this signature. Under ``create_graph`` (autograd records) it is
    the op itself, so a double backward differentiates it."""
    key = None
    if not torch.is_grad_enabled() and _fast.eligible(a, b):
        key = ("plain", _fast.sig(a), _fast.sig(b), out_dtype, backend, _fast.state())
        replay = _replays.get(key)
        if replay is not None:
            return replay(a.device, a, b)[0]

    def call():
        return call_op(gemm_op, a, b, None, None, None, out_dtype, False, backend)

    if key is None:
        return call()[0]
    return _fast.run_recorded(_replays, key, call, {"a_ptr": (0, a), "b_ptr": (1, b)},
                              lambda result: {"c_ptr": (0, result[0])})[0]


def _residual_3d(residual: torch.Tensor, out_shape: tuple[int, ...]) -> torch.Tensor:
    """Residual broadcast to the output, as an (R0, P, N) view (P = output rows per batch) - no copy when the
    broadcast dims collapse (full residual, pos_embed over the batch, a bias-like row)."""
    try:
        r = torch.broadcast_to(residual, out_shape)
    except RuntimeError:
        raise ValueError(f"residual: shape {tuple(residual.shape)} is not broadcastable to the output shape "
                         f"{tuple(out_shape)}") from None
    if len(out_shape) == 1:
        return r.reshape(1, 1, out_shape[0])
    # The batch count is spelled out: reshape(-1, ...) is ambiguous when M or N is 0.
    return r.reshape(math.prod(out_shape[:-2]), out_shape[-2], out_shape[-1])


def _needs_grad(a, b, bias, residual) -> bool:
    return torch.is_grad_enabled() and (a.requires_grad or b.requires_grad
                                        or (bias is not None and bias.requires_grad)
                                        or (residual is not None and residual.requires_grad))


def _replay_key(a, b, bias, residual, activation, out_dtype, backend, entry: str = "matmul"):
    """The eager replay key of a call (ops/_fast.py), or None when it may not replay: a tensor argument that is no
    plain CUDA tensor, tracing, or an option of a type the full path must judge. Autograd recording is in the key:
    with an activation it makes the kernel also store the pre-activation, and the replay then runs inside the op's
    eager autograd.Function."""
    if torch.compiler.is_compiling():
        return None  # traced: nothing replays, and reading no further keeps the machinery out of the guards (_fast)
    if not (type(activation) in _GEMM_TAIL_TYPES[0] and type(out_dtype) in _GEMM_TAIL_TYPES[1]
            and type(backend) in _GEMM_TAIL_TYPES[2]):
        return None
    return _fast.replay_key((entry,), (a, b, bias, residual), (activation, out_dtype, backend))


# The options a GEMM key takes, by exact type (activation, out_dtype, backend): what the full path must judge - any
# other type - never replays. _fast.hit makes the same test.
_GEMM_TAIL_TYPES = ((str, type(None)), (torch.dtype, type(None)), (str, type(None)))
_LINEAR_HEAD = ("linear",)
_MATMUL_HEAD = ("matmul",)  # (_replay_key's head for matmul's calls: its ``entry`` default)


def _gemm(a, b, bias, residual, activation, out_dtype, backend, a_name, b_name, b_shape_text, key=(),
          replay=None, weight=None):
    """matmul/linear after argument parsing; ``key``/``replay``: the caller's replay key and its hit, if it looked
    them up itself (linear keys on the weight, saving the transpose on a hit); ``weight``: linear's (N, K) weight
    (``b`` is its transpose), None for matmul."""
    if key == ():
        key = _replay_key(a, b, bias, residual, activation, out_dtype, backend)
        replay = None if key is None else _replays.get(key)
        if type(replay) is _aten.AtenGemm:
            return replay(a, b, bias, residual)
    needs_grad = key[-2] if key is not None else None
    if replay is not None and not needs_grad:
        return replay(a.device, a, b, bias, residual)[0]
    if replay is None:  # (a replayed signature passed these checks when it was recorded)
        _check_gemm(a, b, bias, residual, activation, out_dtype, backend, a_name, b_name, b_shape_text)
    N = b.shape[1]
    out_shape = (*a.shape[:-1], N)
    a2 = a.reshape(math.prod(a.shape[:-1]), a.shape[-1])
    res3 = None if residual is None else _residual_3d(residual, out_shape)
    b_given = b if weight is None else weight  # the caller's layout, as the ATen route takes it
    # a small eager call without autograd whose epilogue one launch fuses: the kernel, not cuBLAS + torch's ops
    fused = key is not None and replay is None and backend is None and \
        fused_launch_preferred(needs_grad, bias, residual, activation, *a2.shape, N)
    if key is not None and replay is None:
        # a small eager call: ATen's ops, decided once per signature (ops/_aten.py)
        aten = _aten.gemm(weight is not None, a, b_given, bias, residual, activation, out_dtype, backend, needs_grad)
        if aten is None and (residual is None or residual.dtype == a.dtype) and \
                out_dtype in (None, a.dtype) and not fused and \
                _plain_gemm_on_cublas(a2, b, contiguous_vector(bias), activation, backend):
            # a GEMM (and activation) the router gives to cuBLAS (cublas_routes.py): F.linear / matmul and torch's
            # activation themselves, whose host cost is torch's - the op's replay of it (views of the recorded
            # layout, mm with out=) measured 2x that. With autograd too (the rule rms_norm_linear's training calls
            # follow, ops/_aten._cublas_gemm): the op would run the same cuBLAS forward under a Python autograd node
            # whose backward is two more Python-dispatched GEMMs; ATen's nodes are C++. A Llama layer's q projection
            # at 4096 x 2048 x 2048 (a small problem with no measured point near: cuBLAS) is one such call a layer -
            # under FSDP2 the step is host-bound (H200: tilewright.linear's fwd + bwd cost ~0.45 ms more host than
            # F.linear's on a slow host, perf/results/h200/rms_norm_linear/host_pair_2026-11-29_1317.txt).
            # A residual GEMM whose plain GEMM cuBLAS is preferred for runs cuBLAS, then torch's add: the fused
            # residual did not win the mainloop back (H200, inference, 30 rows M 256-4096: ours 0.45-0.98x cuBLAS +
            # add on 27 of the 28 such rows, 1.02x at 2048 x 4096 x 4096; the two rows cuBLAS is not preferred for,
            # 1.015 / 1.068x, keep the kernel; perf/results/h200/gemm/residual_small_2026-11-29_1621.txt) - except
            # at host-bound sizes without autograd, where one launch beats two (fused_launch_preferred).
            aten = _aten.AtenGemm(weight is not None, activation, _aten.gemm_signature(a, bias, residual))
        if aten is not None:
            _fast.store(_replays, key, aten)
            return aten(a, b_given, bias, residual)
    elif key is None and _aten.compiling(a):
        # a small call traced by torch.compile: ATen's ops in the graph
        aten = _aten.gemm(weight is not None, a, b_given, bias, residual, activation, out_dtype, backend, True)
        if aten is not None:
            return aten(a, b_given, bias, residual)
    if (bias is not None or activation is not None or residual is not None) and _dtensor.k_sharded(a2, b):
        # K split over ranks (row-parallel): each rank's product is a partial sum, on which no epilogue is exact
        # (ops/_dtensor.py). The GEMM runs alone, DTensor reduces it, then the epilogue runs as torch ops.
        z = _dtensor.reduced(call_op(gemm_op, a2, b, None, None, None, out_dtype or a.dtype, False, backend)[0])
        z = z.view(out_shape) if bias is None else z.view(out_shape) + bias
        y = activation_reference(z, activation) if activation is not None else z
        return y if residual is None else y + residual
    if needs_grad is None:
        needs_grad = _needs_grad(a, b, bias, residual)
    save_preact = activation is not None and needs_grad
    args = (a2, b, bias, res3, activation, out_dtype or a.dtype, save_preact, backend)
    if replay is not None:  # with autograd: the replay inside the op's eager autograd.Function
        return output_view(call_checked(gemm_op, replay.impl(4), True, *args)[0], out_shape)
    if key is None:
        return output_view(call_op(gemm_op, *args)[0], out_shape)
    # roles: launch_gemm's pointer arguments; each must be the caller's tensor itself (a view at its address), so a
    # bias made contiguous or a residual copied by a reshape does not replay. Without autograd the replay returns
    # the caller's output shape; with it, the op's 2-D (out, pre-activation) pair.
    if needs_grad:
        def outputs(result):
            return {"c_ptr": (0, result[0]), "preact_ptr": (1, result[1])}
    else:
        def outputs(result):
            return {"c_ptr": (0, result[0].view(out_shape))}
    with cublas_routes.fused_launch() if fused else contextlib.nullcontext():
        out, _ = _fast.run_recorded(_replays, key, lambda: call_op(gemm_op, *args),
                                    {"a_ptr": (0, a), "b_ptr": (1, b), "bias_ptr": (2, bias), "res_ptr": (3, residual)},
                                    outputs)
    return output_view(out, out_shape)


# Below this many FLOPs (2MNK) an eager GEMM with an epilogue (bias, activation, residual) that autograd does not
# record keeps tilewright's fused kernel where the router would give it to cuBLAS and torch's ops.
FUSED_LAUNCH_BELOW = 2.0 ** 34


def fused_launch_preferred(needs_grad, bias, residual, activation, M: int, K: int, N: int) -> bool:
    """Whether an eager call with an epilogue, without autograd, runs as one fused launch rather than cuBLAS and
    torch's ops (the cuBLAS rules: :func:`_gemm`'s, cublas_routes.cublas_preferred) - under
    :data:`FUSED_LAUNCH_BELOW` FLOPs and the ATen route's limit (``TILEWRIGHT_ATEN_BELOW``: the host-bound sizes; 0
    turns this off with the route), no backend forced. A plain GEMM keeps the rules (one launch either way).

    Why (H200 host, Llama / ViT-L blocks at B 1 x S 512, perf/results/h200/host/b1_epilogue_kernels_ab_s38*.txt): at
    these sizes the step is host-bound (~130 us of kernels under ~330 us of host a Llama forward), and a replayed
    launch cost less host than the ATen ops it replaces - residual GEMMs 36-49 us against 51-61 (torch's own linear
    + add: 38-45), fc1 + GELU 36-38 against 53-60 (torch's: 40-45), qkv with its bias 37-38 against 41-43 (torch's
    nn.Linear: 29-30) - taking the ViT-L forward from 0.73-0.88x to 0.88-0.98x torch eager with every such call on
    the kernels. The kernel's
    GPU time there is up to 2x cuBLAS's (512 x 2048 x 5632 + residual: 37.7 vs 25.4 us,
    perf/results/h200/gemm/residual_small_2026-11-29_1621.txt), at most ~14 us more a call under this limit, about
    what the host saves - so a step that is GPU-bound at these sizes loses little; above it the rules stand. Calls
    with autograd keep ATen's route (its C++ nodes, ops/_aten.py)."""
    return not needs_grad and (bias is not None or residual is not None or activation is not None) and \
        2.0 * M * N * K < min(FUSED_LAUNCH_BELOW, _aten.limit())


def _plain_gemm_on_cublas(a2, b, bias, activation, backend) -> bool:
    """Whether an eager call's GEMM without its residual is one the router gives to cuBLAS, with the ATen routes on:
    such a call runs F.linear / matmul and torch's add (:func:`_gemm` says why). ``bias``: unit-stride, as the
    router reads it."""
    return _aten.limit() > 0 and router.decide("gemm", a2, b, bias, None, activation,
                                               backend=backend).backend == "torch"


def _check_gemm(a, b, bias, residual, activation, out_dtype, backend, a_name, b_name, b_shape_text) -> None:
    check_tensor(a_name, a, min_dim=1)
    check_tensor(b_name, b, dims=(2,))
    check_optional_tensor("bias", bias)
    check_optional_tensor("residual", residual)
    check_choice("activation", activation, tuple(ACTIVATIONS))
    check_backend(backend)
    check_same_dtype(a_name, a, **{b_name: b})
    check_same_device(a_name, a, **{b_name: b, "bias": bias, "residual": residual})
    if a.shape[-1] != b.shape[0]:
        raise ValueError(f"{b_name}: expected {b_shape_text} with K = {a_name}.shape[-1] = {a.shape[-1]}, "
                         f"got shape {tuple(b.shape if b_name == 'b' else b.t().shape)}")
    N = b.shape[1]
    if bias is not None:
        check_tensor("bias", bias, dims=(1,))
        check_same_dtype(a_name, a, bias=bias)
        if bias.shape[0] != N:
            raise ValueError(f"bias: expected shape ({N},), got {tuple(bias.shape)}")
    if residual is not None:
        check_tensor("residual", residual)
    check_out_dtype(out_dtype)


def matmul(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
           residual: torch.Tensor | None = None, activation: str | None = None,
           out_dtype: torch.dtype | None = None, backend: str | None = None) -> torch.Tensor:
    """``activation(a @ b + bias) + residual`` in one kernel.

    Args:
        a: (..., M, K) float16 / bfloat16 / float32; leading dims are batch dims sharing ``b``.
        b: (K, N), same dtype and device as ``a``; any strides (a transposed weight is read in place).
        bias: optional (N,), same dtype as ``a``.
        residual: optional tensor broadcastable to the output (..., M, N): a full residual, or e.g. a pos_embed
            (S, N) broadcast over the batch of a (B, S, K) input - read in place, never materialised. It must
            broadcast *to* the output's shape: one that would enlarge it (torch's ``a @ b + r`` would) is a
            ValueError, since the fused epilogue writes the GEMM's own output.
        activation: None, "relu", "gelu", "gelu_tanh" or "silu" (applied before the residual add).
        out_dtype: output dtype (default: ``a.dtype``). Accumulation and the epilogue are fp32; one rounding
            (except where the router gives the call to cuBLAS, below: torch's rounding of the GEMM's output, then
            its activation).
        backend: None (router decides), "triton" or "torch".
    Returns:
        (..., M, N) tensor. Differentiable in a, b, bias and residual.

    With no backend given, a small problem (2MNK under 2^35) whose graph autograd records - or that torch.compile
    traces - runs torch's own ops (``torch.matmul`` / ``F.linear``, the activation, the add; ops/_aten.py): at that
    size the host is the limit and ATen's C++ autograd nodes cost less than tilewright's Python ones.
    ``TILEWRIGHT_ATEN_BELOW=0`` keeps every call on the kernels. A GEMM on sm_90 where cuBLAS was measured faster than
    tilewright's kernels (decode batches of 32-256 rows, mid-size problems; cublas_routes.py) runs as cuBLAS and then
    torch's activation and residual add - exactly ``F.gelu(F.linear(x, w, b)) + r``'s result (a residual of another
    dtype keeps the kernels); ``TILEWRIGHT_CUBLAS=0`` keeps those on the kernels too.
    """
    if not torch.compiler.is_compiling():
        served, got, replay, key = _gemm_hit(_MATMUL_HEAD, a, b, bias, residual, activation, out_dtype, backend)
        if served:
            return got
        if replay is not None:  # (the replay inside the op's autograd node: _gemm)
            return _gemm(a, b, bias, residual, activation, out_dtype, backend, "a", "b", "(K, N)", key, replay)
    return _gemm(a, b, bias, residual, activation, out_dtype, backend, "a", "b", "(K, N)")


def _gemm_hit(head, a, b, bias, residual, activation, out_dtype, backend):
    """matmul's / linear's eager hit in one call (ops/_fast.hit): ``(True, result, None, None)`` for a call served
    here - an ATen route's result, or a kernel replay autograd does not record - else ``(False, None, replay,
    key)``, the replay (and its key) autograd records, or ``(False, None, None, None)`` for no hit."""
    got = _fast.hit(_replays, head, (a, b, bias, residual), (activation, out_dtype, backend), _GEMM_TAIL_TYPES, False)
    if got is None:
        return False, None, None, None
    if type(got) is not tuple:
        return True, got, None, None
    replay, key = got
    if not key[-2]:
        return True, replay(a.device, a, b, bias, residual)[0], None, None
    return False, None, replay, key


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           residual: torch.Tensor | None = None, activation: str | None = None,
           backend: str | None = None, return_sumsq: bool = False):
    """``F.linear(x, weight, bias)`` followed by the fused ``activation`` and ``+ residual``.

    x: (..., K); weight: (N, K) (the nn.Linear layout, read as a K-major B operand without a copy); bias: (N,).
    See :func:`matmul` for the rest.

    ``return_sumsq=True`` returns ``(y, sumsq)``: sumsq (...,) float32 holds each output row's sum of squares,
    ``(y.float() ** 2).sum(-1)`` of the rounded output - what the RMSNorm after a pre-norm block's residual add
    needs (pass it as :func:`tilewright.rms_norm_linear`'s ``sumsq``, which then reads y once, in its GEMM, instead
    of in a pass of its own). It carries no gradient (the norm's backward accounts for it through y). Where the call
    runs the sm_90 CUDA GEMM (the router's choice: large problems on an H100 / H200) the GEMM's epilogue sums the
    squares of the values it stores (cuda_fallback/gemm_sumsq_sm90.py); elsewhere one read-only pass over y after the
    GEMM does. Where it pays: inference in bf16 on sm_90, where the norm's folded forward then runs its GEMM alone.
    A training step's norm writes ``x * rstd * g`` in a pass that reads x anyway, so the sums save it no traffic -
    and where they come from a pass of their own, that pass is a read of y more. Not with DTensor arguments.
    """
    key = replay = None
    if return_sumsq is False and not torch.compiler.is_compiling():
        served, got, replay, key = _gemm_hit(_LINEAR_HEAD, x, weight, bias, residual, activation, None, backend)
        if served:
            return got
    if replay is None:
        served, key_or_result, replay = _linear_lookup(x, weight, bias, residual, activation, backend, return_sumsq)
        if served:
            return key_or_result
        key = key_or_result
    if isinstance(weight, torch.Tensor) and weight.dim() == 2:
        b = weight.t()
    else:
        check_tensor("weight", weight, dims=(2,))
        b = weight
    return _gemm(x, b, bias, residual, activation, None, backend, "x", "weight", "(N, K)", key, replay, weight)


def _linear_lookup(x, weight, bias, residual, activation, backend, return_sumsq):
    """:func:`linear` past its one-call hit: ``(False, key, replay)`` for the GEMM path to go on with (replay None
    on a miss, or a kernel replay autograd records), or ``(True, result, None)`` for a call served here -
    ``return_sumsq``'s pair, a tensor-parallel call, a hit the one-call hit did not see (under a trace check)."""
    if return_sumsq is not False:
        if return_sumsq is not True:
            raise TypeError(f"return_sumsq: expected a bool, got {type(return_sumsq).__name__}")
        if any(_dtensor.is_dtensor(t) for t in (x, weight, bias, residual) if t is not None):
            raise ValueError("return_sumsq: not supported with DTensor arguments (tensor parallelism; a row's sum "
                             "would span the ranks' shards); call without it")
        fused = _linear_with_sumsq(x, weight, bias, residual, activation, backend)
        if fused is not None:
            return True, fused, None
        y = linear(x, weight, bias, residual=residual, activation=activation, backend=backend)
        return True, (y, row_sumsq(y)), None
    if _dtensor.is_dtensor(weight):  # tensor parallelism: the rank's shards through the fast path
        out = _dtensor.tensor_parallel_linear(linear, x, weight, bias, residual, activation, backend)
        if out is not None:
            return True, out, None
    # the replay key holds the weight, not its transpose (same address, strides swapped): a hit skips the .t()
    key = _replay_key(x, weight, bias, residual, activation, None, backend, "linear")
    replay = None if key is None else _replays.get(key)
    if replay is not None:
        if type(replay) is _aten.AtenGemm:
            return True, replay(x, weight, bias, residual), None
        if not key[-2]:
            return True, replay(x.device, x, weight, bias, residual)[0], None
    return False, key, replay


# Outputs of at least this many elements take the Triton pass in row_sumsq (2.7 TB/s at 8192 x 4096 on an H200,
# perf/results/h200/rms_norm_linear/folded_parts_2026-11-28.py); below it the read takes a few us and the host is the
# cost: Triton's JIT dispatch is 20-40 us a launch there (triton_kernels/rmsnorm_gemm.py), torch's reduction one
# C++ dispatch (not measured side by side: a floor count).
ROW_SUMSQ_TRITON_MIN = 1 << 24


def row_sumsq(y: torch.Tensor) -> torch.Tensor:
    """Each row's fp32 sum of squares of ``y`` (..., N) as a (...,) float32 tensor, outside autograd: one read-only
    pass (triton_kernels/rmsnorm_gemm.launch_row_sumsq) for large outputs where the kernels run (and under the
    interpreter), torch's reduction elsewhere - small outputs, and traces (fake tensors: no kernel launches; inductor
    fuses the reduction into what wrote y)."""
    y = y.detach()
    N = y.shape[-1]
    y2 = y.reshape(math.prod(y.shape[:-1]), N)
    if (interpreting() or (y.is_cuda and y.numel() >= ROW_SUMSQ_TRITON_MIN)) and N > 0 and type(y) in _PLAIN \
            and not traced():
        from ..triton_kernels.rmsnorm_gemm import launch_row_sumsq

        sums = launch_row_sumsq(y2)
    else:  # one reduction reading y in place (no fp32 copy of it), then M squares: sqrt and square cost ~2 ulp
        sums = torch.linalg.vector_norm(y2, 2, dim=-1, dtype=torch.float32).square()
    return sums.view(y.shape[:-1])


def _linear_with_sumsq(x, weight, bias, residual, activation, backend):
    """``(y, sumsq)`` of ``linear(..., return_sumsq=True)`` from the sm_90 GEMM's sums-of-squares build, where the
    plain call would run the sm_90 CUDA GEMM; None elsewhere (the caller then runs the plain call and a pass over
    its output). Under autograd the launch runs inside the GEMM op's autograd node, so y's gradients are the plain
    op's; not with an activation there (the kernel does not store the pre-activation autograd needs)."""
    if backend not in (None, "cuda") or traced() or not all(type(t) in _PLAIN for t in (x, weight, bias, residual)
                                                           if t is not None):
        return None
    if not (x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and isinstance(weight, torch.Tensor)
            and weight.dim() == 2 and x.dim() >= 1):
        return None
    from ..cuda_fallback import gemm_sm90, gemm_sumsq_sm90

    M, K, N = math.prod(x.shape[:-1]), x.shape[-1], weight.shape[0]
    # below the sm_90 GEMM's FLOPs floor the router never picks it: skip its decision (host time) there
    if 2 * M * N * K < gemm_sm90.PREFER_MIN_FLOPS or torch.cuda.get_device_capability(x.device)[0] != 9:
        return None
    b = weight.t()
    _check_gemm(x, b, bias, residual, activation, None, backend, "x", "weight", "(N, K)")
    if residual is not None and residual.dtype != x.dtype:
        return None
    out_shape = (*x.shape[:-1], N)
    a2, res3, bias = x.reshape(M, K), None if residual is None else _residual_3d(residual, out_shape), \
        contiguous_vector(bias)
    needs_grad = _needs_grad(x, b, bias, residual)
    if needs_grad and activation is not None:
        return None
    if router.decide("gemm", a2, b, bias, res3, activation, backend=backend).backend != "cuda":
        return None
    if res3 is not None and _plain_gemm_on_cublas(a2, b, bias, activation, backend):
        return None  # the plain call runs cuBLAS + torch's add here (_gemm)
    if not gemm_sumsq_sm90.ready(a2, b, bias, res3)[0]:
        return None
    parts = torch.empty(gemm_sumsq_sm90.partial_shape(M, N, K), device=x.device, dtype=torch.float32)
    fell_back = []

    def run(a2, b, bias, res3, activation, out_dtype, save_preact, backend):
        out = torch.empty((M, N), device=a2.device, dtype=a2.dtype)
        if gemm_sumsq_sm90.try_launch(a2, b, out, parts, bias=bias, residual=res3, activation=activation):
            return out, out.new_empty((0,))
        fell_back.append(True)  # (failed once: warned and disabled) the plain op's path, and a pass for the sums
        return _gemm_full(a2, b, bias, res3, activation, out_dtype, save_preact, backend)

    y = call_checked(gemm_op, run, needs_grad, a2, b, bias, res3, activation, a2.dtype, False, backend)[0]
    y = output_view(y, out_shape)
    return y, (row_sumsq(y) if fell_back else parts.sum(0).view(out_shape[:-1]))
