"""What the sm_100 (tcgen05) and sm_120 (mma.sync) GEMM families share on the host: their direct-store kernel
arguments, the stand-in win region, and the first-use self-check guard (``ready`` / ``try_launch`` with one warning
and a process-wide disable). What all three families share (launch-argument normalisation, the prepared-launch
cache, build + A/B tensor maps, epilogue arguments) is in :mod:`.gemm`.
"""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path

from . import gemm as _sm90

NOT_RUN_NOTE = "not yet run on this hardware by the project's tests"


def direct_store_args(tm_a, tm_b, out, bias, res_ptr, rs, res_period, M: int, N: int, K: int, tile_order: int,
                      group: int) -> list:
    """Kernel arguments both families' kernels start with: A/B tensor maps, out's pointer and row stride (they store
    fragments directly, no TMA store), the shared epilogue arguments, tile order and group."""
    return [tm_a, tm_b, ctypes.c_uint64(out.data_ptr()), ctypes.c_int64(out.stride(0)),
            *_sm90.epilogue_args(bias, res_ptr, rs, res_period, M, N, K), ctypes.c_int32(tile_order),
            ctypes.c_int32(group)]


def stand_in_preferred(label: str, measured: list, M: int, N: int, K: int) -> tuple[bool, str]:
    """The sm_90 win region standing in for a family with no measurement of its own; the reason names ``label``
    and, while ``measured`` (its result files) is empty, says the code has not run on this hardware."""
    note = "" if measured else f" ({NOT_RUN_NOTE})"
    ok, why = _sm90.preferred(M, N, K)
    return ok, why.replace("cuda:", f"cuda {label}:", 1) + note


def result_files(pattern: str) -> list[str]:
    """Result files matching ``pattern`` under this checkout's perf/results/<card>/ (none in an installed wheel);
    runs of the code on an sm_90 stand-in (``*_on_sm90*``) do not count as runs on the target hardware."""
    root = Path(__file__).resolve().parents[3] / "perf" / "results"
    if not root.is_dir():
        return []
    return sorted(str(p) for p in root.glob(f"*/{pattern}") if "_on_sm90" not in p.name)


class Guard:
    """First-use self-check per (device model, variant, layouts, dtype) and the process-wide disable switch of one
    kernel family; a failure warns once and makes the router / op layer fall back to Triton."""

    def __init__(self, label: str, launch, pick_variant, result_glob: str):
        self.label, self.launch, self.pick_variant, self.result_glob = label, launch, pick_variant, result_glob
        self.checked: dict = {}
        self.disabled: str | None = None
        self.lock = threading.Lock()

    def note(self) -> str:
        return "" if result_files(self.result_glob) else f"; {NOT_RUN_NOTE}"

    def ready(self, a, b, bias=None, residual=None) -> tuple[bool, str]:
        blocked = _sm90.ready_blocked(_sm90.constraints(a, b, bias, residual), self.disabled)
        if blocked:
            return blocked
        M, K = a.shape
        v = self.pick_variant(M, b.shape[1], K)
        (a_mn, _), _ = _sm90._layout(a, "a")
        (b_first, _), _ = _sm90._layout(b, "b")
        key = (_sm90._device_model(a.device), v.name, a_mn, not b_first, a.dtype)
        ok, msg, off = _sm90.memo_self_check(
            self.checked, self.lock, key,
            lambda: _sm90._self_check_one(a.device, v, a_mn, not b_first, a.dtype, launch=self.launch),
            f"{self.label} GEMM")
        if off:
            self.disabled = off
            return False, off
        return ok, f"{self.label} {v.name}: {msg}{self.note()}"

    def try_launch(self, a, b, out, bias=None, residual=None, activation=None, preact=None) -> bool:
        """Launch for the op layer; False (Triton then runs) when the kernel declines or fails - never raises."""
        if preact is not None or out.dtype != a.dtype or self.disabled:
            return False
        try:
            self.launch(a, b, out, bias=bias, residual=residual, activation=activation)
            return True
        except Exception as e:  # noqa: BLE001
            self.disabled = f"launch failed: {type(e).__name__}: {e}"
            _sm90._warn_once(f"{self.label}-launch",
                             f"tilewright: {self.label} GEMM launch failed ({e}); Triton serves from now on")
            return False
