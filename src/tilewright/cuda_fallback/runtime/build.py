"""Compile the CUDA kernels at first use and cache the cubins on disk (the first piece of the CUDA runtime).

Compilers, in order (``TILEWRIGHT_CUDA_COMPILER=nvcc|nvrtc`` forces one):
* ``nvcc`` found on PATH, in ``$CUDA_HOME/bin`` or ``/usr/local/cuda/bin``;
* NVRTC: ``libnvrtc`` from the ``nvidia-cuda-nvrtc`` wheel (``nvidia/cu13/lib`` or ``nvidia/cuda_nvrtc/lib``), from
  torch's own ``lib/`` or from the system loader path, called through ctypes (no build step, no extra package).
Sources include only ``ptx/*.cuh`` - no system headers - so both compilers take them unchanged.

Cache: ``$TILEWRIGHT_CACHE_DIR/cuda`` (default ``~/.cache/tilewright/cuda``); one ``<key>.cubin`` (+ ``.log``, the
compiler's resource report) per key = sha256 over the source, every header under ``ptx/``, the arch, the flags and
the compiler's version string. Editing a header or upgrading the compiler therefore rebuilds; writes are atomic
(temp file + rename) so concurrent processes never read half a cubin.

Loading and launching the cubins is :mod:`.launch`; nothing here touches a GPU.
"""
from __future__ import annotations

import contextlib
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

SOURCE_DIR = Path(__file__).resolve().parents[1]  # cuda_fallback/: the kernels' .cu files and ptx/
PTX_DIR = SOURCE_DIR / "ptx"
BASE_FLAGS = ("-std=c++17", "-DNDEBUG")


class CudaUnavailable(RuntimeError):
    """No GPU, no driver, or no compiler: the CUDA fallback cannot run here (the message says which)."""


COMPILER_MISSING = "no CUDA compiler found (nvcc, or `pip install nvidia-cuda-nvrtc`)"


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


def compiler_missing() -> str | None:
    """Why no CUDA kernel can be built here (no compiler), or None when one is found: what every CUDA backend
    record requires of the machine."""
    return None if toolchain() is not None else COMPILER_MISSING


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


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive advisory lock on ``path`` (created if needed) while the block runs; a no-op where fcntl is
    missing (Windows) - the cache's atomic renames keep it correct there, only duplicate work is possible."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def compile_source(source: str | Path, arch: str = "sm_90a", defines: dict | None = None,
                   tc: Toolchain | None = None, use_cache: bool = True) -> Build:
    """Compile ``source`` (a path, or a file name under cuda_fallback/) to a cubin for ``arch``, through the cache."""
    if getattr(_collecting, "on", False):  # inside prebuild's first pass: name the build, compile nothing
        raise _BuildWanted((source, arch, tuple(sorted((defines or {}).items())), tc, use_cache))
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
    directory.mkdir(parents=True, exist_ok=True)
    # one build per key at a time, also across processes (8 ranks of a job, or test workers, starting together would
    # otherwise each run the same ~30 s compile at once); different keys compile in parallel
    with _key_lock(key), _file_lock(path.with_suffix(".lock")):
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


# ------------------------------------------------------------------------------------------ parallel prebuild
class _BuildWanted(BaseException):
    """What compile_source raises inside :func:`prebuild`'s first pass: the build its caller asked for. A
    BaseException, so that no ``except Exception`` on the way up (a launcher's fallback) takes it for a failure."""

    def __init__(self, request: tuple):
        super().__init__()
        self.request = request


_collecting = threading.local()  # .on: compile_source names its build instead of compiling it (prebuild)


def prebuild(calls) -> None:
    """Compile at once, on parallel compiler processes, the builds ``calls`` will ask for: each call (a zero-argument
    function that compiles and launches, e.g. a self-check's problem) runs until its first :func:`compile_source`,
    which names its build and stops the call; the named builds that are not cached compile concurrently (threads
    around the compiler's subprocess or NVRTC, at most one per CPU and 8). The calls themselves then find their cubins
    cached. A call that asks for no build, or fails before asking, is skipped; a build that fails here is left for
    its call, which compiles it again and reports the error as it always has.

    Why: a family's first-use self-check compiles one build per epilogue / mask combination it checks, one after
    another - 10 nvcc runs, 14.1 of the 19.4 s the Llama B8 block's first forward took on a cold H200 host
    (perf/LOG.md, session 28)."""
    wanted = []
    for call in calls:
        _collecting.on = True
        try:
            call()
        except _BuildWanted as w:
            wanted.append(w.request)
        except Exception:  # noqa: BLE001 - the call itself reports it when it runs for real
            pass
        finally:
            _collecting.on = False
    wanted = list(dict.fromkeys(wanted))
    if len(wanted) < 2:
        return  # (one build: its call compiles it as soon)
    from concurrent.futures import ThreadPoolExecutor

    def compile_one(request) -> None:
        source, arch, defines, tc, use_cache = request
        try:
            compile_source(source, arch, dict(defines), tc, use_cache)
        except Exception:  # noqa: BLE001 - see above: the call compiles it again and raises
            pass

    with ThreadPoolExecutor(max_workers=min(len(wanted), os.cpu_count() or 1, 8)) as pool:
        list(pool.map(compile_one, wanted))
