"""Plain-torch reference implementations: the "torch" backend, the CPU fallback, and the tests' references.

Each computes in the dtype of its inputs, step by step, the way a user would write it unfused. Tests call them on
float64 copies of the inputs to get a high-precision reference.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def activation_reference(x: torch.Tensor, activation: str | None) -> torch.Tensor:
    """activation(x) with torch's own functions."""
    if activation is None:
        return x
    if activation == "relu":
        return torch.relu(x)
    if activation == "gelu":
        return F.gelu(x)
    if activation == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if activation == "silu":
        return F.silu(x)
    raise ValueError(f"activation: unsupported {activation!r}")


def activation_grad_reference(grad: torch.Tensor, preact: torch.Tensor, activation: str) -> torch.Tensor:
    """d activation(z) / dz * grad, in float32 (returned in grad's dtype)."""
    z = preact.float()
    g = grad.float()
    if activation == "relu":
        d = (z > 0).float()
    elif activation == "silu":
        s = torch.sigmoid(z)
        d = s * (1 + z * (1 - s))
    elif activation == "gelu":
        cdf = 0.5 * (1 + torch.erf(z * 0.7071067811865476))
        pdf = torch.exp(-0.5 * z * z) * 0.3989422804014327
        d = cdf + z * pdf
    elif activation == "gelu_tanh":
        k = 0.7978845608028654
        u = k * (z + 0.044715 * z ** 3)
        t = torch.tanh(u)
        d = 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k * (1 + 3 * 0.044715 * z * z)
    else:
        raise ValueError(f"activation: unsupported {activation!r}")
    return (g * d).to(grad.dtype)


def gemm_reference(a, b, bias=None, residual=None, activation=None, out_dtype=None) -> torch.Tensor:
    """activation(a @ b + bias) + residual, unfused, in the inputs' dtype, cast to out_dtype at the end."""
    y = a @ b
    if bias is not None:
        y = y + bias
    y = activation_reference(y, activation)
    if residual is not None:
        y = y + residual
    return y.to(out_dtype or a.dtype)
