"""Facts about the process and the hardware that several parts of tilewright read: one definition each.

* :func:`interpreting` - whether Triton runs under its CPU interpreter (``TRITON_INTERPRET=1``), read at every call
  because a test or a user may set it at any time.
* :func:`full_autotune` - whether a new shape may run a tuning sweep (``TILEWRIGHT_AUTOTUNE=full``, or ``1``).
* :func:`capability` - a device's compute capability (None off CUDA), for the router and the records' predicates.
* :func:`sm_count` - a device's multiprocessors (:data:`REFERENCE_SMS` off CUDA), for grid-size rules.
* :data:`SMEM_OPTIN_BYTES` - the per-block opt-in shared-memory maximum of sm_90 and sm_100 (227 KiB); the CUDA
  sources state the same number as ``TW_SMEM_OPTIN_BYTES`` in ``cuda_fallback/ptx/common.cuh`` (a CPU test keeps
  the two equal).
"""
from __future__ import annotations

import os

SMEM_OPTIN_BYTES = 227 * 1024  # cudaDevAttrMaxSharedMemoryPerBlockOptin on H100/H200/B200: 232448 bytes
# SMs of the cards the configs are tuned for (H100 / H200 SXM), where no device says otherwise: the config pruner's
# "fewer tiles than one wave" rule and the interpreter's stand-in for a device's program count.
REFERENCE_SMS = 132


# os.environ.get costs ~1 us a name on the device's CPU (str -> bytes encode, lookup, decode) - a measurable part of
# a 20 us eager call that reads several. On POSIX os.environ keeps a bytes -> bytes dict, updated by os.environ[...] =
# / del / putenv through os.environ, which is how tests and users change the switches; its lookup costs ~0.1 us.
# Elsewhere: os.environ.get.
_environ_bytes = getattr(os.environ, "_data", None) if os.name == "posix" else None


def read_env(names: tuple[str, ...], encoded: tuple[bytes, ...]) -> tuple:
    """The values of the environment variables ``names`` (``encoded``: the same names as bytes), None where unset;
    bytes on POSIX, str elsewhere (compare them only with each other, as a cache key does)."""
    if _environ_bytes is not None:
        return tuple(map(_environ_bytes.get, encoded))
    return tuple([os.environ.get(n) for n in names])


def set_env(names: frozenset) -> tuple:
    """The variables of ``names`` that are set, as sorted (name, value) pairs (``names`` as bytes on POSIX, where a
    value is bytes, else str): a cache key's form of many switches, most of them unset. On POSIX one set
    intersection in C against the environment's keys, ~0.4 us for 16 names where :func:`read_env`'s lookups cost
    ~0.8 (dev box)."""
    env = os.environ if _environ_bytes is None else _environ_bytes
    present = env.keys() & names
    if not present:
        return ()
    return tuple(sorted([(n, env[n]) for n in present]))


def interpreting() -> bool:
    """True while ``TRITON_INTERPRET=1``: Triton kernels then run on CPU tensors (correct, not fast). Read at every
    call (a test or a user may set it at any time), through the bytes dict where there is one."""
    if _environ_bytes is not None:
        return _environ_bytes.get(b"TRITON_INTERPRET", b"0") == b"1"
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def full_autotune() -> bool:
    """True when ``TILEWRIGHT_AUTOTUNE`` is ``full`` (or ``1``): a shape bucket nothing has tuned yet runs Triton's
    config sweep on its first call (seconds to minutes). Otherwise - the default - its config comes from the user's
    tuning cache (``tilewright tune``), else the shipped per-card table (``autotune/tables``), else the shape-based
    default, and the first call costs one compile."""
    return os.environ.get("TILEWRIGHT_AUTOTUNE", "").strip().lower() in ("1", "full")


def capability(device) -> tuple[int, int] | None:
    """Compute capability (major, minor) of a CUDA ``device``, None for any other device. Here, below the router and
    the backend records, so both read one definition (tests fake the router's ``_capability`` or this)."""
    if device.type != "cuda":
        return None
    import torch  # lazily: this module is read by everything, torch's CUDA queries only by some

    return torch.cuda.get_device_capability(device)


_sm_counts: dict = {}


def sm_count(device) -> int:
    """Streaming multiprocessors of a CUDA ``device`` (queried once per device index), :data:`REFERENCE_SMS` for any
    other device (the interpreter's and the CPU tests' stand-in for an H100 / H200)."""
    if device.type != "cuda":
        return REFERENCE_SMS
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    count = _sm_counts.get(index)
    if count is None:
        count = _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return count
