"""Input checks shared by the ops: each failure names the argument and the rule it broke."""
from __future__ import annotations

import torch

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
        if t is not None and t.device != ref.device:
            raise ValueError(f"{name}: on device {t.device} but {ref_name} is on {ref.device}; move them to one device")


def check_out_dtype(out_dtype) -> None:
    """``out_dtype`` is None (keep the input dtype) or a supported floating dtype."""
    if out_dtype is not None and out_dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"out_dtype: {out_dtype} is not supported; use float16, bfloat16 or float32")
