"""What the sm_100 (tcgen05) and sm_120 (mma.sync) GEMM families share on the host: launch-argument normalisation
and the first-use self-check guard (``ready`` / ``try_launch`` with one warning and a process-wide disable).
"""
from __future__ import annotations

import threading
from pathlib import Path

from . import build
from . import gemm as _sm90

NOT_RUN_NOTE = "not yet run on this hardware by the project's tests"


def launch_args(label: str, a, b, out, bias, residual, activation, tile_order, group, out_align: int):
    """Validate one launch and return (activation code, tile-order code, residual strides, residual pointer,
    residual period). ``out_align``: the byte alignment the kernel's stores need for out's base and rows."""
    M, K = a.shape
    N = b.shape[1]
    ok, why = _sm90.constraints(a, b, bias, residual)
    if not ok:
        raise ValueError(f"{label}: {why}")
    if out.shape != (M, N) or out.stride(1) != 1 or out.dtype != a.dtype or (out.stride(0) * 2) % out_align or \
            out.data_ptr() % out_align:
        raise ValueError(f"{label}: out must be a row-major (M, N) tensor of a's dtype with {out_align}-byte "
                         "aligned rows")
    if isinstance(activation, str) or activation is None:
        activation = _sm90.ACTIVATIONS[activation]
    if isinstance(tile_order, str):
        tile_order = _sm90.TILE_ORDERS[tile_order]
    if tile_order in (2, 3) and group & (group - 1):
        raise ValueError(f"{label}: morton/hilbert tile orders need a power-of-two group")
    if residual is None:
        return activation, tile_order, (0, 0, 0), 0, 1
    r0, p, rn = residual.shape
    if r0 * p != M or rn != N:
        raise ValueError(f"{label}: residual must be (R0, P, N) with R0 * P == M")
    return activation, tile_order, residual.stride(), residual.data_ptr(), p


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
        ok, why = _sm90.constraints(a, b, bias, residual)
        if not ok:
            return False, why
        if self.disabled:
            return False, self.disabled
        if build.toolchain() is None:
            return False, "no CUDA compiler (nvcc or NVRTC) found"
        M, K = a.shape
        v = self.pick_variant(M, b.shape[1], K)
        (a_mn, _), _ = _sm90._layout(a, "a")
        (b_first, _), _ = _sm90._layout(b, "b")
        key = (_sm90._device_model(a.device), v.name, a_mn, not b_first, a.dtype)
        with self.lock:
            if key not in self.checked:
                try:
                    self.checked[key] = _sm90._self_check_one(a.device, v, a_mn, not b_first, a.dtype,
                                                              launch=self.launch)
                except build.CompileError as e:
                    self.disabled = "compile failed (see the warning)"
                    _sm90._warn_once(f"{self.label}-compile",
                                     f"tilewright: the {self.label} GEMM did not compile; Triton serves.\n{e}")
                    return False, self.disabled
                except Exception as e:  # noqa: BLE001 - any failure must fall back, never reach the caller
                    self.checked[key] = (False, f"self-check raised {type(e).__name__}: {e}")
                if not self.checked[key][0]:
                    _sm90._warn_once(f"{self.label}{key}", f"tilewright: {self.label} GEMM {key[1]} disabled on "
                                                           f"{key[0]}: {self.checked[key][1]}; Triton serves instead")
        ok, msg = self.checked[key]
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
