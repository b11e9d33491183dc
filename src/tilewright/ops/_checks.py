"""Input checks shared by the ops: each failure names the argument and the rule it broke."""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake  # loaded by `import torch` itself

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check_tensor(name: str, t, *, dims: tuple[int, ...] | None = None, min_dim: int | None = None) -> None:
    """``t`` is a floating tensor of a supported dtype with an allowed rank."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name}: dtype {t.dtype} is not supported; use float16, bfloat16 or float32")
    if dims is not None and t.dim() not in dims:
        raise ValueError(f"{name}: expected {' or '.join(f'{d}-D' for d in dims)}, got shape {tuple(t.shape)}")
    if min_dim is not None and t.dim() < min_dim:
        raise ValueError(f"{name}: expected at least {min_dim}-D, got shape {tuple(t.shape)}")


def check_same_dtype(ref_name: str, ref: torch.Tensor, **others) -> None:
    """Every tensor in ``others`` has ``ref``'s dtype (no silent promotion)."""
    for name, t in others.items():
        if t is not None and t.dtype != ref.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} does not match {ref_name}'s {ref.dtype}; cast one of them")


def check_same_device(ref_name: str, ref: torch.Tensor, **others) -> None:
    """Every tensor in ``others`` lives on ``ref``'s device."""
    for name, t in others.items():
        check_optional_tensor(name, t)
        if t is not None and t.device != ref.device:
            raise ValueError(f"{name}: on device {t.device} but {ref_name} is on {ref.device}; move them to one device")


def check_out_dtype(out_dtype) -> None:
    """``out_dtype`` is None (keep the input dtype) or a supported floating dtype."""
    if out_dtype is not None and out_dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"out_dtype: {out_dtype} is not supported; use float16, bfloat16 or float32")


def check_optional_tensor(name: str, t) -> None:
    """``t`` is None or a torch.Tensor (a Python list or number here is a TypeError naming the argument, not an
    AttributeError from deep inside the op)."""
    if t is not None and not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor or None, got {type(t).__name__}")


def check_choice(name: str, value, choices: tuple) -> None:
    """``value`` is one of ``choices`` (None included where allowed); unhashable or wrong-typed values are a
    TypeError/ValueError naming the argument."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name}: expected a string or None, got {type(value).__name__}")
    if value not in choices:
        named = [c for c in choices if c is not None]
        raise ValueError(f"{name}: unsupported {value!r}; expected one of {named}"
                         f"{' or None' if None in choices else ''}")


def check_backend(backend) -> None:
    """``backend`` is None or a backend name the router knows."""
    from ..router import BACKENDS

    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"backend: expected a string or None, got {type(backend).__name__}")
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend: unknown backend {backend!r}; expected one of {list(BACKENDS)} or None")


def contiguous_vector(t):
    """A 1-D parameter (bias, norm weight, scales) as the kernels read it: unit stride from its first element.

    The kernels index these as ``ptr + i`` (one stride argument fewer per vector, and a 1-D copy is tiny next to a
    GEMM); a sliced (``[::2]``) or expanded (stride 0) vector is copied here once. A contiguous one is returned as is.
    """
    if t is None or t.stride(-1) == 1 or t.numel() <= 1:
        return t
    return t.contiguous()


def unit_last(t):
    """``t`` with a unit stride on its last dim (copied once when it has none): the kernels address rows by stride
    and the last dim as ``ptr + j``. A size-1 last dim's stride is free."""
    return t if t.stride(-1) == 1 or t.shape[-1] <= 1 else t.contiguous()


def dense_grad(g):
    """An incoming gradient as the backward's GEMMs read it: an expanded one (a zero stride, as ``out.sum()`` or a
    broadcast loss hands back) is materialized once, every other one is returned as is.

    Why: an expanded operand has no TMA layout, so each backward GEMM that reads it (dA and dB, or the norm's du and
    dW) fell to the pointer path with the plain kernel's configs: the Llama layer's down-projection backward took
    ~0.94 ms a launch there, and the prefill fwd+bwd dropped from 14.5 to 12.6 ms with the copy (H100, perf/LOG.md
    Session 7) - the copy itself is one write of the gradient (64 MB there).
    """
    if g is None or g.numel() <= 1 or 0 not in g.stride():
        return g
    return g.contiguous()


def check_index_tensor(name: str, t, device) -> torch.Tensor:
    """``t`` is an int32 tensor on ``device`` (flash-attn's index dtype: cu_seqlens, cache lengths, block tables)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected an int32 torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name}: dtype {t.dtype}; expected torch.int32 (flash-attn's index dtype)")
    if t.device != device:
        raise ValueError(f"{name}: on device {t.device} but q is on {device}; move it to q's device")
    return t


def traced_into_graph(t: torch.Tensor) -> bool:
    """Whether this call is being traced into a torch.compile / export graph rather than run: dynamo tracing the
    Python, or - for the public ops that enter dynamo's graph as one node (ops/_opaque.py) - AOT autograd running it
    on fake tensors. ``torch.compiler.is_compiling()`` alone misses the second on torch 2.11 (2.13 holds it True
    for the whole compile); missed, the compiled graph got the custom ops where the ATen route should have put ATen
    ops (compiled ViT block B1 forward 0.51 -> 1.06 ms host on H200)."""
    if torch.compiler.is_compiling():
        return True
    return type(t) not in (torch.Tensor, torch.nn.Parameter) and is_fake(t)


def values_readable(t: torch.Tensor) -> bool:
    """Whether a check may read ``t``'s values on the host now: not while a CUDA graph is captured (a sync there is an
    error) or a compile traces (the values are symbolic)."""
    return not ((t.is_cuda and torch.cuda.is_current_stream_capturing()) or traced_into_graph(t))


class CheckedValues:
    """Index tensors whose *values* an op has checked (cu_seqlens, cache lengths, block tables), so that the next
    call with the same tensors, unmodified, skips the device-to-host read.

    Why: such a check reads the tensor on the host, which waits for the GPU; a model passes one offsets tensor to
    every layer of a step (32 attention calls, one set of cu_seqlens), so only the first call of a step waits. A
    tensor counts as unchanged while it is the same live object (a weak reference, never a recycled address) with the
    same ``_version`` - torch bumps it at every in-place write, through any view. ``extra``: what else the check
    depended on (totals, capacities); a different value checks again.
    """

    def __init__(self, size: int = 64):
        self._size = size
        self._seen: dict = {}

    @staticmethod
    def _key(tensors, extra) -> tuple:
        return (*((id(t), t._version) if t is not None else None for t in tensors), extra)

    def seen(self, tensors, extra) -> bool:
        """Whether these tensors, unmodified, passed the check with ``extra`` before."""
        refs = self._seen.get(self._key(tensors, extra))
        return refs is not None and all((r() is t) if r is not None else t is None for r, t in zip(refs, tensors))

    def add(self, tensors, extra) -> None:
        """Remember a passed check."""
        import weakref

        if len(self._seen) >= self._size:
            self._seen.clear()
        self._seen[self._key(tensors, extra)] = tuple(weakref.ref(t) if t is not None else None for t in tensors)


_unsafe_view = torch.ops.aten._unsafe_view.default


def output_view(t: torch.Tensor, shape) -> torch.Tensor:
    """An op's 2-D output in the caller's shape - not as a view of it, as ATen's own F.linear / matmul return theirs
    (``_unsafe_view``): autograd then treats it as an op output, not a view, so FSDP2's pre-backward hook on a
    module's output and an in-place op on it behave as on torch's outputs (FSDP2 warned that a view returned by a
    wrapped module loses its hook under an in-place op). The 2-D output itself is referenced nowhere else."""
    if t.shape == shape:
        return t
    return _unsafe_view(t, shape)
