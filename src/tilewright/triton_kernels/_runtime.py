"""Launch-time helpers shared by the Triton kernel families."""
from __future__ import annotations

import torch
import triton
from triton.runtime import _allocation


def _alloc_scratch(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda" if torch.cuda.is_available() else "cpu", dtype=torch.int8)


def ensure_allocator() -> None:
    """Device-side tensor descriptors need a global-memory scratch allocator; install one unless the user has.

    Triton keeps the allocator in a ContextVar, i.e. per thread: autograd runs backward on its own thread, so this
    is checked at every launch (a ContextVar read), not once per process.
    """
    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        triton.set_allocator(_alloc_scratch)


def is_tuned(tuner, kernel_args: dict) -> bool:
    """Whether a ``triton.autotune`` object already holds a winner for these arguments, i.e. a launch would not
    benchmark - which must not happen during CUDA-graph capture. The key is built as the autotuner builds it: the key
    arguments, then the dtypes of the tensor arguments in signature order."""
    if len(tuner.configs) <= 1:
        return True
    key = [kernel_args[k] for k in tuner.keys if k in kernel_args]
    for name in tuner.arg_names:
        arg = kernel_args.get(name)
        if hasattr(arg, "dtype"):
            key.append(str(arg.dtype))
    return tuple(key) in tuner.cache
