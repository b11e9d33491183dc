"""The launch recorder behind the ops' eager replay (ops/_fast.py), kept below every backend so each can report.

While an op records (:func:`recording`), every kernel launch of the package reports itself with :func:`record`: a
Triton launch bound to its pointer arguments (``triton_kernels._runtime.BoundLaunch``), or None for a launch that
cannot be replayed alone (a CUDA kernel, a helper kernel whose output is no argument of the op). The op replays only
a call that made exactly one launch, a bound one.
"""
from __future__ import annotations

import contextlib
import threading

_local = threading.local()


@contextlib.contextmanager
def recording():
    """Inside: launchers append their launches to the list this yields. Recordings nest (a public function records
    while the custom op it calls records for its own replay): a launch made inside an inner recording is also a
    launch of every enclosing one, so it is handed up when the inner one ends."""
    previous = getattr(_local, "launches", None)
    launches: list = []
    _local.launches = launches
    try:
        yield launches
    finally:
        _local.launches = previous
        if previous is not None:
            previous.extend(launches)


@contextlib.contextmanager
def paused():
    """Inside: no recording (launches made here are not the caller's op's: a backend's first-use self-check)."""
    previous = getattr(_local, "launches", None)
    _local.launches = None
    try:
        yield
    finally:
        _local.launches = previous


def is_recording() -> bool:
    """Whether a launcher should bind its launch for :func:`record` (binding costs a few microseconds)."""
    return getattr(_local, "launches", None) is not None


def tensor_signature(t):
    """What a recorded (bound) launch depends on in one tensor argument besides its address (None stays None):
    shape, strides, dtype, device, and the alignment: the address mod 16 (TMA needs 16-byte bases, Triton specializes
    on them, the CUDA kernels' paired stores need 4-byte ones) and whether it is 128-byte aligned."""
    if t is None:
        return None
    ptr = t.data_ptr()
    return (t.shape, t.stride(), t.dtype, t.get_device(), ptr % 16, ptr % 128 == 0)


def record(bound, roles: dict, writes: tuple = ()) -> None:
    """Report one launch: ``bound`` (a BoundLaunch, or None when the launch could not be bound) and its pointer
    arguments ``{role: tensor}`` in the order ``bound`` takes them. ``writes``: the roles the launch writes whole -
    a later launch of the same call may read such a tensor as a scratch buffer a replay allocates (ops/_fast.build)."""
    launches = getattr(_local, "launches", None)
    if launches is not None:
        launches.append((bound, roles, writes))
