"""Test tiers by marker, not by folder: `interpreter` tests run Triton kernels on the CPU; `gpu` tests need CUDA (run on
the device) and skip without it. Files mirror the source: tests/test_<op>.py, tests/cuda/test_<family>.py.

TRITON_INTERPRET must be set before triton is imported (the @triton.jit decorator reads it), so it is decided here,
before any test module imports tilewright: interpret on a machine without a GPU unless the caller chose.
"""
import os
import shutil

if "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "0" if shutil.which("nvidia-smi") else "1"

import dataclasses  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from tilewright import backends  # noqa: E402
from tilewright.cuda_fallback.runtime import build  # noqa: E402

INTERPRET = os.environ["TRITON_INTERPRET"] == "1"


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
