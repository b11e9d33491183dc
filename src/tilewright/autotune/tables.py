"""Shipped, measured config tables: which Triton GEMM config to use for a shape bucket on a given card, without a
tuning sweep at the first call.

One JSON file per card in ``autotune/tables/`` (package data), named by :func:`card_slug` of the GPU's name::

    {"format": 1, "card": "NVIDIA H100 80GB HBM3", "capability": "9.0",
     "source": {"date": "...", "torch": "...", "triton": "...", "sweep": "perf/tune/<card>/<stamp>"},
     "entries": {"gemm|bfloat16|M4096,N4096,K4096": <record>}}

A record has the tuning cache's layout (``autotune/cache.py``: ``backends.triton.config`` with ``num_warps`` /
``num_stages``), so ``cache.triton_config`` reads both. ``tilewright tune --export-table FILE`` writes a table from
this machine's tuning cache; it is committed here once measured. Unlike the cache, a table is keyed by card name and
capability only (not driver / torch / triton versions): it is a measured starting point that a launch re-checks
against the pruner, and a user's own ``tilewright tune`` result always wins over it.

For a bucket the table lacks, :func:`lookup` takes the nearest entry of the same op and dtype (distance in log2 of
M, N and K), if one lies within :data:`NEAREST_MAX_LOG2` - a simple model: neighbouring shapes share their best tile.
Anything unreadable is ignored with one warning; nothing here raises into a launch.
"""
from __future__ import annotations

import functools
import json
import math
import re
import warnings
from pathlib import Path

from . import cache

FORMAT = 1
TABLE_DIR = Path(__file__).with_name("tables")
NEAREST_MAX_LOG2 = 2.0  # sum over M, N, K of |log2 ratio|: at most e.g. M 4x off, or M and N 2x off each
_KEY = re.compile(r"^(?P<op>[a-z_]+)\|(?P<dtype>[a-z0-9_]+)\|M(?P<M>\d+),N(?P<N>\d+),K(?P<K>\d+)$")


def card_slug(name: str) -> str:
    """File stem of a card's table: its name, lower case, runs of other characters as one '_'."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def table_path(device=None) -> Path:
    """Where the table of ``device``'s card lives (it may not exist)."""
    return TABLE_DIR / f"{card_slug(cache.device_facts(device)['gpu'])}.json"


def problem(data) -> str | None:
    """Why ``data`` is not a usable table, or None."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return f"not a format-{FORMAT} table"
    if not isinstance(data.get("card"), str) or not isinstance(data.get("entries"), dict):
        return "missing 'card' or 'entries'"
    for key, rec in data["entries"].items():
        if not _KEY.match(str(key)):
            return f"entry key {key!r} is not op|dtype|M..,N..,K.."
        why = cache.record_problem(rec)
        if why:
            return f"entry {key}: {why}"
    return None


@functools.lru_cache(maxsize=16)
def _load(path: str) -> dict | None:
    p = Path(path)
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        warnings.warn(f"tilewright: config table {p} unreadable ({e}); using default configs", stacklevel=3)
        return None
    why = problem(data)
    if why:
        warnings.warn(f"tilewright: config table {p} ignored: {why}", stacklevel=3)
        return None
    return data


def load(device=None, path: Path | None = None) -> dict | None:
    """The table for ``device``'s card (or the file ``path``), None when there is none or it is unusable, or when
    it was measured on another card or capability than ``device``'s."""
    data = _load(str(path or table_path(device)))
    if data is None:
        return None
    facts = cache.device_facts(device)
    if data["card"] != facts["gpu"] or str(data.get("capability", facts["capability"])) != str(facts["capability"]):
        return None
    return data


def lookup(op: str, device, dtype, M: int, N: int, K: int, path: Path | None = None) -> dict | None:
    """The table's record for this bucket, else the nearest record of the same op and dtype within
    :data:`NEAREST_MAX_LOG2`, else None. Never raises."""
    try:
        data = load(device, path)
        if data is None:
            return None
        entries = data["entries"]
        exact = entries.get(cache.entry_key(op, dtype, M, N, K))
        if exact is not None:
            return exact
        want = cache.entry_key(op, dtype, M, N, K)
        m = _KEY.match(want)
        best, best_d = None, math.inf
        for key, rec in entries.items():
            k = _KEY.match(key)
            if k["op"] != m["op"] or k["dtype"] != m["dtype"]:
                continue
            d = sum(abs(math.log2(int(k[x]) / int(m[x]))) for x in "MNK")
            if d < best_d:
                best, best_d = rec, d
        return best if best_d <= NEAREST_MAX_LOG2 else None
    except Exception as e:  # noqa: BLE001 - a table must never break a launch
        warnings.warn(f"tilewright: config table lookup failed ({type(e).__name__}: {e})", stacklevel=2)
        return None


def export(device=None, path: Path | None = None, source: dict | None = None) -> dict:
    """A table built from this machine's tuning cache entries for ``device`` (every op and dtype tuned here)."""
    facts = cache.device_facts(device)
    entries = {k: v for k, v in cache.entries(device).items() if _KEY.match(k) and not cache.record_problem(v)}
    return {"format": FORMAT, "card": facts["gpu"], "capability": str(facts["capability"]),
            "source": {"torch": facts.get("torch"), "triton": facts.get("triton"), **(source or {})},
            "entries": dict(sorted(entries.items()))}
