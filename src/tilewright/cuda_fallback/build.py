"""Compile the CUDA fallbacks at first use, cache the cubins on disk, load and launch them through the driver API.

Compilers, in order (``TILEWRIGHT_CUDA_COMPILER=nvcc|nvrtc`` forces one):
* ``nvcc`` found on PATH, in ``$CUDA_HOME/bin`` or ``/usr/local/cuda/bin``;
* NVRTC: ``libnvrtc`` from the ``nvidia-cuda-nvrtc`` wheel (``nvidia/cu13/lib`` or ``nvidia/cuda_nvrtc/lib``), from
  torch's own ``lib/`` or from the system loader path, called through ctypes (no build step, no extra package).
Sources include only ``ptx/*.cuh`` - no system headers - so both compilers take them unchanged.

Cache: ``$TILEWRIGHT_CACHE_DIR/cuda`` (default ``~/.cache/tilewright/cuda``); one ``<key>.cubin`` (+ ``.log``, the
compiler's resource report) per key = sha256 over the source, every header under ``ptx/``, the arch, the flags and
the compiler's version string. Editing a header or upgrading the compiler therefore rebuilds; writes are atomic
(temp file + rename) so concurrent processes never read half a cubin.

Driver API: ``libcuda`` through ctypes (the driver's C ABI is stable; ``cuda-bindings`` is not required). Kernels
run on torch's current stream of the tensors' device, in torch's primary context. TMA descriptors come from
``cuTensorMapEncodeTiled`` and are passed by value (``__grid_constant__``). Importing this module never touches
CUDA; the first call that needs the GPU raises :class:`CudaUnavailable` with the reason on a machine without one.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
PTX_DIR = SOURCE_DIR / "ptx"
BASE_FLAGS = ("-std=c++17", "-DNDEBUG")


class CudaUnavailable(RuntimeError):
    """No GPU, no driver, or no compiler: the CUDA fallback cannot run here (the message says which)."""


class CompileError(RuntimeError):
    """The compiler rejected a source; the message carries its log."""


# ----------------------------------------------------------------------------------------------- compilers
@dataclass(frozen=True)
class Toolchain:
    """The CUDA compiler found on this machine (nvcc or NVRTC) and its version, part of the cubin cache key."""
    kind: str     # "nvcc" or "nvrtc"
    path: str     # nvcc binary or libnvrtc shared object
    version: str  # the compiler's own version string (part of the cache key)

    def __str__(self) -> str:
        return f"{self.kind} {self.version} ({self.path})"


def find_cuda_tool(name: str, extra: tuple[str, ...] = ()) -> str | None:
    """An executable CUDA tool: PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, then ``extra``."""
    candidates = [shutil.which(name)]
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(os.path.join(os.environ[env], "bin", name))
    candidates += [f"/usr/local/cuda/bin/{name}", *extra]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _nvrtc_candidates() -> list[str]:
    found = []
    for base in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", "torch/lib"):
            found += sorted(glob.glob(os.path.join(base, sub, "libnvrtc.so*")), reverse=True)
    lib = ctypes.util.find_library("nvrtc")
    if lib:
        found.append(lib)
    # builtins / alt libraries next to libnvrtc are not the compiler itself
    return [f for f in found if "builtins" not in os.path.basename(f) and "alt" not in os.path.basename(f)]


@functools.lru_cache(maxsize=None)
def _load_nvrtc(path: str):
    lib = ctypes.CDLL(path)
    major, minor = ctypes.c_int(), ctypes.c_int()
    if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
        raise OSError("nvrtcVersion failed")
    return lib, f"{major.value}.{minor.value}"


@functools.lru_cache(maxsize=None)
def _toolchain(preference: str) -> Toolchain | None:
    if preference in ("auto", "nvcc"):
        nvcc = find_cuda_tool("nvcc")
        if nvcc:
            try:
                out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
                m = re.search(r"release ([\d.]+), V([\d.]+)", out)
                return Toolchain("nvcc", nvcc, m.group(2) if m else out.strip().splitlines()[-1])
            except (OSError, subprocess.SubprocessError):
                pass
    if preference in ("auto", "nvrtc"):
        for path in _nvrtc_candidates():
            try:
                _, version = _load_nvrtc(path)
                return Toolchain("nvrtc", path, version)
            except OSError:
                continue
    return None


def toolchain() -> Toolchain | None:
    """The compiler that would build the CUDA fallbacks here, or None (the router then skips the CUDA backend)."""
    return _toolchain(os.environ.get("TILEWRIGHT_CUDA_COMPILER", "auto").lower())


def cache_dir() -> Path:
    """Folder of the cubin cache: $TILEWRIGHT_CACHE_DIR, else ~/.cache/tilewright (created on demand)."""
    root = os.environ.get("TILEWRIGHT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tilewright")
    return Path(root) / "cuda"


def _source_bundle(source: Path) -> str:
    parts = [source.read_text()]
    # a thin variant source (rmsnorm_gemm_sm90.cu) includes a sibling kernel body: hash that too
    for name in re.findall(r'^#include "([\w.]+\.cu)"', parts[0], re.M):
        parts.append(f"// --- {name}\n{(source.parent / name).read_text()}")
    for header in sorted(PTX_DIR.glob("*.cuh")):
        parts.append(f"// --- {header.name}\n{header.read_text()}")
    return "\n".join(parts)


def cache_key(source: str | Path, arch: str, flags: tuple[str, ...], tc: Toolchain) -> str:
    """Hex digest identifying one build: source + headers, arch, flags, compiler kind and version."""
    text = _source_bundle(Path(source)) if isinstance(source, Path) else source
    h = hashlib.sha256()
    for part in (text, arch, "\0".join(flags), tc.kind, tc.version):
        h.update(part.encode())
        h.update(b"\x00\x01")
    return h.hexdigest()[:32]


@dataclass
class Build:
    """A compiled kernel: its cubin, the ptxas resource report and the cache key it was stored under."""
    cubin: bytes
    log: str       # the compiler's resource report / warnings
    key: str
    path: Path     # cached cubin
    cached: bool   # True when read back from the cache
    toolchain: Toolchain


def _arch_flags_nvcc(arch: str) -> list[str]:
    num = arch.removeprefix("sm_")
    return ["-gencode", f"arch=compute_{num},code={arch}"]


def _compile_nvcc(tc: Toolchain, source: Path, arch: str, flags: tuple[str, ...], out: Path) -> str:
    cmd = [tc.path, "-cubin", *_arch_flags_nvcc(arch), "-O3", *flags, "-Xptxas", "-v", "-I", str(SOURCE_DIR),
           str(source), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise CompileError(f"nvcc failed for {source.name} ({arch}, {' '.join(flags)}):\n{log}")
    return log


def _compile_nvrtc(tc: Toolchain, source: Path, arch: str, flags: tuple[str, ...]) -> tuple[bytes, str]:
    lib, _ = _load_nvrtc(tc.path)
    prog = ctypes.c_void_p()
    src = source.read_bytes()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src, source.name.encode(), 0, None, None)
    if rc != 0:
        raise CompileError(f"nvrtcCreateProgram failed ({rc})")
    try:
        opts = [f"--gpu-architecture={arch}", "-default-device", f"--include-path={SOURCE_DIR}",
                "--ptxas-options=-v", *flags]
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if rc != 0:
            raise CompileError(f"NVRTC failed for {source.name} ({arch}, {' '.join(flags)}):\n{log}")
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        if lib.nvrtcGetCUBIN(prog, cubin) != 0:
            raise CompileError("nvrtcGetCUBIN failed (is the arch a real sm_XX target?)")
        return cubin.raw, log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


_memo: dict = {}
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _key_lock(key: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def compile_source(source: str | Path, arch: str = "sm_90a", defines: dict | None = None,
                   tc: Toolchain | None = None, use_cache: bool = True) -> Build:
    """Compile ``source`` (a path, or a file name under cuda_fallback/) to a cubin for ``arch``, through the cache."""
    source = Path(source)
    if not source.is_absolute():
        source = SOURCE_DIR / source
    tc = tc or toolchain()
    if tc is None:
        raise CudaUnavailable("no CUDA compiler found: install the CUDA toolkit (nvcc) or `pip install "
                              "nvidia-cuda-nvrtc`")
    flags = tuple(BASE_FLAGS) + tuple(f"-D{k}={v}" for k, v in sorted((defines or {}).items()))
    memo_key = (str(source), arch, flags, tc)
    if use_cache and memo_key in _memo:  # sources are package data: read and hashed once per process
        return _memo[memo_key]
    key = cache_key(source, arch, flags, tc)
    directory = cache_dir()
    path = directory / f"{source.stem}-{arch}-{key}.cubin"
    log_path = path.with_suffix(".log")
    with _key_lock(key):  # one build per key at a time; different keys compile in parallel
        if use_cache and path.is_file():
            log = log_path.read_text() if log_path.is_file() else ""
            _memo[memo_key] = Build(path.read_bytes(), log, key, path, True, tc)
            return _memo[memo_key]
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            tmp_cubin = Path(tmp) / "out.cubin"
            if tc.kind == "nvcc":
                log = _compile_nvcc(tc, source, arch, flags, tmp_cubin)
                cubin = tmp_cubin.read_bytes()
            else:
                cubin, log = _compile_nvrtc(tc, source, arch, flags)
                tmp_cubin.write_bytes(cubin)
            tmp_log = Path(tmp) / "out.log"
            tmp_log.write_text(log)
            os.replace(tmp_log, log_path)
            os.replace(tmp_cubin, path)
    _memo[memo_key] = Build(cubin, log, key, path, False, tc)
    return _memo[memo_key]


# ----------------------------------------------------------------------------------------------- driver API
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
TMA_DTYPE = {"float16": 6, "bfloat16": 9, "float32": 7}
TMA_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
TMA_L2_PROMOTION_256B = 3


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
