"""Load and launch compiled kernels through the CUDA driver API (the second piece of the CUDA runtime).

``libcuda`` is reached through ctypes (the driver's C ABI is stable; ``cuda-bindings`` is not required). Kernels run
on torch's current stream of the tensors' device, in torch's primary context. TMA descriptors come from
``cuTensorMapEncodeTiled`` and are passed by value (``__grid_constant__``). Importing this module never touches
CUDA; the first call that needs the GPU raises :class:`~.build.CudaUnavailable` with the reason on a machine without
one.

:func:`launch_cached` is the prepared-launch cache every kernel family uses: tensor maps and kernel arguments depend
only on pointers, shapes, strides and the build, so a repeated call (benchmarks, a training step's fixed buffers)
costs one ``cuLaunchKernel``. A call whose pointers are new (a model's activations) re-prepares; for those the op
layer's eager replay (ops/_fast.py) gets a :class:`BoundCudaLaunch` instead: the prepared launch with its operands'
roles, which re-encodes only the maps of the new addresses (one driver call each, from stored arguments).
"""
from __future__ import annotations

import ctypes
import sys
import threading

import torch

from ..._record import is_recording, record
from .build import Build, CudaUnavailable

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
# CUtensorMapDataType codes; the 8-bit floats travel as UINT8 (TMA copies bytes; the MMA reads the format)
TMA_DTYPE = {"float16": 6, "bfloat16": 9, "float32": 7, "float8_e4m3fn": 0, "float8_e5m2": 0}
TMA_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
TMA_L2_PROMOTION_256B = 3


def tma_dtype(dtype) -> str:
    """The :data:`TMA_DTYPE` name of a torch dtype (``torch.bfloat16`` -> ``"bfloat16"``)."""
    return str(dtype).removeprefix("torch.")


class TensorMap(ctypes.Structure):
    """The 128-byte CUtensorMap, passed by value to a kernel's ``__grid_constant__`` parameter. Maps made by
    :meth:`_Driver.encode_tiled` also carry ``spec`` (their :class:`TiledMapSpec`) and ``ptr`` (the address encoded)."""

    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


class TiledMapSpec:
    """Every argument of ``cuTensorMapEncodeTiled`` but the base address, as ready ctypes values: a bound launch
    re-encodes a map for a new address with one driver call and no argument conversion."""

    __slots__ = ("box", "dims", "dtype", "elem_strides", "rank", "strides", "swizzle", "text")

    def __init__(self, dtype: str, dims, strides_bytes, box, swizzle_bytes: int):
        self.rank = len(dims)
        self.dtype = TMA_DTYPE[dtype]
        self.dims = (ctypes.c_uint64 * self.rank)(*dims)
        self.strides = (ctypes.c_uint64 * max(self.rank - 1, 1))(*strides_bytes)
        self.box = (ctypes.c_uint32 * self.rank)(*box)
        self.elem_strides = (ctypes.c_uint32 * self.rank)(*([1] * self.rank))
        self.swizzle = TMA_SWIZZLE[swizzle_bytes]
        self.text = f"dims={list(dims)}, strides={list(strides_bytes)} B, box={list(box)}"


class _Driver:
    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1" if sys.platform != "win32" else "nvcuda.dll")
        except OSError as e:
            raise CudaUnavailable(f"the CUDA driver library could not be loaded ({e}); is there an NVIDIA GPU?") \
                from None
        self.check(self.lib.cuInit(0), "cuInit")
        self.lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self.lib.cuMemsetD32Async.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
        self.lib.cuTensorMapEncodeTiled.argtypes = [
            ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
            ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.lib.cuModuleGetFunction.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
        self.lib.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        self.lib.cuModuleLoadData.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        self._functions: dict = {}
        self._lock = threading.Lock()
        # a 64-byte aligned scratch for cuTensorMapEncodeTiled, which requires an aligned destination
        self._scratch = ctypes.create_string_buffer(256)

    def error_string(self, rc: int) -> str:
        s = ctypes.c_char_p()
        self.lib.cuGetErrorString(rc, ctypes.byref(s))
        return s.value.decode() if s.value else f"CUresult {rc}"

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: {self.error_string(rc)} ({rc})")

    def _ensure_context(self) -> int:
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            dev = torch.cuda.current_device()
            self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
            self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return ctx.value

    def function(self, build: Build, name: str, dynamic_smem: int):
        """The kernel ``name`` of ``build``'s cubin in the current context (loaded once per context)."""
        ctx = self._ensure_context()
        key = (ctx, build.key, name)
        with self._lock:
            fn = self._functions.get(key)
            if fn is None:
                mod = ctypes.c_void_p()
                self.check(self.lib.cuModuleLoadData(ctypes.byref(mod), build.cubin), f"cuModuleLoadData({name})")
                f = ctypes.c_void_p()
                self.check(self.lib.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()),
                           f"cuModuleGetFunction({name})")
                if dynamic_smem > 48 * 1024:
                    self.check(self.lib.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                           dynamic_smem), "cuFuncSetAttribute(max dynamic smem)")
                fn = self._functions[key] = f
        return fn

    def encode_tiled(self, dtype: str, ptr: int, dims, strides_bytes, box, swizzle_bytes: int) -> TensorMap:
        """cuTensorMapEncodeTiled for a tensor of ``dims`` (innermost first) with row strides in bytes."""
        spec = TiledMapSpec(dtype, dims, strides_bytes, box, swizzle_bytes)
        tmap = self.encode(spec, ptr)
        tmap.spec = spec
        return tmap

    def encode(self, spec: TiledMapSpec, ptr: int) -> TensorMap:
        """The map of ``spec`` at address ``ptr``."""
        with self._lock:
            # the driver writes the map to a 64-byte aligned destination; a ctypes Structure is not, so it is
            # encoded into the aligned scratch and copied out
            aligned = (ctypes.addressof(self._scratch) + 127) & ~127
            rc = self.lib.cuTensorMapEncodeTiled(
                aligned, spec.dtype, spec.rank, ptr, spec.dims, spec.strides, spec.box, spec.elem_strides, 0,
                spec.swizzle, TMA_L2_PROMOTION_256B, 0)
            if rc != 0:
                raise RuntimeError(f"cuTensorMapEncodeTiled failed: {self.error_string(rc)} ({spec.text}, "
                                   f"ptr=0x{ptr:x})")
            tmap = TensorMap()
            ctypes.memmove(ctypes.addressof(tmap), aligned, 128)
        tmap.ptr = ptr
        return tmap

    def launch(self, fn, grid, block, smem: int, stream: int, args) -> None:
        """cuLaunchKernel with ``args``: ctypes objects in the kernel's parameter order (kept alive for the call)."""
        self.launch_params(fn, grid, block, smem, stream,
                           (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args]))

    def launch_params(self, fn, grid, block, smem: int, stream: int, params) -> None:
        """cuLaunchKernel with a ready parameter array (``c_void_p`` addresses of the arguments, alive for the
        call); ``stream`` a raw stream handle (int)."""
        gx, gy, gz = grid
        bx, by, bz = block
        rc = self.lib.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, smem, stream, params, None)
        if rc:
            self.check(rc, "cuLaunchKernel")

    def zero_u32(self, ptr: int, count: int, stream: int) -> None:
        """cuMemsetD32Async: ``count`` 32-bit words at ``ptr`` set to 0, in stream order (a memset node when the
        stream is being captured into a CUDA graph)."""
        self.check(self.lib.cuMemsetD32Async(ptr, 0, count, stream), "cuMemsetD32Async")


_driver: _Driver | None = None
_driver_lock = threading.Lock()


def driver() -> _Driver:
    """The process-wide driver handle; raises CudaUnavailable without a usable GPU."""
    global _driver
    if _driver is None:
        with _driver_lock:
            if _driver is None:
                if not torch.cuda.is_available():
                    raise CudaUnavailable("torch sees no CUDA device (CPU-only torch or no GPU); the CUDA fallback "
                                          "needs an NVIDIA GPU")
                torch.cuda.init()
                _driver = _Driver()
    return _driver


PREPARED_MAX = 256  # prepared launches kept per family; the oldest goes first
MAPS_PER_SLOT = 16  # encoded maps a bound launch keeps per operand (BoundCudaLaunch)


def launch_cached(cache: dict, key: tuple, prepare, device, threads: int, smem: int, roles: dict | None = None,
                  zero: dict | None = None) -> None:
    """Launch the (function, grid, kernel arguments) cached under ``key`` (``prepare()`` builds it on a miss; at most
    PREPARED_MAX entries, oldest dropped first) on ``device``'s current stream with a 1-D block of ``threads``;
    ``grid`` is a CTA count (1-D) or an (x, y, z) tuple.

    ``roles``: ``{role: tensor}`` for the arguments ``prepare`` tagged with :func:`tag` (role names as the ops'
    replays know them, e.g. ``a_ptr``, ``Q``). An op recording this call (_record.recording) gets a
    :class:`BoundCudaLaunch` of it; without ``roles`` it gets an unbound launch, which keeps the op on its full
    path. ``zero``: ``{role: n}`` - the first n 32-bit words of those roles' tensors set to 0 in stream order right
    before the kernel (counters the kernel's CTAs signal through; recorded as buffers the launch writes whole, so a
    replay may pass fresh, uninitialised ones)."""
    prepared = cache.get(key)
    if prepared is None:
        prepared = prepare()
        if len(cache) >= PREPARED_MAX:
            cache.pop(next(iter(cache)))
        cache[key] = prepared
    fn, grid, args = prepared
    grid = grid if isinstance(grid, tuple) else (grid, 1, 1)
    stream = torch.cuda.current_stream(device).cuda_stream
    with torch.cuda.device(device):
        for role, n in (zero or {}).items():
            driver().zero_u32(roles[role].data_ptr(), n, stream)
        driver().launch(fn, grid, (threads, 1, 1), smem, stream, args)
    if is_recording():
        bound = None if roles is None else bind_cuda(fn, grid, threads, smem, args, roles, device, zero)
        record(bound, roles if bound is not None else {}, tuple(zero or ()) if bound is not None else ())


def tag(arg, role: str):
    """``arg`` (a tensor map or a pointer argument of a prepared launch) marked as holding the address of the
    tensor in ``role``; returned for use inline."""
    arg.role = role
    return arg


def pointer(role: str, t) -> ctypes.c_uint64:
    """A pointer argument: ``t``'s address (0 for None), tagged with ``role`` when there is a tensor."""
    if t is None:
        return ctypes.c_uint64(0)
    return tag(ctypes.c_uint64(t.data_ptr()), role)


class BoundCudaLaunch:
    """One prepared CUDA launch with every argument fixed but its operands' addresses; called with one pointer (int)
    per role, in the roles' order.

    Why: a CUDA family's launch path (checks, variant, build lookup, the A/B/out tensor maps encoded through ctypes)
    costs 130-450 us a call on the device's CPU when the operands' addresses are new, which is every call in a model
    (activations are fresh allocations). For a signature the op has seen (ops/_fast.py keys on shapes, strides,
    dtypes and alignment), only the addresses differ: a map is re-encoded from its stored :class:`TiledMapSpec`, a
    pointer argument rewritten, and the rest of the argument list reused. The signature check is the caller's.

    Encoding a map through ctypes costs ~10 us; a training loop's steady state hands the same few addresses back
    (torch's caching allocator), so each map slot keeps the maps of its last :data:`MAPS_PER_SLOT` addresses.

    The kernel parameter array (one address per argument, what cuLaunchKernel reads) is built once: a call writes
    its pointers into the launch's own ``c_uint64`` arguments and the chosen maps' addresses into the array, then
    launches - no argument list copy, no new ctypes objects, no array per call (12.5 -> ~4 us of Python a launch on
    the dev box with a no-op driver call). The driver copies the parameters at the launch, and a lock keeps two
    threads launching the same bound launch from writing each other's pointers in between.

    ``zero``: (position among the roles, 32-bit words) of the roles whose buffers are zeroed in stream order right
    before each launch (see :func:`launch_cached`)."""

    __slots__ = ("_args", "_block", "_device", "_fn", "_grid", "_lock", "_maps", "_params", "_slots", "_smem", "_zero")

    def __init__(self, fn, grid: tuple, threads: int, smem: int, args: list, slots: list, device: int,
                 zero: tuple = ()):
        self._fn, self._grid, self._block, self._smem = fn, grid, (threads, 1, 1), smem
        self._zero = zero
        self._args = list(args)  # (keeps every argument the parameter array points at alive)
        for i, spec in slots:
            if spec is None:  # a pointer slot: this launch's own argument, rewritten per call
                self._args[i] = ctypes.c_uint64(self._args[i].value)
        self._params = (ctypes.c_void_p * len(self._args))(*[ctypes.addressof(a) for a in self._args])
        self._slots = slots  # per role: (argument index, TiledMapSpec of a map argument, or None for a pointer)
        self._maps = [{} for _ in slots]  # per role: {address: (encoded map, its address)} (map slots only)
        self._device = device
        self._lock = threading.Lock()

    def __call__(self, *pointers: int) -> None:
        args, params = self._args, self._params
        with self._lock:
            for (i, spec), maps, ptr in zip(self._slots, self._maps, pointers):
                if spec is None:
                    args[i].value = ptr
                    continue
                entry = maps.get(ptr)
                if entry is None:
                    if len(maps) >= MAPS_PER_SLOT:
                        maps.clear()
                    tmap = driver().encode(spec, ptr)
                    entry = maps[ptr] = (tmap, ctypes.addressof(tmap))
                params[i] = entry[1]
            stream = torch._C._cuda_getCurrentRawStream(self._device)
            if torch._C._cuda_getDevice() == self._device:
                self._launch(stream, params, pointers)
            else:  # the launch runs in the current context: make it the tensors' device's
                with torch.cuda.device(self._device):
                    self._launch(stream, params, pointers)

    def _launch(self, stream: int, params, pointers) -> None:
        drv = driver()
        for position, words in self._zero:
            drv.zero_u32(pointers[position], words, stream)
        drv.launch_params(self._fn, self._grid, self._block, self._smem, stream, params)


def bind_cuda(fn, grid: tuple, threads: int, smem: int, args: list, roles: dict, device,
              zero: dict | None = None) -> BoundCudaLaunch | None:
    """A :class:`BoundCudaLaunch` of a prepared launch whose ``roles`` (``{role: tensor}``) are its tagged address
    arguments (:func:`tag`), or None when they do not match one to one - a role without its argument, a tagged
    argument no role names, an argument not at its tensor's address (a copy): nothing is bound on a guess.
    ``zero``: as :func:`launch_cached` takes it."""
    tagged = {a.role: i for i, a in enumerate(args) if getattr(a, "role", None) is not None}
    if set(tagged) != set(roles) or sum(getattr(a, "role", None) is not None for a in args) != len(tagged):
        return None
    slots = []
    for role, t in roles.items():
        i = tagged[role]
        arg = args[i]
        if isinstance(arg, TensorMap) and getattr(arg, "ptr", None) == t.data_ptr():
            slots.append((i, arg.spec))
        elif isinstance(arg, ctypes.c_uint64) and arg.value == t.data_ptr():
            slots.append((i, None))
        else:
            return None
    order = list(roles)
    zeroed = tuple((order.index(role), words) for role, words in (zero or {}).items())
    return BoundCudaLaunch(fn, grid, threads, smem, args, slots, device.index if device.index is not None else 0,
                           zeroed)


def launch_bound(cache: dict, sig: tuple, prepare, device, threads: int, smem: int, roles: dict,
                 zero: dict | None = None) -> bool:
    """Launch through the :class:`BoundCudaLaunch` cached under the call signature ``sig`` (bound from ``prepare()``
    on a miss; at most PREPARED_MAX, oldest dropped first), recording it for an op that records; False, launching
    nothing, when the prepared launch cannot be bound (:func:`bind_cuda`) - the caller then uses
    :func:`launch_cached`.

    Why per signature and not per address (:func:`launch_cached`'s key): an op calls its kernel with fresh output
    and scratch buffers every call, and a prepare per new address (the tensor maps encoded through ctypes) is the
    130-450 us of host a bound launch exists to avoid. ``sig`` must hold everything but the addresses: the roles'
    tensor signatures, the variant and every scalar argument (and what decides ``zero``, which is bound with the
    launch: see :func:`launch_cached`)."""
    bound = cache.get(sig)
    if bound is None:
        fn, grid, args = prepare()
        bound = bind_cuda(fn, grid if isinstance(grid, tuple) else (grid, 1, 1), threads, smem, args, roles, device,
                          zero)
        if len(cache) >= PREPARED_MAX:
            cache.pop(next(iter(cache)))
        bound = cache[sig] = bound if bound is not None else False  # (False: not bindable - no prepare per call)
    if bound is False:
        return False
    bound(*[t.data_ptr() for t in roles.values()])
    if is_recording():
        record(bound, roles, tuple(zero or ()))
    return True
