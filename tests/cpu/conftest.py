"""Fixtures shared by the CPU-tier CUDA build and router tests."""
import dataclasses

import pytest

from tilewright import backends
from tilewright.cuda_fallback.runtime import build


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
