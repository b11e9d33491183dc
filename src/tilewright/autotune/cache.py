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
rewritten by the next :func:`store`; nothing here raises on a bad file. The same holds per entry: a record that is
valid JSON of the wrong type or shape (a list, a number, missing keys, wrong-typed fields, a Triton config that is not
one of :data:`tilewright.autotune.space.GEMM_CONFIG_KEYS`) is dropped when the file is read, with one warning naming
the file, so :func:`lookup` at launch time, ``tilewright info`` and the tuner all see it as absent. Writes are atomic (a temporary file in the
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

from .._env import interpreting
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
        interp = interpreting()
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


def _warn_once(path: Path, message: str, kind: str | None = None) -> None:
    key = (str(path), kind or message.split(":")[0])
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"tilewright autotune cache {path}: {message}", RuntimeWarning, stacklevel=3)


def _empty() -> dict:
    return {"format": FORMAT, "devices": {}}


def _valid(data) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("devices"), dict):
        return False
    return all(isinstance(d, dict) and isinstance(d.get("entries", {}), dict) for d in data["devices"].values())


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _config_problem(backend: str, config: dict) -> str | None:
    """Why a backend's stored config cannot be launched, or None. Backends this file does not know pass unchecked."""
    if backend == "triton":
        from .space import GEMM_CONFIG_DEFAULTS, GEMM_CONFIG_KEYS

        want = set(GEMM_CONFIG_KEYS) | {"num_warps", "num_stages"}
        if set(config) | set(GEMM_CONFIG_DEFAULTS) != want:
            return (f"the triton config's keys differ from the config space's (missing {sorted(want - set(config))}, "
                    f"unknown {sorted(set(config) - want)})")
        bad = [k for k, v in config.items() if not isinstance(v, int)]  # bool is an int: the flags are bools
        return f"the triton config's {bad[0]} is not an integer" if bad else None
    if backend == "cuda":
        types = {"variant": str, "tile_order": str, "group": int}
        bad = [k for k, t in types.items() if not isinstance(config.get(k), t)]
        return f"the cuda config's {bad[0]!r} is missing or not a {types[bad[0]].__name__}" if bad else None
    return None


def record_problem(rec) -> str | None:
    """Why ``rec`` is not a usable record (layout in the module docstring), or None when every reader can use it."""
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not an object"
    backends = rec.get("backends")
    if not isinstance(backends, dict) or not backends:
        return "'backends' is missing or not a non-empty object"
    if not isinstance(rec.get("winner"), str) or rec["winner"] not in backends:
        return "'winner' is missing or names no entry of 'backends'"
    for name, best in backends.items():
        if not isinstance(best, dict) or not isinstance(best.get("config"), dict):
            return f"backends[{name!r}] is not an object with a 'config' object"
        if not isinstance(best.get("name"), str):
            return f"backends[{name!r}]['name'] is missing or not a string"
        if any(k in best and not _is_number(best[k]) for k in ("median_ms", "tflops")):
            return f"backends[{name!r}] has a time or TFLOP/s that is not a number"
        problem = _config_problem(name, best["config"])
        if problem:
            return problem
    if rec.get("peer_ms") is not None and not _is_number(rec["peer_ms"]):
        return "'peer_ms' is not a number"
    if rec.get("peer") is not None and not isinstance(rec["peer"], str):
        return "'peer' is not a string"
    return None


def _drop_bad_entries(path: Path, data: dict) -> dict:
    """``data`` without the records (and peak figures) no reader could use, after one warning per file naming them.

    Checked once per read of the file (reads are memoised), so a launch's :func:`lookup` pays nothing per call."""
    bad = []
    for key, sec in data["devices"].items():
        entries = sec.get("entries", {})
        for name in [n for n, rec in entries.items() if record_problem(rec)]:
            bad.append(f"{name!r} ({record_problem(entries[name])})")
            del entries[name]
        peak = sec.get("peak_tflops")
        if peak is not None and not (isinstance(peak, dict) and all(_is_number(v) for v in peak.values())):
            bad.append(f"peak_tflops of {key!r} (not an object of numbers)")
            del sec["peak_tflops"]
    if bad:
        _warn_once(path, f"malformed entries treated as absent: {'; '.join(bad)}; a tune of those shapes rewrites "
                         "them", kind="entries")
    return data


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
        else:
            data = _drop_bad_entries(path, data)
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


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive lock on ``<cache>.lock`` beside the file, across processes (POSIX ``flock``), for one
    read-modify-write: the atomic replace alone let two tuners that read the same file both write, the later one
    dropping the other's new entries (one process per GPU in ``tilewright tune --gpus``). Where the lock cannot be
    taken (no fcntl, a read-only folder) the write goes ahead unlocked, as before."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def store_many(items, device, path: Path | None = None, peak: dict | None = None) -> bool:
    """Save several ``(op, dtype, M, N, K, record)`` results (and optionally peak TFLOP/s facts) in one write."""
    path = Path(path or cache_path())
    with _lock, _file_lock(path):
        _memo.pop(str(path), None)  # (another process may have written within the memo's timestamp resolution)
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

    from .space import GEMM_CONFIG_DEFAULTS, GEMM_CONFIG_KEYS

    cfg = {**GEMM_CONFIG_DEFAULTS, **best["config"]}
    warps, stages = cfg.pop("num_warps", 4), cfg.pop("num_stages", 3)
    return triton.Config({k: cfg[k] for k in GEMM_CONFIG_KEYS}, num_warps=warps, num_stages=stages)


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


def merge(source, path: Path | None = None) -> tuple[int, int]:
    """Merge another cache file (``source``: e.g. one tuned on another machine with the same card, or a shared
    ``TILEWRIGHT_CACHE_DIR``'s) into this one: per device section and entry, an entry this file lacks is added and
    one tuned later (``tuned_at``) replaces this file's. Sections key on the card, its driver and the software stack
    (:func:`device_key`), so entries only land where they were measured. Returns (added, replaced); a source that is
    not a valid cache file raises ValueError naming it."""
    source = Path(source)
    try:
        parsed = json.loads(source.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{source}: not readable as a tilewright autotune cache ({type(e).__name__}: {e})") from None
    if not (isinstance(parsed, dict) and parsed.get("format") == FORMAT and _valid(parsed)):
        raise ValueError(f"{source}: not a tilewright autotune cache of format {FORMAT}")
    raw = load(source)  # its entries checked one by one (a bad one is dropped with a warning)
    path = Path(path or cache_path())
    added = replaced = 0
    with _lock, _file_lock(path):
        _memo.pop(str(path), None)
        data = json.loads(json.dumps(load(path)))
        for key, sec in raw["devices"].items():
            mine = data["devices"].setdefault(key, {"facts": sec.get("facts", {}), "entries": {}})
            mine.setdefault("entries", {})
            for name, rec in sec.get("entries", {}).items():
                old = mine["entries"].get(name)
                if old is None:
                    added += 1
                elif str(rec.get("tuned_at", "")) > str(old.get("tuned_at", "")):
                    replaced += 1
                else:
                    continue
                mine["entries"][name] = rec
            if sec.get("peak_tflops"):
                mine.setdefault("peak_tflops", {}).update(sec["peak_tflops"])
        if added or replaced:
            _write(path, data)
        _memo.pop(str(path), None)
    return added, replaced
