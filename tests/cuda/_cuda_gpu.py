"""Shared by the CUDA families' GPU-tier tests (imported by name: pytest puts this folder on sys.path)."""
from __future__ import annotations

import importlib

import pytest
import torch


def cuda_family(name: str, majors=None, why: str = "sm_90a kernel: needs an H100/H200"):
    """The module ``tilewright.cuda_fallback.<name>``, or a skip saying what is missing: a CUDA device whose
    capability major is in ``majors`` (None: any), and a CUDA compiler (nvcc or NVRTC)."""
    if majors is not None and not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] in majors):
        pytest.skip(why)
    from tilewright.cuda_fallback.runtime import build

    if build.toolchain() is None:
        pytest.skip("no CUDA compiler on this machine")
    return importlib.import_module(f"tilewright.cuda_fallback.{name}")
