"""Load and launch compiled kernels through the CUDA driver API (the second piece of the CUDA runtime).

``libcuda`` is reached through ctypes (the driver's C ABI is stable; ``cuda-bindings`` is not required). Kernels run
on torch's current stream of the tensors' device, in torch's primary context. TMA descriptors come from
``cuTensorMapEncodeTiled`` and are passed by value (``__grid_constant__``). Importing this module never touches
CUDA; the first call that needs the GPU raises :class:`~.build.CudaUnavailable` with the reason on a machine without
one.

:func:`launch_cached` is the prepared-launch cache every kernel family uses: tensor maps and kernel arguments depend
only on pointers, shapes, strides and the build, so a repeated call (benchmarks, a training step's fixed buffers)
costs one ``cuLaunchKernel``.
"""
from __future__ import annotations

import ctypes
import sys
import threading

from ..._record import record
from .build import Build, CudaUnavailable

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
TMA_DTYPE = {"float16": 6, "bfloat16": 9, "float32": 7}
TMA_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
TMA_L2_PROMOTION_256B = 3


def tma_dtype(dtype) -> str:
    """The :data:`TMA_DTYPE` name of a torch dtype (``torch.bfloat16`` -> ``"bfloat16"``)."""
    return str(dtype).removeprefix("torch.")


class TensorMap(ctypes.Structure):
    """The 128-byte CUtensorMap, passed by value to a kernel's ``__grid_constant__`` parameter."""

    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


class _Driver:
    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1" if sys.platform != "win32" else "nvcuda.dll")
        except OSError as e:
            raise CudaUnavailable(f"the CUDA driver library could not be loaded ({e}); is there an NVIDIA GPU?") \
                from None
        self.check(self.lib.cuInit(0), "cuInit")
        self.lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
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
            import torch

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
        rank = len(dims)
        g_dim = (ctypes.c_uint64 * rank)(*dims)
        g_str = (ctypes.c_uint64 * max(rank - 1, 1))(*strides_bytes)
        b_dim = (ctypes.c_uint32 * rank)(*box)
        e_str = (ctypes.c_uint32 * rank)(*([1] * rank))
        with self._lock:
            base = ctypes.addressof(self._scratch)
            aligned = (base + 127) & ~127
            rc = self.lib.cuTensorMapEncodeTiled(
                ctypes.c_void_p(aligned), TMA_DTYPE[dtype], rank, ctypes.c_void_p(ptr), g_dim, g_str, b_dim, e_str,
                0, TMA_SWIZZLE[swizzle_bytes], TMA_L2_PROMOTION_256B, 0)
            if rc != 0:
                raise RuntimeError(f"cuTensorMapEncodeTiled failed: {self.error_string(rc)} (dims={list(dims)}, "
                                   f"strides={list(strides_bytes)} B, box={list(box)}, ptr=0x{ptr:x})")
            tmap = TensorMap()
            ctypes.memmove(ctypes.addressof(tmap), aligned, 128)
        return tmap

    def launch(self, fn, grid, block, smem: int, stream: int, args) -> None:
        """cuLaunchKernel with ``args``: ctypes objects in the kernel's parameter order (kept alive for the call)."""
        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        gx, gy, gz = grid
        bx, by, bz = block
        self.check(self.lib.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, smem, ctypes.c_void_p(stream), params,
                                           None), "cuLaunchKernel")


_driver: _Driver | None = None
_driver_lock = threading.Lock()


def driver() -> _Driver:
    """The process-wide driver handle; raises CudaUnavailable without a usable GPU."""
    global _driver
    if _driver is None:
        with _driver_lock:
            if _driver is None:
                import torch

                if not torch.cuda.is_available():
                    raise CudaUnavailable("torch sees no CUDA device (CPU-only torch or no GPU); the CUDA fallback "
                                          "needs an NVIDIA GPU")
                torch.cuda.init()
                _driver = _Driver()
    return _driver


PREPARED_MAX = 256  # prepared launches kept per family; the oldest goes first


def launch_cached(cache: dict, key: tuple, prepare, device, threads: int, smem: int) -> None:
    """Launch the (function, grid, kernel arguments) cached under ``key`` (``prepare()`` builds it on a miss; at most
    PREPARED_MAX entries, oldest dropped first) on ``device``'s current stream with a 1-D block of ``threads``;
    ``grid`` is a CTA count (1-D) or an (x, y, z) tuple."""
    import torch

    prepared = cache.get(key)
    if prepared is None:
        prepared = prepare()
        if len(cache) >= PREPARED_MAX:
            cache.pop(next(iter(cache)))
        cache[key] = prepared
    fn, grid, args = prepared
    # CUDA launches are not replayed eagerly (ops/_fast.py): an op recording this call gets none
    record(None, {})
    stream = torch.cuda.current_stream(device).cuda_stream
    with torch.cuda.device(device):
        driver().launch(fn, grid if isinstance(grid, tuple) else (grid, 1, 1), (threads, 1, 1), smem, stream, args)
