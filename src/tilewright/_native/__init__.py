"""Host-side C helpers, built on the user's machine: one C file on the CPython API only (no torch headers).

What: ``replay_key.c``, the eager replay key of ops/_fast.py in C, and the whole hit of an ATen-routed call - key,
lookup and the route's ATen ops - in one call (``hit``; :func:`load` returns the module). Why C: a replay hit's key
in Python is ~12 frames of attribute reads, 6 us a call on the device's CPU in a tight loop and 15-35 us inside a
model's step, as much as torch's own op (perf/LOG.md, sessions 37-38).

Build: at first import, in a background thread, with the C compiler Python was built with (sysconfig ``CC``, else
``cc`` / ``gcc`` / ``clang``) against this interpreter's headers: ~0.5 s, once per machine - the result is cached in
``$TILEWRIGHT_CACHE_DIR/native`` (default ``~/.cache/tilewright/native``) under a hash of the source, the
interpreter and the platform, written by an atomic rename (concurrent processes may both build; neither reads a
partial file). Until it is loaded, and where it cannot be built (no compiler or headers: :func:`status` says why),
the Python key serves - the same key, so nothing but the host cost differs. ``TILEWRIGHT_NATIVE=0`` never builds
or loads it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

ENV = "TILEWRIGHT_NATIVE"
MODULE = "tilewright_replay_key"  # the C file's PyInit_ name
SOURCE = Path(__file__).with_name("replay_key.c")

_lock = threading.Lock()
_module = None  # the loaded extension
_thread: threading.Thread | None = None
_failure: str | None = None  # why it is not available (None: loaded or not tried yet)
_target: Path | None = None


def disabled() -> bool:
    """``TILEWRIGHT_NATIVE=0``: the Python key only."""
    return os.environ.get(ENV, "").strip() == "0"


def cache_dir() -> Path:
    """Folder of the built extension: ``$TILEWRIGHT_CACHE_DIR/native``, else ``~/.cache/tilewright/native``."""
    root = os.environ.get("TILEWRIGHT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tilewright")
    return Path(root) / "native"


def _compiler() -> str | None:
    candidates = (sysconfig.get_config_var("CC") or "").split()[:1] + ["cc", "gcc", "clang"]
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    return None


def target() -> Path:
    """Where the extension for this source, interpreter and platform is cached (computed once a process)."""
    global _target
    if _target is not None:
        return _target
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    digest = hashlib.sha256(b"\0".join([SOURCE.read_bytes(), sys.version.encode(), sys.platform.encode(),
                                        suffix.encode()])).hexdigest()[:16]
    _target = cache_dir() / f"{MODULE}-{digest}{suffix}"
    return _target


def _build(path: Path) -> None:
    """Compile the source into ``path`` (atomically); raises RuntimeError naming what is missing or what failed."""
    if os.name != "posix":
        raise RuntimeError(f"not built on {sys.platform} (POSIX only: the key reads os.environ's bytes dict)")
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (sysconfig CC, cc, gcc, clang)")
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise RuntimeError(f"Python.h not found in {include} (install the Python development headers)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=".tmp")
    os.close(fd)
    cmd = [cc, "-O2", "-shared", "-fPIC", f"-I{include}", str(SOURCE), "-o", tmp]
    if sys.platform == "darwin":
        cmd[1:1] = ["-undefined", "dynamic_lookup"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_in_background(path: Path) -> None:
    global _failure
    try:
        _build(path)
    except Exception as e:  # noqa: BLE001 - any failure leaves the Python key serving; status() reports it
        _failure = f"build failed: {e}"


def load(block: bool = False):
    """The extension module, or None while it is not available. A cached build is imported at once; otherwise the
    first call starts the build in a background thread (``block=True``: waits for it) and later calls import it
    when it is done. Never raises: a failure is kept for :func:`status`."""
    global _module, _thread, _failure
    if _module is not None or disabled():
        return _module
    with _lock:
        if _module is not None or _failure is not None:
            return _module
        try:
            path = target()
            if not path.exists():
                if _thread is None:
                    _thread = threading.Thread(target=_build_in_background, args=(path,), daemon=True,
                                               name="tilewright-native-build")
                    _thread.start()
                if not block:
                    return None
                _thread.join()
                if _failure is not None:
                    return None
            _module = _import(path)
        except Exception as e:  # noqa: BLE001
            _failure = f"load failed: {e}"
    return _module


def building() -> bool:
    """Whether a background build is running (:func:`load` picks its result up on a later call)."""
    return _thread is not None and _thread.is_alive()


def status() -> str:
    """One line: loaded (and from where), building, off, or why it is unavailable."""
    if disabled():
        return f"off ({ENV}=0): the Python replay key"
    if _module is not None:
        return f"loaded: {_module.__file__}"
    if _failure is not None:
        return f"unavailable ({_failure}): the Python replay key"
    if building():
        return "building in the background: the Python replay key until then"
    return "not loaded yet"
