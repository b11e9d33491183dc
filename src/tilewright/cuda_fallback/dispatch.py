"""Which hand-written CUDA GEMM family serves a compute capability, for the router and the op layer.

    sm_90        gemm.py          gemm_sm90_pingpong.cu   WGMMA (measured on H200)
    sm_100/103   gemm_sm100.py    gemm_sm100_tcgen05.cu   tcgen05 + TMEM (never run: no such card yet)
    sm_120/121   gemm_mma.py      gemm_sm120_mma.cu       ldmatrix + mma.sync (run on H100/H200 as sm_90 code)

Every family module exposes the same surface: ``constraints``, ``preferred``, ``ready`` (first-use self-check),
``try_launch``. Modules are imported lazily (importing one never touches CUDA).
"""
from __future__ import annotations

import importlib

FAMILIES = {9: ("gemm", "sm_90a WGMMA pingpong GEMM"),
            10: ("gemm_sm100", "sm_100a tcgen05 + TMEM GEMM"),
            12: ("gemm_mma", "sm_120 ldmatrix + mma.sync GEMM")}


def gemm_module(major: int):
    """The family module for capability major ``major``, or None where no hand-written GEMM exists."""
    entry = FAMILIES.get(major)
    return importlib.import_module(f".{entry[0]}", __package__) if entry else None


def try_launch(a, b, out, bias=None, residual=None, activation=None, preact=None) -> bool:
    """The op layer's entry: the family of ``a``'s device launches, or False (Triton then runs); never raises."""
    import torch

    try:
        major = torch.cuda.get_device_capability(a.device)[0]
    except Exception:  # noqa: BLE001
        return False
    mod = gemm_module(major)
    return bool(mod) and mod.try_launch(a, b, out, bias=bias, residual=residual, activation=activation, preact=preact)
