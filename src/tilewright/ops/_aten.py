"""Host-bound calls served by ATen's own ops: small calls go to cuBLAS, SDPA and torch's RMSNorm through the ATen ops
torch's own unfused code runs.

Why: below a few tens of GFLOP a call's GPU work is shorter than its host work, and then the host is the step's
clock. A tilewright op is a Python function with a Python autograd node; the ATen op it stands for is C++ on both
sides. Measured on the H100 host (perf/LOG.md, session 12): the Llama layer at B 1 x S 512 (every GEMM 6-24 GFLOP,
attention 1 GFLOP) spent 1.35-1.64 ms of host in its forward with autograd recording and 2.9-3.5 ms in
``backward()``, against torch's 0.88-1.21 and 1.84-1.92 ms for the same layer: GPU time was never the limit (the
synced step took host time + 1-2%). Kernel speed cannot win there; launching less can.

What runs instead (eager calls on CUDA tensors whose work is under :func:`limit` FLOPs, nothing forced; the GEMM
family only when autograd records, ``rms_norm_linear`` also without autograd outside CUDA-graph capture):

* ``linear`` / ``matmul``: ``F.linear`` / ``torch.matmul`` (a bias through addmm's), then the activation and the
  residual add: the ops torch's own unfused code runs, with its numerics.
* ``rms_norm_linear``: ``F.linear(F.rms_norm(x, ...), weight, bias)`` - also an eager training call of any size whose
  plain GEMM cuBLAS runs anyway (:func:`_cublas_gemm`: the op would run that same unfused pair, with Python nodes).
* ``flash_attention`` / ``scaled_dot_product_attention`` without soft-capping, a window, bottom-right alignment
  (when Sq != Skv), a different value head dim or the LSE output: ``F.scaled_dot_product_attention``.

Autograd records ATen's own C++ nodes. Why the GEMM family keeps its kernels when autograd does not record
(measured, H100 host, same process): without a graph to record, a replayed call is one launch - cheaper on the host
than ``rms_norm`` + ``linear`` or ``linear`` + ``add`` - and the Llama layer's B 1 x S 512 inference forward ran
0.507 ms on the kernels, 0.684 ms on the route (torch 0.529; the route then used addmm with the residual as C, whose
transpose and views cost more host than the add they saved: 46 vs 18 us a call, dev box - dropped).
``rms_norm_linear`` without autograd is the exception: its small calls run in two passes now (the norm pass, then
the plain GEMM on cuBLAS: ops/rms_norm_linear.two_pass_applies), whose replay cost 91 us of host a call against 57
for torch's ``RMSNorm`` + ``Linear`` (H200 host, Llama B 1 x S 512's QKV projection,
perf/results/h200/model/host_per_op_2026-11-28_1715.txt). Inside a CUDA-graph capture it keeps its kernels: host
time is not replayed there, and the two passes' GPU time is the lower one (1.13-1.34x torch eager at decode sizes).
One exception: a GEMM (no residual or other out dtype; an activation runs as torch's own, as the op's cuBLAS path
runs it) that the router gives to cuBLAS anyway (cublas_routes.py) runs as ``F.linear`` / ``matmul`` with or without
autograd - the op's replay of that cuBLAS call (views at the recorded layout, ``mm`` with ``out=``) measured twice
torch's host time (42-46 vs 21 us, H100 host), and with autograd the op adds Python nodes around the same cuBLAS
calls (until session 31 the code took this exception without autograd only).
Attention takes the route either way: one op each, and SDPA was faster on small problems (the ViT-L block's B 1 x
S 512 inference forward, attention 1 GFLOP at head dim 64: 1.06x torch on the route, 0.72x on the kernels).
Attention also takes it at any size where SDPA runs cuDNN's sm_90 kernels and they measured faster than
tilewright's (:func:`cudnn_faster`: training calls, and forward-only calls - at head dims 64 and 72-128 only short
sequences, :func:`forward_keeps_kernels`).

A call traced by torch.compile / export (static shapes) follows the same rule with and without autograd
(:func:`compiling`): the graph then holds ATen's ops, which inductor fuses with their neighbours.

Nothing changes for a call over the limit, another traced call (FakeTensor or dispatch modes, functorch), a forced
backend (``backend=``, ``use_backend``, ``TILEWRIGHT_BACKEND``) or an input ATen would promote (a residual of another
dtype, an ``out_dtype``). An eager decision is made once per call signature and kept in the op's replay cache under
the same key (ops/_fast.py), so a hit costs what a replay's lookup costs. Inputs are checked by the op's own checks
on that first call, as on the kernels' path: a bad argument raises the same error naming it.

``TILEWRIGHT_ATEN_BELOW``: the limit in FLOPs (default 2^35, ~50 us of tensor-core work on an H100, where any kernel
gap to cuBLAS - a few percent - is far below the ~50 us of host per call the ATen route saves); ``0`` turns the route
off (the test suite does, so its kernel tests reach the kernels).
"""
from __future__ import annotations

import math
import operator
import os

import torch
import torch.nn.functional as F

from .. import router
from ._checks import traced_into_graph

ENV = "TILEWRIGHT_ATEN_BELOW"
DEFAULT_LIMIT = 2.0 ** 35
# The elementwise ops (swiglu, apply_rotary) traced by torch.compile: an input with fewer elements emits torch's
# formula, which inductor fuses into a kernel its graph launches for a few microseconds of host, instead of an opaque
# op (a dispatch forward, a Python node backward); larger ones keep the op (ops/swiglu.py says why). 2^24 bf16
# elements are 32 MB, ~10 us of HBM traffic on an H100: below that the compiled step is host-bound.
COMPILED_ELEMENTWISE_MIN = 1 << 24


def swiglu_formula_eager(x: torch.Tensor) -> bool:
    """Whether an eager (untraced) ``swiglu`` call on ``x`` runs torch's ``F.silu(gate) * up``: a CUDA tensor under
    :data:`COMPILED_ELEMENTWISE_MIN` elements with the ATen route on (not ``TILEWRIGHT_ATEN_BELOW=0``, no forced
    backend).

    Why (H100 host, Llama layer B 1 x S 512, ``perf/results/h100/model/host_stages_2026-11-28_0240.txt``): the kernel's
    call cost 95 us of host with autograd recording against 36 us for torch's chunk + silu + mul, and its Python
    backward node was the step's largest self-CPU item after the GEMMs (182 us under the profiler) where torch's are
    C++ nodes. The formula moves ~24 more bytes per output element over forward + backward (two kernels forward, five
    backward, against one each): at 2^23 outputs ~65 us of HBM traffic on an H100, under the ~150 us of host it saves.
    apply_rotary keeps its kernel eagerly: its one launch cost less host than torch's seven-op formula (64 vs 132 us).
    """
    return x.numel() < COMPILED_ELEMENTWISE_MIN and x.is_cuda and _limit_unless_forced() > 0

_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "silu": F.silu,
}


def limit() -> float:
    """FLOPs below which a call goes to ATen (``TILEWRIGHT_ATEN_BELOW``; 0 or less: never). Read on a replay-cache
    miss only: the variable is part of every replay key (ops/_fast.state)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_LIMIT
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{ENV}: expected a number of FLOPs (e.g. 3.4e10, or 0 to turn the route off), got "
                         f"{raw!r}") from None


def _limit_unless_forced() -> float:
    """:func:`limit`, or 0 while a backend is forced (``use_backend``, ``TILEWRIGHT_BACKEND``). Under torch.compile
    dynamo calls this at trace time and keeps the result as a constant: the environment and the thread-local forced
    backend are Python state a graph cannot hold (a compiled graph keeps the route it was traced with)."""
    return 0.0 if router._forced()[0] is not None else limit()


# What ``torch.compiler.assume_constant_result`` does, without it: that function imports torch._dynamo, 1.7-1.9 s on
# the dev box, which ``import tilewright`` must not pay for users who never compile.
_limit_unless_forced._dynamo_marked_constant = True


def _takes(backend, flops) -> bool:
    if backend is not None or not isinstance(flops, (int, float)):  # (a symbolic shape under dynamic compile: no)
        return False
    return flops < _limit_unless_forced()


def compiling(t: torch.Tensor) -> bool:
    """Whether a call on ``t`` is being traced by torch.compile / export on a CUDA device: the compiled graph then
    gets ATen's ops for a small problem (same rule and limit as eager calls, both with and without autograd - inductor
    fuses the elementwise ATen ops with their neighbours, and a custom op costs a dispatch per call in the compiled
    graph too)."""
    return t.device.type == "cuda" and traced_into_graph(t)


# The builtins behind the activations, for a route's steps (a step calls the ATen op itself: F.relu and F.silu are
# Python wrappers that only check for __torch_function__ overrides, which a replayed call cannot have - the replay
# key takes plain tensors outside any function mode - and call these).
_ACTIVATION_STEPS = {
    "relu": (torch.relu, (-1,), None),
    "gelu": (F.gelu, (-1,), None),
    "gelu_tanh": (F.gelu, (-1, ("tanh",)), ("approximate",)),
    "silu": (torch._C._nn.silu, (-1,), None),
}


class AtenGemm:
    """``linear`` / ``matmul`` of one signature through ATen; called with the public function's tensors (``b`` in
    the caller's layout: the (N, K) weight for ``linear``, (K, N) for ``matmul``).

    ``signature``: (a.dim(), has a bias, has a residual) of the one signature an eager replay stores it for; it
    then also carries ``_steps``, the same ATen calls as data that the C replay hit (tilewright/_native, hit()) runs
    without this class's frame (ops/_fast.python_hit is its Python twin). A step is ``(fn, argument sources, keyword
    names)``: source i >= 0 is the call's i-th tensor (a, b, bias, residual), -1 the previous step's result, a
    1-tuple a constant."""

    __slots__ = ("_activation", "_is_linear", "_steps")

    def __init__(self, is_linear: bool, activation, signature: tuple[int, bool, bool] | None = None):
        self._is_linear = is_linear
        self._activation = None if activation is None else _ACTIVATIONS[activation]
        self._steps = None
        if signature is not None:
            a_dim, has_bias, has_residual = signature
            if is_linear:
                steps = [(F.linear, (0, 1, 2), None)]
            elif has_bias and a_dim == 2:
                steps = [(torch.addmm, (2, 0, 1), None)]
            else:
                steps = [(torch.matmul, (0, 1), None)] + ([(operator.add, (-1, 2), None)] if has_bias else [])
            if activation is not None:
                steps.append(_ACTIVATION_STEPS[activation])
            if has_residual:
                steps.append((operator.add, (-1, 3), None))
            self._steps = tuple(steps)

    def __call__(self, a, b, bias, residual):
        # One Python call per ATen op: under autograd every call here - a view or a transpose too - costs a node
        # and 5-7 us of host (dev box). So the residual is one add rather than addmm's C operand, which would take
        # a transpose and 2-3 views around a 3-D input (measured 46 us against F.linear + add's 18 on the dev box).
        if self._is_linear:
            z = F.linear(a, b, bias)
        elif bias is not None and a.dim() == 2:
            z = torch.addmm(bias, a, b)
        else:
            z = torch.matmul(a, b) if bias is None else torch.matmul(a, b) + bias
        if self._activation is not None:
            z = self._activation(z)
        return z if residual is None else z + residual


def gemm(is_linear: bool, a, b, bias, residual, activation, out_dtype, backend,
         records_grad: bool) -> AtenGemm | None:
    """The ATen route of a checked ``linear`` (``b``: the (N, K) weight) / ``matmul`` call, or None when the call
    stays on tilewright's kernels: always when autograd does not record (see the module's docstring)."""
    N = b.shape[0] if is_linear else b.shape[1]
    K = a.shape[-1]
    M = math.prod(a.shape[:-1])
    if not records_grad or not _takes(backend, 2 * M * N * K):
        return None
    if out_dtype not in (None, a.dtype) or (residual is not None and residual.dtype != a.dtype):
        return None  # ATen would promote where the op rounds to a's dtype
    return AtenGemm(is_linear, activation, gemm_signature(a, bias, residual))


def gemm_signature(a, bias, residual) -> tuple[int, bool, bool]:
    """:class:`AtenGemm`'s ``signature`` of a call."""
    return a.dim(), bias is not None, residual is not None


class AtenRmsNormLinear:
    """``rms_norm_linear`` of one signature through ATen. ``K``: x's last dim where it is a plain int, which gives the
    route its ``_steps`` (:class:`AtenGemm` says why): ``torch.rms_norm``, the builtin ``F.rms_norm`` calls."""

    __slots__ = ("_eps", "_steps")

    def __init__(self, eps: float, K=None):
        self._eps = eps
        self._steps = None
        if type(K) is int:
            self._steps = ((torch.rms_norm, (0, ((K,),), 1, (eps,)), None), (F.linear, (-1, 2, 3), None))

    def __call__(self, x, norm_weight, weight, bias):
        return F.linear(F.rms_norm(x, (x.shape[-1],), norm_weight, self._eps), weight, bias)


def swiglu_halves(h: torch.Tensor) -> torch.Tensor:
    """torch's SwiGLU of a fused gate/up output: ``F.silu(gate) * up`` with ``gate, up = h.chunk(2, dim=-1)``."""
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


class AtenRmsNormSwigluLinear:
    """``rms_norm_linear(..., activation="swiglu")`` of one signature through ATen: :class:`AtenRmsNormLinear`'s two
    calls, then :func:`swiglu_halves` - exactly the ops the pair of routes runs (the norm + GEMM's ATen route, then
    ``swiglu``'s formula), stored once the call has taken both, so that a repeat is one C hit instead of the gated
    path's Python (its checks, the fused kernel's region, ``swiglu``'s own checks and route: measured +44-56 us a call
    over torch's five ops at the Llama B1 x S512 layer without grad, +29 us with grad, H200,
    perf/results/h200/host/llama_b1_ops_s41.txt)."""

    __slots__ = ("_eps", "_steps")

    def __init__(self, eps: float, K=None):
        self._eps = eps
        self._steps = None
        if type(K) is int:
            self._steps = ((torch.rms_norm, (0, ((K,),), 1, (eps,)), None), (F.linear, (-1, 2, 3), None),
                           (swiglu_halves, (-1,), None))

    def __call__(self, x, norm_weight, weight, bias):
        return swiglu_halves(F.linear(F.rms_norm(x, (x.shape[-1],), norm_weight, self._eps), weight, bias))


def rms_norm_linear(x, weight, eps: float, backend, records_grad: bool, bias=None,
                    eager: bool = True) -> AtenRmsNormLinear | None:
    """The ATen route of a checked ``rms_norm_linear`` call, or None: a small call, with autograd recording or, without
    it, outside CUDA-graph capture (see the module's docstring); and an eager training call (autograd records) of any
    size whose GEMM cuBLAS runs anyway (:func:`_cublas_gemm`; ``eager=False``: a traced call, which keeps the op)."""
    flops = 2 * math.prod(x.shape[:-1]) * x.shape[-1] * weight.shape[0]
    if not _takes(backend, flops):
        return AtenRmsNormLinear(eps, x.shape[-1]) if eager and records_grad and _cublas_gemm(x, weight, bias, backend) \
            else None
    return AtenRmsNormLinear(eps, x.shape[-1]) if records_grad or not capturing(x) else None


def _cublas_gemm(x, weight, bias, backend) -> bool:
    """Whether a training ``rms_norm_linear`` call's GEMM goes to cuBLAS (cublas_routes.cublas_preferred: shapes where
    the WGMMA kernel lost, e.g. M not a multiple of 64): the op would then run the unfused pair itself - its norm
    pass, then cuBLAS - under a Python autograd node, and ATen's pair is the same GPU work with C++ nodes.

    Why (H200, perf/results/h200/rms_norm_linear/fwd_bwd_rows_2026-11-29_0642.txt): at 3000 x 5120 x 5120 the op's
    training step ran 0.98 ms a step in a queued loop against eager's 0.72, with 0.80 vs 0.69 ms of kernels - the
    step was host-bound on the op's Python (forward node, two replayed GEMMs and the norm-backward op in the
    backward), where eager's is GPU-bound. Not for a forced backend or with the route off (TILEWRIGHT_ATEN_BELOW=0)."""
    if backend is not None or _limit_unless_forced() <= 0:
        return False  # (cublas_preferred itself takes CUDA tensors only)
    from ..cublas_routes import cublas_preferred

    return cublas_preferred(x.reshape(-1, x.shape[-1]), weight.t(), bias)[0]


def capturing(t: torch.Tensor) -> bool:
    """Whether ``t``'s device's current stream is capturing a CUDA graph (False off CUDA)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


class AtenAttention:
    """Attention of one signature through ``F.scaled_dot_product_attention`` (its backend choice: cuDNN or
    FlashAttention-2 for these shapes)."""

    __slots__ = ("_causal", "_gqa", "_scale", "_steps")

    def __init__(self, causal: bool, scale: float | None, gqa: bool):
        self._causal, self._scale, self._gqa = causal, scale, gqa
        # the same call as data for the C replay hit (AtenGemm says why)
        if scale is None and not gqa:
            self._steps = ((F.scaled_dot_product_attention, (0, 1, 2, (causal,)), ("is_causal",)),)
        else:
            self._steps = ((F.scaled_dot_product_attention, (0, 1, 2, (causal,), (scale,), (gqa,)),
                            ("is_causal", "scale", "enable_gqa")),)

    def __call__(self, q, k, v):
        if self._scale is None and not self._gqa:
            # each keyword SDPA parses costs ~0.5 us of host (dev box): the common call passes only is_causal
            return F.scaled_dot_product_attention(q, k, v, is_causal=self._causal)
        return F.scaled_dot_product_attention(q, k, v, is_causal=self._causal, scale=self._scale,
                                              enable_gqa=self._gqa)


def attention(q, k, v, causal: bool, scale: float | None, backend, *, bottom_right: bool = False,
              softcap: float = 0.0, window=(-1, -1), records_grad: bool = False) -> AtenAttention | None:
    """The ATen route of a checked 4-D attention call, or None: the options SDPA has (a causal mask aligned top-left
    - or either way when Sq == Skv -, a scale, grouped K/V) and one head dim for q, k and v; taken below the FLOPs
    limit (host-bound sizes) and, at any size, where SDPA runs cuDNN's kernels and they measured faster
    (:func:`cudnn_faster`)."""
    B, Hq, Sq, D = q.shape
    Skv = k.shape[2]
    if softcap or tuple(window) != (-1, -1) or v.shape[-1] != D or (causal and bottom_right and Sq != Skv):
        return None
    if q.dtype not in (torch.float16, torch.bfloat16) or not (Sq and Skv and B and Hq):
        return None  # (no keys: tilewright returns zeros, SDPA's softmax over nothing would not)
    flops = 4 * B * Hq * Sq * Skv * D // (2 if causal else 1)
    gqa = Hq != k.shape[1]
    if _takes(backend, flops):
        return AtenAttention(bool(causal), scale, gqa)
    if backend is None and _limit_unless_forced() > 0 and cudnn_faster(q, k, v, causal, scale, gqa, records_grad):
        return AtenAttention(bool(causal), scale, gqa)
    return None


def cudnn_faster(q, k, v, causal: bool, scale: float | None, gqa: bool, records_grad: bool) -> bool:
    """Whether SDPA would run this call on cuDNN's sm_90 kernels and those measured faster than tilewright's.

    Measured (H100, torch 2.11, cuDNN 9.19, same process, perf/LOG.md session 16): forward + backward, cuDNN's pair
    beat tilewright's at every head dim and mask tried - 0.30-0.88x for tilewright at head dims 64 / 96 / 128 / 256,
    causal or not, GQA (tilewright's backward is the gap); 1.03x only at B1 x S512 x hdim 64, a host-bound size the
    FLOPs limit routes anyway. Forward alone, cuDNN is faster at head dim 64 (tilewright 0.76-0.93x) and 256 (0.92x)
    and level from 72 to 128 (0.93-1.03x over sessions, H100 rows of S >= 2k); at head dim 64 the
    three-consumer forward (H200) is level or faster from 2048 keys (4096 causal: :func:`forward_keeps_kernels`).
    At head dims 72-128 (H200, session 32) the forward is slower than cuDNN's up to 2048 keys (0.80-0.99x) and level
    or faster from 4096 (1.00-1.19x, 176-key blocks: :func:`forward_keeps_kernels`); from about 1k keys it is faster
    causal with few (batch, head) pairs (1.03-1.34x, session 36: :data:`FEW_HEADS_CAUSAL`) and without the mask on
    a key length that is no multiple of 128 (1.02-1.18x: :data:`KEY_TAIL_MIN_KEYS`).
    So: a call autograd records and a forward-only call go to SDPA when SDPA's own choice for it is cuDNN -
    forward-only calls at 64 and 72-128 only where the kernels measured slower (a call it
    would give to FlashAttention-2 - cuDNN's SDPA disabled, another GPU, an unsupported shape - stays on the kernels,
    which beat FlashAttention-2 there: 1.2-2.0x forward). Traced by torch.compile the lengths decide where they are
    plain ints, the region alone otherwise (torch's choice function does not trace); the compiled graph's SDPA then
    picks its backend at run time as eager SDPA does."""
    if q.device.type != "cuda" or not cudnn_region(q.device.index, q.shape[-1], q.dtype.itemsize):
        return False
    if not records_grad and forward_keeps_kernels(q.shape[-1], q.shape[-2], k.shape[-2], causal,
                                                  q.shape[0] * q.shape[1], gqa):
        return False
    if traced_into_graph(q):
        return True
    return sdpa_choice(q, k, v, causal, scale, gqa) == "cudnn"


# Forward only, where tilewright's sm_90a kernels are level with or faster than cuDNN's, per head dim: (least query
# rows, least keys) without the mask, the same with it. H200, torch 2.11, cuDNN 9.19, same process.
# Head dim 64: the three-consumer forward (cuda_fallback/attention_sm90 "c3") over 24 rows (perf/results/h200/
# attention/d64_grid_2026-11-29_1314.txt): level or faster from 4096 keys (1.020-1.136x; 0.981x at 4k causal GQA) and
# at 2048 without the mask (1.006 / 1.013x), slower at 2048 causal (0.91-0.93x) and below (0.65-0.89x at 512-1024:
# too few key blocks a CTA to hide the pipeline's fill). Rows of that grid have Sq = Skv; a call keeps the kernels
# where both lengths are past the rule's (a short Sq is fewer CTAs on the same key loop).
# Head dim 128: c / c176 over 23 rows (perf/results/h200/attention/wide_key_rule_2026-11-29_1602.txt): 0.81-0.92x at
# 1024, 0.88-0.97x at 2048 (both masks), 1.004-1.016x at 4096 without the mask and 1.05-1.07x with it, 1.05-1.19x
# from 8192; query blocks of 512 / 1024 rows on 4096 / 8192 keys without the mask 1.044 / 1.050x, 256 on 2048 0.968x.
# Head dims 72-120 run on the 128 build (zero-padded in shared memory) and take its rule: at 80 and 96 on the same 18
# rows (`forward_route_128_2026-11-29_1619_d{80,96}.txt`) the kernels ran 0.86-0.99x cuDNN below 4096 keys and
# 1.00-1.13x from there - cuDNN's time at 80 / 96 is within 3% of its time at 128, the kernels' too.
FORWARD_KERNELS_FROM = {64: ((2048, 2048), (4096, 4096)), 128: ((512, 4096), (4096, 4096))}
# Head dims 72-128 below the 4096 keys above, two more regions where the kernels are faster. H200, session 36,
# graph replays interleaved (perf/results/h200/attention/forward_route_grid*_s36.csv):
# * Causal, few (batch, head) pairs - 144 rows at each of head dims 128 and 96 (S 1024-3584 square, MHA 16 and GQA
#   32/8, 28/4 heads, B 1-8): the kernels ran 1.07-1.34x cuDNN's forward on every causal row with B x Hq <= 32 and
#   1.03-1.11x on the grouped-query ones with B x Hq <= 64; level past that (MHA B x Hq 64: 0.98-1.07x, GQA 112-128:
#   0.99-1.07x) and slower at MHA 128 (0.86-0.97x, session 32's B 8 x 16 rows too): the kernels' lead grows as the
#   pairs get fewer at every length (why cuDNN's causal forward loses there was not profiled).
# * Without the mask, a key length that is no multiple of 128: every such row from 1100 keys ran 1.02-1.18x (S 1100-
#   3900 and 2112 = 33 x 64; B x Hq 16-256; 3000 at head dim 96 too), the multiples of 128 between them 0.91-1.02x
#   (one row 1.15x: B 1 x 16 heads at 1024; 2176 = 17 x 128: 0.96-0.99x), 1000 keys level at B x Hq 64 (1.00x).
#   The key length decides, not the query rows: 3000 query rows on 2048 / 3072 keys 0.96 / 0.99x, 2048 / 3072 query
#   rows on 3000 keys 1.09 / 1.08-1.11x (cuDNN appears to pay for a partial last key block; the kernels mask only
#   that block).
FEW_HEADS_CAUSAL = {False: 32, True: 64}  # grouped-query heads -> most B x Hq pairs
FEW_HEADS_MIN_LEN = 1024  # the grid's shortest rows (both lengths)
KEY_TAIL_MIN_KEYS = 1100  # without the mask: keys off the 128 grid from here (and FEW_HEADS_MIN_LEN query rows)
# (Below the FLOPs limit the small-call route takes SDPA first: B 1 x 16 heads x S 2048 causal is under it.)


def forward_keeps_kernels(head_dim, seq_q, seq_kv, causal: bool, batch_heads=None, gqa: bool = False) -> bool:
    """Whether a forward-only call stays on tilewright's kernels instead of cuDNN's (the measured rules above; head
    dims 72-120 take 128's, other head dims without a rule: no). ``batch_heads``: B x Hq (None: unknown, the length
    rules alone); ``gqa``: fewer K / V heads than query heads. Lengths that are not plain ints (symbolic, under
    tracing) keep the region's decision (cuDNN)."""
    build = 128 if 64 < head_dim <= 128 else head_dim
    rule = FORWARD_KERNELS_FROM.get(build)
    if rule is None or type(seq_q) is not int or type(seq_kv) is not int:
        return False
    least_q, least_kv = rule[1] if causal else rule[0]
    if seq_q >= least_q and seq_kv >= least_kv:
        return True
    if build != 128 or min(seq_q, seq_kv) < FEW_HEADS_MIN_LEN:
        return False
    if causal:
        return type(batch_heads) is int and batch_heads <= FEW_HEADS_CAUSAL[bool(gqa)]
    return seq_kv % 128 != 0 and seq_kv >= KEY_TAIL_MIN_KEYS


def cudnn_region(device_index, head_dim: int, itemsize: int) -> bool:
    """The shapes and GPUs of :func:`cudnn_faster`'s measurements: sm_90, fp16 / bf16, cuDNN's SDPA enabled, head
    dim a multiple of 8 up to 256 (forward-only calls at 64 and 72-128: where :func:`forward_keeps_kernels` says)."""
    if head_dim % 8 or head_dim > 256 or itemsize != 2:
        return False
    if not torch.backends.cuda.cudnn_sdp_enabled():
        return False
    return torch.cuda.get_device_capability(device_index) == (9, 0)  # measured on sm_90 only


# constant arguments (the device index, the head dim, the element size) -> dynamo calls it at trace time and keeps the
# result as a constant, as torch.compiler.assume_constant_result would (see _limit_unless_forced for why not that
# function)
cudnn_region._dynamo_marked_constant = True


def sdpa_choice(q, k, v, causal: bool, scale: float | None, gqa: bool) -> str | None:
    """The backend ``F.scaled_dot_product_attention`` picks for these tensors ("cudnn", "flash", "efficient",
    "math", ...), as torch's own dispatcher decides it (``torch._fused_sdp_choice``), or None where this torch build
    cannot say."""
    try:
        from torch.nn.attention import SDPBackend

        choice = torch._fused_sdp_choice(q, k, v, None, 0.0, bool(causal), scale=scale, enable_gqa=gqa)
        return {SDPBackend.CUDNN_ATTENTION: "cudnn", SDPBackend.FLASH_ATTENTION: "flash",
                SDPBackend.EFFICIENT_ATTENTION: "efficient", SDPBackend.MATH: "math"}.get(SDPBackend(choice))
    except Exception:  # an older / newer torch without this private entry point: keep the kernels
        return None
