"""The guard every CUDA kernel family stands behind (the third piece of the CUDA runtime): a first-use self-check per
(device model, variant, build switches), memoized for the process, and a family-wide disable switch.

A kernel that does not compile, or launches and fails, disables its whole family for the process; a failed
self-check marks only that (device model, variant, ...) key. Either warns once, and the router / op layer then let
Triton serve. Nothing here raises to the caller.
"""
from __future__ import annotations

import math
import threading
import warnings

import torch

from ... import _record, backends
from . import build

NOT_RUN_NOTE = "not yet run on this hardware by the project's tests"
_warned: set = set()


def warn_once(key: str, message: str) -> None:
    """A RuntimeWarning with ``message``, once per ``key`` for the process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Frobenius-norm relative error of a kernel's output against an fp32 reference (NaN/inf stay NaN/inf)."""
    return ((got.float() - want).norm() / want.norm().clamp_min(1e-6)).item()


def run_self_check(label: str, cases) -> tuple[bool, str]:
    """The first-use self-check loop every family shares.

    ``cases`` yields ``(problem, measure)``: ``problem`` names the shape in the failure message, ``measure()``
    launches the kernel on fresh inputs (outputs pre-filled with NaN, so an unwritten element fails), waits for it
    and returns ``{metric: (value, limit)}`` with the headline relative error first. The first non-finite or
    over-limit metric fails the check with every metric of that problem in the message.
    """
    cases = list(cases)
    build.prebuild([measure for _, measure in cases])  # the problems' builds, compiled in parallel first
    worst = 0.0
    for problem, measure in cases:
        metrics = measure()
        if not all(math.isfinite(value) and value <= limit for value, limit in metrics.values()):
            found = ", ".join(f"{name} {value:.3g}" for name, (value, _) in metrics.items())
            return False, f"self-check failed for {label} on {problem}: {found}"
        worst = max(worst, next(iter(metrics.values()))[0])
    return True, f"self-check passed (max relative error {worst:.2e})"


def synchronize(device) -> None:
    """Wait for the device's work (a self-check reads its results next); nothing to wait for off the GPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _capturing(device) -> bool:
    """Whether the current stream of ``device`` (a CUDA device) is capturing a CUDA graph."""
    return torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing()


def device_model(device) -> str:
    """The self-check's unit: the device's name and compute capability, e.g. "NVIDIA H200 (sm_90)"."""
    import torch

    p = torch.cuda.get_device_properties(device)
    return f"{p.name} (sm_{p.major}{p.minor})"


class Guard:
    """First-use self-check and process-wide disable switch of one kernel family.

    ``name`` is what warnings call the family ("CUDA GEMM"), ``prefix`` what readiness reasons put before the
    variant ("sm_90a attention "); ``measured`` (the family's Measurement records) empty adds the note that the code
    has not run on this hardware. ``declines``: exception types a launch raises for inputs the kernel does not take -
    that call falls back without disabling the family.
    """

    def __init__(self, name: str, prefix: str = "", measured: tuple = (), declines: tuple = (),
                 fallback: str = "Triton"):
        self.name, self.prefix, self.measured, self.declines = name, prefix, measured, declines
        self.fallback = fallback  # what serves the calls once a launch failure disabled the family (its warning)
        self.checked: dict = {}  # (device model, variant, *key) -> (ok, message)
        self._disabled: str | None = None
        self.lock = threading.Lock()

    @property
    def disabled(self) -> str | None:
        """Why the whole family is off for this process (None: on). Setting it tells the router, whose cached
        decisions skip the readiness check (``backends.readiness_changed``)."""
        return self._disabled

    @disabled.setter
    def disabled(self, why: str | None) -> None:
        self._disabled = why
        backends.readiness_changed()

    def blocked(self, constraints: tuple[bool, str]) -> tuple[bool, str] | None:
        """What stops the family before its self-check: the inputs' ``constraints`` result ``(ok, why)``, the
        disable switch, a missing compiler. None when nothing does."""
        ok, why = constraints
        if not ok:
            return False, why
        if self.disabled:
            return False, self.disabled
        if build.toolchain() is None:
            return False, "no CUDA compiler (nvcc or NVRTC) found"
        return None

    def check(self, device, variant: str, key: tuple, run, fallback: str = "Triton") -> tuple[bool, str]:
        """``run()`` -> (ok, message): the self-check of ``variant`` (with build switches ``key``) on ``device``'s
        model, run once per process and remembered; the reason names the variant. ``fallback``: what serves the calls
        a failed check turns away, as its warning says (the family's Triton path, or another variant of the family)."""
        full = (device_model(device), variant, *key)
        with self.lock:
            if full not in self.checked and _capturing(device):
                # A self-check synchronizes and copies results to the host, neither of which a CUDA-graph capture
                # allows: run, it raised and disabled a healthy kernel for the process (found on an H200: a call that
                # first reached the CUDA GEMM inside a benchmark's capture). Decline this call without a verdict;
                # moving the readiness epoch drops the router decision and replay made meanwhile, so the first call
                # outside capture runs the check.
                backends.readiness_changed()
                return False, f"{self.prefix}{variant}: self-check deferred (a CUDA graph is being captured)"
            if full not in self.checked:
                try:
                    # (its launches are not the calling op's: recorded, they kept that op's first call from
                    # replaying - more launches than its replay holds)
                    with _record.paused():
                        self.checked[full] = run()
                except build.CompileError as e:
                    warn_once(f"{self.name}-compile",
                              f"tilewright: the {self.name} did not compile; Triton serves instead.\n{e}")
                    self.disabled = "compile failed (see the warning)"
                    return False, self.disabled
                except Exception as e:  # noqa: BLE001 - any failure here must fall back, never reach the caller
                    self.checked[full] = (False, f"self-check raised {type(e).__name__}: {e}")
                if not self.checked[full][0]:
                    backends.readiness_changed()
                    warn_once(f"{self.name}{full}", f"tilewright: {self.name} {variant} disabled on {full[0]}: "
                                                    f"{self.checked[full][1]}; {fallback} serves instead")
        ok, msg = self.checked[full]
        note = "" if self.measured else f"; {NOT_RUN_NOTE}"
        return ok, f"{self.prefix}{variant}: {msg}{note}"

    def run(self, launch, *args, **kwargs) -> bool:
        """``launch(*args, **kwargs)`` for the op layer: False (Triton then runs) when the family is disabled, the
        inputs are declined, or the launch fails - which disables the family with one warning. Never raises."""
        if self.disabled:
            return False
        try:
            launch(*args, **kwargs)
            return True
        except self.declines:
            return False
        except Exception as e:  # noqa: BLE001
            self.disabled = f"launch failed: {type(e).__name__}: {e}"
            warn_once(f"{self.name}-launch",
                      f"tilewright: {self.name} launch failed ({e}); {self.fallback} serves from now on")
            return False
