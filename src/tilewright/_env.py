"""Facts about the process and the hardware that several parts of tilewright read: one definition each.

* :func:`interpreting` - whether Triton runs under its CPU interpreter (``TRITON_INTERPRET=1``), read at every call
  because a test or a user may set it at any time.
* :func:`full_autotune` - whether a new shape may run a tuning sweep (``TILEWRIGHT_AUTOTUNE=full``, or ``1``).
* :data:`SMEM_OPTIN_BYTES` - the per-block opt-in shared-memory maximum of sm_90 and sm_100 (227 KiB); the CUDA
  sources state the same number as ``TW_SMEM_OPTIN_BYTES`` in ``cuda_fallback/ptx/common.cuh`` (a CPU test keeps
  the two equal).
"""
from __future__ import annotations

import os

SMEM_OPTIN_BYTES = 227 * 1024  # cudaDevAttrMaxSharedMemoryPerBlockOptin on H100/H200/B200: 232448 bytes


def interpreting() -> bool:
    """True while ``TRITON_INTERPRET=1``: Triton kernels then run on CPU tensors (correct, not fast)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def full_autotune() -> bool:
    """True when ``TILEWRIGHT_AUTOTUNE`` is ``full`` (or ``1``): a shape bucket nothing has tuned yet runs Triton's
    config sweep on its first call (seconds to minutes). Otherwise - the default - its config comes from the user's
    tuning cache (``tilewright tune``), else the shipped per-card table (``autotune/tables``), else the shape-based
    default, and the first call costs one compile."""
    return os.environ.get("TILEWRIGHT_AUTOTUNE", "").strip().lower() in ("1", "full")
