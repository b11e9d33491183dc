"""Drop-in modules."""
from __future__ import annotations

import torch

from .ops.gemm import ACTIVATION_CODES, linear


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` whose forward runs the tilewright GEMM, with an optional fused activation and residual.

    ``forward(x, residual=None)`` returns ``activation(x @ weight.T + bias) + residual``. Parameters, state dict and
    initialisation are torch.nn.Linear's, so checkpoints load unchanged.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, activation: str | None = None,
                 device=None, dtype=None, backend: str | None = None):
        if activation not in ACTIVATION_CODES:
            raise ValueError(f"activation: unsupported {activation!r}; expected one of "
                             f"{[k for k in ACTIVATION_CODES if k]} or None")
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
        if activation not in ACTIVATION_CODES:
            raise ValueError(f"activation: unsupported {activation!r}")
        new.activation, new.backend = activation, None
        return new

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return linear(x, self.weight, self.bias, residual=residual, activation=self.activation, backend=self.backend)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation}"
