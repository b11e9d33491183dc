"""Drop-in modules."""
from __future__ import annotations

import torch

from .ops import _dtensor
from .ops._checks import check_backend, check_choice
from ._codes import ACTIVATIONS
from .ops.gemm import linear
from .ops.rms_norm_linear import _check_eps, rms_norm_linear


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` whose forward runs the tilewright GEMM, with an optional fused activation and residual.

    ``forward(x, residual=None)`` returns ``activation(x @ weight.T + bias) + residual``. Parameters, state dict and
    initialisation are torch.nn.Linear's, so checkpoints load unchanged.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, activation: str | None = None,
                 device=None, dtype=None, backend: str | None = None):
        check_choice("activation", activation, tuple(ACTIVATIONS))
        check_backend(backend)  # at construction, not at the first forward
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = activation
        self.backend = backend

    @classmethod
    def from_linear(cls, module: torch.nn.Linear, *, activation: str | None = None) -> "Linear":
        """A tilewright Linear sharing ``module``'s parameters (no copy)."""
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = module.in_features, module.out_features
        new.weight, new.bias = module.weight, module.bias
        check_choice("activation", activation, tuple(ACTIVATIONS))
        new.activation, new.backend = activation, None
        return new

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None, *, return_sumsq: bool = False):
        """``activation(x @ weight.T + bias) + residual`` in one kernel (the residual broadcasts to the output, e.g. a
        (S, N) pos_embed over a (B, S, K) input). Under tensor parallelism (a DTensor weight, ``parallelize_module``)
        a plain residual - the same on every rank, as a transformer's residual stream is - is taken as replicated.

        ``return_sumsq=True``: ``(y, sumsq)``, the output rows' fp32 sums of squares beside it, for the next
        :class:`RMSNormLinear` (``norm_linear(y, sumsq=sumsq)``) - a pre-norm block's output projection hands its
        residual stream to the next norm without the norm summing it again (:func:`tilewright.linear`)."""
        if residual is not None and _dtensor.is_dtensor(self.weight) and not _dtensor.is_dtensor(residual):
            residual = _dtensor.replicated_like(residual, self.weight)
        return linear(x, self.weight, self.bias, residual=residual, activation=self.activation, backend=self.backend,
                      return_sumsq=return_sumsq)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation}"


class RMSNormLinear(torch.nn.Module):
    """``nn.RMSNorm`` followed by ``nn.Linear``, computed by one fused kernel (``tilewright.rms_norm_linear``).

    Parameters: ``norm_weight`` (in_features,), ``weight`` (out_features, in_features), ``bias`` (out_features,) or
    None. ``eps=None`` means ``torch.finfo(x.dtype).eps`` at call time, as in ``torch.nn.RMSNorm``. ``activation``:
    None, or "swiglu" for a fused gate/up projection - ``weight`` holds the gate's out_features / 2 rows then the
    up's, and the output is ``silu(gate) * up``, (..., out_features / 2) (``tilewright.rms_norm_linear``'s
    ``activation``: one gated GEMM for inference on sm_90).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, eps: float | None = 1e-6,
                 device=None, dtype=None, backend: str | None = None, activation: str | None = None):
        check_backend(backend)
        check_choice("activation", activation, (None, "swiglu"))
        if activation == "swiglu" and out_features % 2:
            raise ValueError(f"out_features: with activation='swiglu' the weight holds [gate; up] rows and must be "
                             f"even, got {out_features}")
        if eps is not None:
            _check_eps(eps)
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.in_features, self.out_features, self.eps, self.backend = in_features, out_features, eps, backend
        self.activation = activation
        self.norm_weight = torch.nn.Parameter(torch.ones(in_features, **kw))
        linear_init = torch.nn.Linear(in_features, out_features, bias=bias, **kw)  # nn.Linear's initialisation
        self.weight = linear_init.weight
        self.bias = linear_init.bias

    def reset_parameters(self) -> None:
        """Re-initialise as ``nn.RMSNorm`` + ``nn.Linear`` do (norm weight ones; weight and bias as nn.Linear's):
        what a meta-device build calls after ``to_empty`` (FSDP2's deferred initialisation)."""
        with torch.no_grad():
            self.norm_weight.fill_(1.0)
        torch.nn.Linear.reset_parameters(self)  # reads self.weight / self.bias only

    @classmethod
    def from_modules(cls, rmsnorm: torch.nn.RMSNorm, linear_module: torch.nn.Linear) -> "RMSNormLinear":
        """A fused module sharing the parameters (no copy) of an ``nn.RMSNorm`` + ``nn.Linear`` pair.

        An RMSNorm without affine weight gets a ones buffer (not a parameter) as norm weight.
        """
        shape = tuple(rmsnorm.normalized_shape)
        if shape != (linear_module.in_features,):
            raise ValueError(f"rmsnorm: normalized_shape {shape} must be ({linear_module.in_features},), the "
                             "linear's in_features (the fused kernel normalises over the last dim only)")
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = linear_module.in_features, linear_module.out_features
        new.eps, new.backend, new.activation = rmsnorm.eps, None, None
        if rmsnorm.weight is not None:
            new.norm_weight = rmsnorm.weight
        else:
            w = linear_module.weight
            new.register_buffer("norm_weight", torch.ones(new.in_features, device=w.device, dtype=w.dtype))
        new.weight, new.bias = linear_module.weight, linear_module.bias
        return new

    def forward(self, x: torch.Tensor, *, sumsq: torch.Tensor | None = None) -> torch.Tensor:
        """``F.linear(F.rms_norm(x, (K,), norm_weight, eps), weight, bias)`` with the norm fused into the GEMM
        (``eps=None``: x's dtype's machine epsilon, as torch.nn.RMSNorm). ``sumsq``: x's rows' sums of squares where
        the producer of x returned them (:class:`Linear` with ``return_sumsq=True``; see
        :func:`tilewright.rms_norm_linear`)."""
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return rms_norm_linear(x, self.norm_weight, self.weight, self.bias, eps=eps, backend=self.backend,
                               sumsq=sumsq, activation=getattr(self, "activation", None))  # (modules saved before it)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, eps={self.eps}"
                + (f", activation={self.activation!r}" if getattr(self, "activation", None) else ""))
