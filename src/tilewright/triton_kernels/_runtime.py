"""Launch-time helpers shared by the Triton kernel families."""
from __future__ import annotations

import functools

import torch
import triton
from triton.runtime import _allocation


@functools.cache
def _scratch_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _alloc_scratch(size: int, alignment: int, stream):
    # on the current device, from torch's caching allocator (stream-ordered, CUDA-graph aware); torch.empty rounds
    # blocks to 512 bytes, above the 128-byte alignment descriptors need
    return torch.empty(size, device=_scratch_device(), dtype=torch.int8)


def ensure_allocator() -> None:
    """Device-side tensor descriptors need a global-memory scratch allocator; install one unless the user has.

    Triton keeps the allocator in a ContextVar, i.e. per thread: autograd runs backward on its own thread, so this
    is checked at every launch (a ContextVar read), not once per process.
    """
    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        triton.set_allocator(_alloc_scratch)


def retry_after_oom(launch):
    """``launch()``; a CUDA out-of-memory it raises is retried once after ``torch.cuda.empty_cache()``.

    A kernel's first launch loads its module (cuModuleLoadData), which needs device memory outside torch's caching
    allocator; when that cache holds the free memory the load fails with "out of memory" although the call would fit
    (GPU fuzz: a 16 MB attention call beside 13 other processes). torch's own allocator frees its cache and retries
    in that situation; this gives Triton's load the same chance. Never during CUDA-graph capture, where freeing
    cached blocks is not allowed, and only once: a second OOM is real and propagates."""
    try:
        return launch()
    except RuntimeError as e:
        if "out of memory" not in str(e) or not torch.cuda.is_available() or torch.cuda.is_current_stream_capturing():
            raise
        torch.cuda.empty_cache()
        return launch()


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


class BoundLaunch:
    """One compiled Triton kernel with its grid and every non-pointer argument fixed; called with the pointers.

    Why: ``JITFunction.run`` re-derives per launch what a repeated call already knows - it binds ~50 keyword
    arguments, computes the specialization of each (divisibility, dtype), hashes them into the kernel-cache key and
    reads several Triton knobs from the environment: 25-40 us on the device's CPU, more than the kernel of a small
    GEMM. A call whose signature (shapes, strides, dtypes, 16-byte alignment of every pointer) is unchanged compiles
    to the same kernel with the same arguments but its pointers, so this hands those straight to the compiled
    kernel's C launcher. The signature check is the caller's (ops/_fast.py keys on it); this object trusts it.

    Made by :func:`bind`; called with one pointer (int) per role, in the roles' order.
    """

    __slots__ = ("_compiled", "_device", "_direct", "_function", "_grid", "_launch", "_packed", "_scratch_align",
                 "_scratch_bytes", "_slots", "_stream_slots", "_template")

    def __init__(self, compiled, grid, template: list, slots: list[int], device: int, stream_slots=()):
        self._compiled = compiled
        self._stream_slots = stream_slots  # (template position, pointer(device, stream)) of per-stream buffers
        self._launch = run = compiled.run  # the CudaLauncher: scratch allocation, then the C launch
        self._function = compiled.function
        self._packed = compiled.packed_metadata
        g = (*tuple(grid), 1, 1)
        self._grid = g[:3]
        self._template = template
        self._slots = slots  # per pointer role: the template position it fills
        self._device = device
        # Triton 3.6's CudaLauncher allocates the descriptors' global scratch (grid x CTAs x bytes) and calls its C
        # launch; with the grid fixed the size is known here, so the C launch is called directly (saves a closure
        # and two allocator calls a launch). Anything unexpected - another launcher class, a profiling scratch -
        # keeps the CudaLauncher call.
        fields = ("launch", "global_scratch_size", "global_scratch_align", "profile_scratch_size", "num_ctas",
                  "launch_cooperative_grid", "launch_pdl")
        self._direct = all(hasattr(run, f) for f in fields) and run.profile_scratch_size == 0
        size = getattr(run, "global_scratch_size", 0)
        self._scratch_bytes = self._grid[0] * self._grid[1] * self._grid[2] * getattr(run, "num_ctas", 1) * size
        self._scratch_align = getattr(run, "global_scratch_align", 1)

    def __call__(self, *pointers: int) -> None:
        args = self._template.copy()
        for i, ptr in zip(self._slots, pointers):
            args[i] = ptr
        stream = torch._C._cuda_getCurrentRawStream(self._device)
        for i, pointer in self._stream_slots:
            args[i] = pointer(self._device, stream)
        enter, exit_ = triton.knobs.runtime.launch_enter_hook, triton.knobs.runtime.launch_exit_hook
        if enter.calls or exit_.calls:  # a profiler (proton) is listening: give it what the JIT path would
            meta = self._compiled.launch_metadata(self._grid, stream, *args)
        else:
            meta = enter = exit_ = None
        if self._scratch_bytes:
            ensure_allocator()
        if self._direct:
            run = self._launch
            scratch = None
            if self._scratch_bytes:
                scratch = _allocation._allocator.get()(self._scratch_bytes, self._scratch_align, stream)
            run.launch(*self._grid, stream, self._function, run.launch_cooperative_grid, run.launch_pdl, scratch, None,
                       self._packed, meta, enter, exit_, *args)
        else:
            self._launch(*self._grid, stream, self._function, self._packed, meta, enter, exit_, *args)


BOUND_MAX = 1024  # bound launches kept per kernel family; a workload with more signatures is not one binding helps


def store_bound(cache: dict, key, value, limit: int = BOUND_MAX) -> None:
    """Keep a kernel family's bound launch(es) under ``key`` (a call signature); a full cache is emptied first, so
    memory stays bounded and a later call just binds again."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value


def bind(jit_fn, compiled, grid, kernel_args: dict, roles: dict, per_stream: dict | None = None) -> BoundLaunch | None:
    """A :class:`BoundLaunch` of ``compiled`` (what ``jit_fn[grid](**kernel_args)`` returned) whose pointer arguments
    are ``roles`` (``{kernel argument name: tensor}``, in the order the BoundLaunch takes their pointers), or None when
    the launch cannot be bound (an asynchronous compile still pending, a grid that is not three ints at most).

    Arguments are matched by name, never by identity: ``matmul(a, a)`` passes one tensor as two operands, and a later
    call with the same signature may pass two. A tensor argument outside ``roles`` is an unused placeholder (the
    launchers pass one where a constexpr switch turns the operand off; the kernel never dereferences it) and is bound
    to a null pointer, which satisfies any alignment specialization the placeholder had. ``per_stream``:
    ``{kernel argument name: pointer(device index, raw stream)}`` for buffers the launch owns per stream (split-K's
    workspace), looked up at every call on the stream it launches on."""
    if compiled is None or hasattr(compiled, "result") or len(grid) > 3 or not all(isinstance(g, int) for g in grid):
        return None
    # every kernel argument by name - a defaulted constexpr the launch left out takes its default, as the launch did
    # (a KeyError here would stop the call that tried to bind, on the device only: binding runs on CUDA launches)
    defaults = {p.name: p.default for p in getattr(jit_fn, "params", ()) if p.has_default}
    values = [kernel_args[name] if name in kernel_args else defaults[name] for name in jit_fn.arg_names]
    template = [0 if isinstance(v, torch.Tensor) else v for v in values]
    slots = [jit_fn.arg_names.index(name) for name in roles]
    stream_slots = [(jit_fn.arg_names.index(name), get) for name, get in (per_stream or {}).items()]
    # Triton compiles and launches on the current device (not the tensors'); the caller keys on it
    return BoundLaunch(compiled, grid, template, slots, torch.cuda.current_device(), stream_slots)
