"""Fixtures the CUDA family tests share (CPU tier and GPU tier)."""
import pytest

from tilewright.cuda_fallback.runtime import build, guard


@pytest.fixture
def fresh_guard(monkeypatch):
    """Put a family's ``Guard`` back to its first-use state (not disabled, no warning given yet) for this test: call
    the returned function with the Guard."""
    monkeypatch.setattr(guard, "_warned", set())
    return lambda family_guard: monkeypatch.setattr(family_guard, "disabled", None)


@pytest.fixture
def failing_compiler(monkeypatch):
    """Every CUDA compile fails as a broken toolchain would (``build.CompileError("boom")``)."""
    def broken(*args, **kwargs):
        raise build.CompileError("boom")

    monkeypatch.setattr(build, "compile_source", broken)
