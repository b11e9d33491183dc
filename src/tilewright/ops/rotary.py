"""Rotary position embedding as a torch op: ``tilewright.apply_rotary``.

``apply_rotary(x, cos, sin)`` rotates the first ``R`` features of every head of ``x`` (B, S, H, D) by the angles whose
cosines and sines the tables hold, rotate-half convention (GPT-NeoX / Llama): with ``x1, x2`` the two halves of the
first R features, ``out = [x1 c1 - x2 s1, x2 c2 + x1 s2, x[..., R:]]`` (see triton_kernels/rotary.py). One Triton
pass each way; the backward is the same op rotating the other way, so it has a derivative of its own.

Op (``torch.library.custom_op``; eager calls skip the dispatcher, ops/_eager.py):
``tilewright::rotary(x, cos, sin, rotary_dim, backward) -> out``, x (B, S, H, D), cos / sin (Bc, Sc, W).
Under torch.compile a call on fewer than ``_aten.COMPILED_ELEMENTWISE_MIN`` elements emits the formula in torch ops for
inductor to fuse (host-bound sizes, see ops/swiglu.py); larger calls keep the op: inductor's rope forward + backward
with the split and transposes around it took 0.36 ms of GPU time per Llama-layer step at B 8 x S 2048, this op 0.12 ms
(H100 profile, perf/results/h100/model/prof_prefill_2026-11-27_1805.txt).
"""
from __future__ import annotations

import torch

from .._env import interpreting
from ._checks import check_same_device, check_same_dtype, check_tensor, traced_into_graph, unit_last
from ._eager import call_checked, call_op, register_fast_dispatch
from . import _aten, _fast


def _rotate_torch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int, backward: bool):
    """The op's formula in torch (fp32 math, one rounding): the CPU path and the reference of the kernel's contract.
    x (B, S, H, D); cos, sin (Bc, Sc >= S, W)."""
    S = x.shape[1]
    half = rotary_dim // 2
    c = cos[:, :S, None, :].float()  # (Bc, S, 1, W)
    s = sin[:, :S, None, :].float()
    if c.shape[-1] == half:
        c1 = c2 = c
        s1 = s2 = s
    else:
        c1, c2, s1, s2 = c[..., :half], c[..., half:], s[..., :half], s[..., half:]
    xf = x.float()
    a, z = xf[..., :half], xf[..., half:rotary_dim]
    if backward:
        o1, o2 = a * c1 + z * s2, z * c2 - a * s1
    else:
        o1, o2 = a * c1 - z * s1, z * c2 + a * s2
    return torch.cat([o1, o2, xf[..., rotary_dim:]], dim=-1).to(x.dtype)


@torch.library.custom_op("tilewright::rotary", mutates_args=())
def rotary_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
              backward: bool) -> torch.Tensor:
    """x (B, S, H, D) rotated (``backward``: rotated back, the gradient of the forward), a new contiguous tensor."""
    if not (x.is_cuda or interpreting()):
        return _rotate_torch(x, cos, sin, rotary_dim, backward)
    from ..triton_kernels.rotary import launch_rotary

    x = unit_last(x)
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    launch_rotary(x, cos, sin, out, rotary_dim, backward=backward)
    return out


@rotary_op.register_fake
def _(x, cos, sin, rotary_dim, backward):
    return x.new_empty(x.shape)


def _setup_context(ctx, inputs, output):
    _, cos, sin, rotary_dim, backward = inputs
    ctx.save_for_backward(cos, sin)
    ctx.rotary_dim, ctx.backward = rotary_dim, backward


def _backward(ctx, dy):
    cos, sin = ctx.saved_tensors
    # the transposed rotation is the op run the other way: differentiable in turn (a double backward records it)
    return _rotated(dy, cos, sin, ctx.rotary_dim, not ctx.backward), None, None, None, None


def _rotated(x, cos3, sin3, rotary_dim: int, backward: bool):
    """``rotary_op(x, cos3, sin3, rotary_dim, backward)`` on checked arguments (the 3-D tables the op reads), through
    an eager replay of the signature when autograd records nothing - the backward's rotation, which the autograd
    engine calls once a step (a Python node: the op's dispatch and launch binding were most of its host time)."""
    key = None if torch.compiler.is_compiling() else _fast.replay_key((backward,), (x, cos3, sin3), (rotary_dim,))
    if key is None or key[-2]:
        return call_op(rotary_op, x, cos3, sin3, rotary_dim, backward)
    replay = _replays.get(key)
    if replay is not None:
        return replay(x.device, x, cos3, sin3)[0]
    return _fast.run_recorded(_replays, key, lambda: (call_op(rotary_op, x, cos3, sin3, rotary_dim, backward),),
                              {"x_ptr": (0, x), "cos_ptr": (1, cos3), "sin_ptr": (2, sin3)},
                              lambda result: {"out_ptr": (0, result[0])})[0]


rotary_op.register_autograd(_backward, setup_context=_setup_context)
register_fast_dispatch(rotary_op)


def _tables(name: str, t: torch.Tensor, B: int, S: int) -> torch.Tensor:
    """A table as the kernel reads it: (Bc, Sc, W) with Bc in {1, B}, Sc >= S, unit last stride."""
    check_tensor(name, t, dims=(2, 3))
    t3 = t if t.dim() == 3 else t.unsqueeze(0)
    if t3.shape[0] not in (1, B):
        raise ValueError(f"{name}: a 3-D table is (batch, seqlen, width) with batch 1 or x's {B}, got shape "
                         f"{tuple(t.shape)}")
    if t3.shape[1] < S:
        raise ValueError(f"{name}: holds {t3.shape[1]} positions but x has seqlen {S} (dim 1)")
    return unit_last(t3)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *,
                 rotary_dim: int | None = None) -> torch.Tensor:
    """Rotary position embedding, rotate-half convention, in one pass (fp32 inside, one rounding); differentiable
    in ``x`` (the tables are constants: a table that requires grad raises).

    Args:
        x: ``(B, S, H, D)`` (flash-attn's layout), float16 / bfloat16 / float32, any strides - e.g. the query and key
            heads of a fused QKV projection viewed as one ``(B, S, Hq + Hkv, D)`` tensor, rotated in one launch.
        cos, sin: ``(S_ro, W)`` or ``(B or 1, S_ro, W)`` with ``S_ro >= S`` (positions ``0 .. S-1`` are used). ``W``
            is either half the rotary dim (flash-attn's tables: one angle for both halves) or the rotary dim itself
            (Llama / Hugging Face tables, ``cat([freqs, freqs])``, each half read from its own columns).
        rotary_dim: how many leading features of each head rotate (even, ``<= D``); the rest are copied. None: all
            ``D`` of them. The table width must be ``rotary_dim / 2`` or ``rotary_dim`` - never guessed from the
            width alone (a width of ``D / 2`` is a half table for ``R = D`` or a full one for ``R = D / 2``).
    Returns:
        A new contiguous ``(B, S, H, D)`` tensor in x's dtype: ``out[..., :R/2] = x1 c1 - x2 s1``,
        ``out[..., R/2:R] = x2 c2 + x1 s2``. Under torch.compile a small call emits the formula in torch ops
        (module docstring).

    Eager, one call on the joint ``(B, S, Hq + Hkv, D)`` view of q and k costs one launch's host time where two
    calls cost two. Under torch.compile, rotate q and k in calls of their own: the joint call's result is one buffer
    both share, which an attention reading q and k in its own layout then copies (a kernel more a step).
    """
    given_dim = rotary_dim  # (the key holds the argument as given: None and D are two keys of one launch)
    if not torch.compiler.is_compiling():
        # an eager hit (ops/_fast.py): the recorded launch of this signature - inside the op's autograd node when
        # autograd records (the key says so: key[-2])
        got = _fast.hit(_replays, (), (x, cos, sin), (rotary_dim,), _TAIL_TYPES, False)
        if got is not None:
            replay, key = got
            if not key[-2]:
                return replay(x.device, x, cos, sin)[0]
            # (the key says only that some argument requires grad: a table that does is the full path's error)
            if not (cos.requires_grad or sin.requires_grad):
                return _replayed_with_grad(replay, x, cos, sin, x.shape[-1] if rotary_dim is None else rotary_dim)
    check_tensor("x", x, dims=(4,))
    B, S, H, D = x.shape
    check_same_dtype("x", x, cos=cos, sin=sin)
    check_same_device("x", x, cos=cos, sin=sin)
    if (cos.requires_grad or sin.requires_grad) and torch.is_grad_enabled():
        raise ValueError("cos / sin: the rotary tables are treated as constants and get no gradient; pass them "
                         "detached (e.g. buffers)")
    if cos.shape != sin.shape:
        raise ValueError(f"sin: expected cos's shape {tuple(cos.shape)}, got {tuple(sin.shape)}")
    cos3, sin3 = _tables("cos", cos, B, S), _tables("sin", sin, B, S)
    width = cos3.shape[-1]
    if rotary_dim is None:
        rotary_dim = D
    elif isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int):
        raise TypeError(f"rotary_dim: expected an int or None, got {type(rotary_dim).__name__}")
    if rotary_dim < 2 or rotary_dim % 2 or rotary_dim > D:
        raise ValueError(f"rotary_dim: must be even with 2 <= rotary_dim <= D = {D}, got {rotary_dim}")
    if width not in (rotary_dim // 2, rotary_dim):
        raise ValueError(f"cos: table width {width} must be rotary_dim / 2 = {rotary_dim // 2} (half tables) or "
                         f"rotary_dim = {rotary_dim} (full tables); pass rotary_dim= for a partial rotation")
    if cos3.stride() != sin3.stride():  # the kernel reads both tables through one set of strides
        cos3, sin3 = cos3.contiguous(), sin3.contiguous()
    if traced_into_graph(x) and x.numel() < _aten.COMPILED_ELEMENTWISE_MIN:
        return _rotate_torch(x, cos3, sin3, rotary_dim, False)
    key = _replay_key(x, cos, sin, given_dim)
    if key is None:
        return call_op(rotary_op, x, cos3, sin3, rotary_dim, False)
    # The roles are the caller's x, cos, sin: the tables' 3-D views are at their addresses, and a copy made above or
    # in the op (a table strided differently from the other, an x without a unit last stride) is not - that launch
    # does not replay (ops/_fast.build). With autograd recording, the launch recorded is the one inside the op's node.
    return _fast.run_recorded(_replays, key, lambda: (call_op(rotary_op, x, cos3, sin3, rotary_dim, False),),
                              {"x_ptr": (0, x), "cos_ptr": (1, cos), "sin_ptr": (2, sin)},
                              lambda result: {"out_ptr": (0, result[0])})[0]


def _replayed_with_grad(replay, x, cos, sin, rotary_dim: int):
    """A recorded forward launch inside the op's eager autograd node (ops/_eager.call_checked): the node saves the
    tables as the op reads them - 3-D views of the caller's tables, which the replay's roles are (a table the full
    path had to copy never recorded) - for the backward's rotation the other way."""
    cos3 = cos if cos.dim() == 3 else cos.unsqueeze(0)
    sin3 = sin if sin.dim() == 3 else sin.unsqueeze(0)
    return call_checked(rotary_op, lambda *args: replay(x.device, x, cos, sin)[0], True, x, cos3, sin3, rotary_dim,
                        False)


_replays = _fast.new_cache()
# The option the key takes, by exact type (rotary_dim); _fast.hit makes the same test.
_TAIL_TYPES = ((int, type(None)),)


def _replay_key(x, cos, sin, rotary_dim):
    """The eager replay key of a checked call (ops/_fast.py), or None (tracing, a tensor that is no plain CUDA
    tensor, an option of another type). Why a replay: the full path's checks, table views and the op's dispatch are
    most of the call's host time, and a Llama layer calls it once a step (q and k heads in one launch) - at B 1 x
    S 512 the eager forward is host-bound (perf/LOG.md, session 38)."""
    if torch.compiler.is_compiling() or type(rotary_dim) not in _TAIL_TYPES[0]:
        return None
    return _fast.replay_key((), (x, cos, sin), (rotary_dim,))
