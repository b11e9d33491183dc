"""Test tiers by marker, not by folder: `interpreter` tests run Triton kernels on the CPU; `gpu` tests need CUDA (run on
the device) and skip without it. Files mirror the source: tests/test_<op>.py, tests/cuda/test_<family>.py.

The ATen route of small eager calls (ops/_aten.py) is off in tests unless set (below).

Three opt-in modes of the GPU tier (scripts/gpu_verify.sh turns them on): ``--stress`` runs the 10,000-launch checks
(randomized and repeated launches: the persistent-kernel bug class that is fine once and wrong after many runs),
``--sanitizer`` runs small launches under compute-sanitizer in a subprocess, and ``--long`` runs the long sweeps whole
(every config of the GEMM's tuning space: ~200 compiles; the default tier takes a fixed sample of them). Without the
option the stress and sanitizer tests skip and say which option runs them.

TRITON_INTERPRET must be set before triton is imported (the @triton.jit decorator reads it), so it is decided here,
before any test module imports tilewright: interpret on a machine without a GPU unless the caller chose.
"""
import os
import shutil

if "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "0" if shutil.which("nvidia-smi") else "1"
# Small eager calls on CUDA tensors go to ATen's ops by default (ops/_aten.py); the tests are of tilewright's kernels
# at small shapes, so the route is off unless a test turns it on (tests/test_aten_route.py does).
os.environ.setdefault("TILEWRIGHT_ATEN_BELOW", "0")

import dataclasses  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from tilewright import backends  # noqa: E402
from tilewright.cuda_fallback.runtime import build  # noqa: E402

INTERPRET = os.environ["TRITON_INTERPRET"] == "1"
SRC = Path(__file__).resolve().parents[1] / "src"


def pytest_addoption(parser):
    g = parser.getgroup("tilewright GPU tier")
    g.addoption("--stress", action="store_true", default=False,
                help="run the stress tests (randomized and repeated launches, --stress-launches each)")
    g.addoption("--stress-launches", type=int, default=10000, help="launches per stress test (default 10000)")
    g.addoption("--sanitizer", action="store_true", default=False,
                help="run the compute-sanitizer tests (memcheck / racecheck / synccheck on small launches)")
    g.addoption("--long", action="store_true", default=False,
                help="run the long sweeps whole (the default GPU tier samples them to stay under 5 minutes a file)")


def pytest_collection_modifyitems(config, items):
    has_cuda = torch.cuda.is_available() and not INTERPRET
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (and TRITON_INTERPRET unset)")
    skip_cpu = pytest.mark.skip(reason="CPU-tier test: runs Triton under TRITON_INTERPRET=1")
    for item in items:
        if "gpu" in item.keywords:
            if not has_cuda:
                item.add_marker(skip_gpu)
        elif "interpreter" in item.keywords and not INTERPRET:
            item.add_marker(skip_cpu)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---- fixtures of the CUDA build and router tests (no GPU needed) ----
@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A fresh cubin cache for this module (builds once, then every test reads it)."""
    path = tmp_path_factory.mktemp("twcache")
    mp = pytest.MonkeyPatch()
    mp.setenv("TILEWRIGHT_CACHE_DIR", str(path))
    build._memo.clear()
    yield path
    build._memo.clear()
    mp.undo()


@pytest.fixture
def swap_record(monkeypatch):
    """``swap_record(op, name, **fields)``: for one test, the registry record (op, name) is a copy with ``fields``
    (e.g. a faked ``ready``) - records are frozen, the registry entry is what the router reads."""
    def swap(op, name, **fields):
        backends.records(op)  # the kernel families register on the first lookup
        monkeypatch.setitem(backends.REGISTRY, (op, name), dataclasses.replace(backends.REGISTRY[(op, name)], **fields))
    return swap


@pytest.fixture
def fake_compiler(monkeypatch):
    """A CUDA compiler "found" on this machine (the router's CUDA records require one)."""
    monkeypatch.setattr(build, "toolchain", lambda: build.Toolchain("nvcc", "nvcc", "13.0"))


# ---- opt-in modes of the GPU tier ----
@pytest.fixture
def long_sweep(request) -> bool:
    """Whether pytest ran with --long (a sweep test then covers its whole space, else a fixed sample of it)."""
    return request.config.getoption("--long")


@pytest.fixture
def stress_launches(request) -> int:
    """The launch count of a stress test; skips the test unless pytest ran with --stress."""
    if not request.config.getoption("--stress"):
        pytest.skip("stress test: run with --stress (and --stress-launches N, default 10000)")
    return request.config.getoption("--stress-launches")


@pytest.fixture
def sanitizer(request):
    """``sanitizer(tool, code, timeout=120)``: run ``python -c code`` under ``compute-sanitizer --tool tool`` and fail
    with the tail of its output unless it exits 0 and the code ran to its end. Skips the test unless pytest ran
    with --sanitizer and compute-sanitizer is on PATH. The child gets this checkout's src/ first on PYTHONPATH and
    TILEWRIGHT_AUTOTUNE=0 (the sanitizer slows every launch ~100x: no tuning sweeps)."""
    if not request.config.getoption("--sanitizer"):
        pytest.skip("sanitizer test: run with --sanitizer")
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        pytest.skip("compute-sanitizer is not on PATH")

    def run(tool: str, code: str, timeout: float = 120) -> str:
        env = dict(os.environ, TILEWRIGHT_AUTOTUNE="0",
                   PYTHONPATH=os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p))
        # --error-exitcode: a finding fails the run even when the kernel's results happen to be right
        # the sentinel line proves the launches ran (a child that died before launching anything also exits 0 when
        # nothing was sanitized, e.g. an early sys.exit)
        cmd = [exe, "--tool", tool, "--error-exitcode", "9", sys.executable, "-c",
               textwrap.dedent(code) + "\nimport torch\ntorch.cuda.synchronize()\nprint('tw-sanitized-ok')"]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"compute-sanitizer --tool {tool} timed out after {timeout:.0f}s: {str(e.stdout)[-2000:]}")
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0 and "tw-sanitized-ok" in proc.stdout, \
            f"compute-sanitizer --tool {tool} rc={proc.returncode}:\n{text[-4000:]}"
        return text
    return run
