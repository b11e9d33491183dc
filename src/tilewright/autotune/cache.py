"""Persistent autotune results: which backend and config won for an (op, dtype, shape bucket) on this GPU.

One JSON file, ``$TILEWRIGHT_CACHE_DIR/autotune.json`` (default ``~/.cache/tilewright``)::

    {"format": 1,
     "devices": {"<device key>": {"facts": {...}, "peak_tflops": {...},
                                  "entries": {"gemm|bfloat16|M4096,N4096,K4096": <record>}}}}

The device key joins the GPU name, compute capability, driver, torch and triton versions, so results from another
card or another software stack are never applied (they simply stay in the file, unmatched). A record is::

    {"winner": "cuda", "peer": "cublas", "peer_ms": 0.19,
     "backends": {"triton": {"config": {...}, "name": "...", "median_ms": 0.2, "tflops": 690},
                  "cuda":   {"config": {...}, "name": "...", "median_ms": 0.18, "tflops": 760}},
     "tuned_at": "2026-11-27T10:00:00+00:00"}

A file that cannot be parsed, has another ``format`` or the wrong structure is ignored with one warning and
rewritten by the next :func:`store`; nothing here raises on a bad file. Writes are atomic (a temporary file in the
same folder, then ``os.replace``), and a write first re-reads the file so concurrent tuners lose no entries of other
shapes. Reads are memoised per file modification time, so :func:`lookup` is cheap enough for every launch.
"""
from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import tempfile
import threading
import warnings
from pathlib import Path

import torch

FORMAT = 1
FILE_NAME = "autotune.json"

_lock = threading.Lock()
_memo: dict = {}  # path -> ((mtime_ns, size), data)
# Bumped by every write from this process: the router's decision cache (router._decisions) keys on it, so a
# `tilewright tune` in this process is seen by the next call. A write by another process is seen by decisions not
# cached yet, or after ``router.invalidate()``.
generation = 0
_warned: set = set()


def cache_dir() -> Path:
    """The cache folder: ``$TILEWRIGHT_CACHE_DIR``, else ``~/.cache/tilewright``."""
    return Path(os.environ.get("TILEWRIGHT_CACHE_DIR") or Path.home() / ".cache" / "tilewright")


def cache_path() -> Path:
    """The JSON file holding every tuned result (see the module docstring for its layout)."""
    return cache_dir() / FILE_NAME


def _driver_version() -> str:
    try:
        v = torch._C._cuda_getDriverVersion()  # e.g. 12040; private but stable for years
        return f"{v // 1000}.{v % 1000 // 10}"
    except Exception:  # noqa: BLE001 - no CUDA build, or the private helper moved
        return "none"


@functools.lru_cache(maxsize=None)
def _facts(device_type: str, index: int) -> tuple:
    import triton

    if device_type == "cuda":
        name = torch.cuda.get_device_name(index)
        cap = "sm_%d%d" % torch.cuda.get_device_capability(index)
        driver = _driver_version()
    else:
        interp = os.environ.get("TRITON_INTERPRET", "0") == "1"
        name, cap, driver = ("cpu-interpreter" if interp else "cpu"), "none", "none"
    return name, cap, driver, torch.__version__, triton.__version__


def device_facts(device=None) -> dict:
    """GPU name, capability, driver, torch and triton versions of ``device`` (default: the current GPU, else CPU)."""
    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    index = 0
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
    name, cap, driver, tv, trv = _facts(device.type, index)
    return {"gpu": name, "capability": cap, "driver": driver, "torch": tv, "triton": trv}


def device_key(device=None) -> str:
    """The string every result of ``device`` is filed under (name | capability | driver | torch | triton)."""
    f = device_facts(device)
    return f"{f['gpu']}|{f['capability']}|driver {f['driver']}|torch {f['torch']}|triton {f['triton']}"


def shape_bucket(op: str, M: int, N: int, K: int) -> str:
    """Shapes that share one tuning: M rounded up to a power of two (as the Triton launcher's key), N and K exact."""
    m = 1 << max(int(M) - 1, 0).bit_length()
    return f"M{m},N{int(N)},K{int(K)}"


def entry_key(op: str, dtype, M: int, N: int, K: int) -> str:
    """Key of one record inside a device's entries: ``op|dtype|bucket``."""
    dt = str(dtype).replace("torch.", "")
    return f"{op}|{dt}|{shape_bucket(op, M, N, K)}"


def _warn_once(path: Path, message: str) -> None:
    key = (str(path), message.split(":")[0])
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"tilewright autotune cache {path}: {message}", RuntimeWarning, stacklevel=3)


def _empty() -> dict:
    return {"format": FORMAT, "devices": {}}


def _valid(data) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("devices"), dict):
        return False
    return all(isinstance(d, dict) and isinstance(d.get("entries", {}), dict) for d in data["devices"].values())


def load(path: Path | None = None) -> dict:
    """The whole cache file as a dict; an empty cache (after one warning) when it is missing a format or unreadable."""
    path = Path(path or cache_path())
    try:
        st = path.stat()
    except OSError:
        return _empty()
    stamp = (st.st_mtime_ns, st.st_size)
    memo = _memo.get(str(path))
    if memo and memo[0] == stamp:
        return memo[1]
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        _warn_once(path, f"unreadable ({type(e).__name__}: {e}); ignored, it is rewritten by the next tune")
        data = _empty()
    else:
        if isinstance(data, dict) and data.get("format") != FORMAT:
            _warn_once(path, f"format {data.get('format')!r} is not {FORMAT} (another tilewright version); "
                             "ignored, it is rewritten by the next tune")
            data = _empty()
        elif not _valid(data):
            _warn_once(path, "unexpected structure; ignored, it is rewritten by the next tune")
            data = _empty()
    _memo[str(path)] = (stamp, data)
    return data


def _write(path: Path, data: dict) -> bool:
    """Atomic write; False (with a warning) when the folder is not writable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".autotune-", suffix=".json", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
            global generation
            generation += 1
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:
        _warn_once(path, f"cannot write ({e}); results are kept for this process only")
        return False
    return True


def _device_section(data: dict, device) -> dict:
    key = device_key(device)
    sec = data["devices"].setdefault(key, {"facts": device_facts(device), "entries": {}})
    sec.setdefault("entries", {})
    return sec


def store(op: str, device, dtype, M: int, N: int, K: int, record: dict, path: Path | None = None) -> bool:
    """Save ``record`` (see the module docstring) for this device / op / dtype / shape bucket; True when written.

    The file is re-read first (other processes may have added shapes), a bad file is replaced by a fresh one.
    """
    return store_many([(op, dtype, M, N, K, record)], device, path)


def store_many(items, device, path: Path | None = None, peak: dict | None = None) -> bool:
    """Save several ``(op, dtype, M, N, K, record)`` results (and optionally peak TFLOP/s facts) in one write."""
    path = Path(path or cache_path())
    with _lock:
        data = load(path)
        data = json.loads(json.dumps(data))  # private copy: the memo must not see a half-updated dict
        sec = _device_section(data, device)
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        for op, dtype, M, N, K, record in items:
            sec["entries"][entry_key(op, dtype, M, N, K)] = {**record, "shape": [int(M), int(N), int(K)],
                                                             "tuned_at": record.get("tuned_at", now)}
        if peak:
            sec.setdefault("peak_tflops", {}).update(peak)
        ok = _write(path, data)
        _memo.pop(str(path), None)
        return ok


def lookup(op: str, device, dtype, M: int, N: int, K: int, path: Path | None = None) -> dict | None:
    """The stored record for this op / device / dtype / shape bucket, or None (never raises).

    ``record["winner"]`` is the fastest backend measured, ``record["backends"][name]["config"]`` each backend's
    best config (see :func:`triton_config` to turn the Triton one into a ``triton.Config``).
    """
    try:
        sec = load(path)["devices"].get(device_key(device))
        if not sec:
            return None
        rec = sec["entries"].get(entry_key(op, dtype, M, N, K))
        return rec if isinstance(rec, dict) else None
    except Exception as e:  # noqa: BLE001 - a cache must never break a launch
        _warn_once(Path(path or cache_path()), f"lookup failed ({type(e).__name__}: {e})")
        return None


def peak_tflops(device, dtype, path: Path | None = None) -> float | None:
    """The card's measured peak TFLOP/s for ``dtype`` if a tune recorded one, else None."""
    sec = load(path)["devices"].get(device_key(device)) or {}
    value = (sec.get("peak_tflops") or {}).get(str(dtype).replace("torch.", ""))
    return float(value) if isinstance(value, (int, float)) else None


def triton_config(record: dict | None):
    """The Triton GEMM winner of a :func:`lookup` record as a ``triton.Config`` (None when there is none)."""
    if not record:
        return None
    best = (record.get("backends") or {}).get("triton")
    if not best or "config" not in best:
        return None
    import triton

    cfg = dict(best["config"])
    warps, stages = cfg.pop("num_warps", 4), cfg.pop("num_stages", 3)
    return triton.Config(cfg, num_warps=warps, num_stages=stages)


def cuda_variant(record: dict | None) -> dict | None:
    """The CUDA GEMM winner of a :func:`lookup` record as ``launch_cuda_gemm`` keywords (variant, tile_order,
    group), or None."""
    if not record:
        return None
    best = (record.get("backends") or {}).get("cuda")
    return dict(best["config"]) if best and "config" in best else None


def entries(device=None, path: Path | None = None) -> dict:
    """Every record stored for ``device`` (this software stack), keyed by ``op|dtype|bucket``."""
    sec = load(path)["devices"].get(device_key(device)) or {}
    return dict(sec.get("entries") or {})


def other_devices(device=None, path: Path | None = None) -> dict[str, int]:
    """Device keys in the file other than ``device``'s, with their number of entries (stale or other cards)."""
    mine = device_key(device)
    return {k: len(v.get("entries") or {}) for k, v in load(path)["devices"].items() if k != mine}
