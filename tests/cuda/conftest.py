"""Fixtures the CUDA family tests share (CPU tier and GPU tier)."""
import pytest
import torch

from tilewright.cuda_fallback.runtime import build, guard


@pytest.fixture
def hopper():
    """Skip unless an sm_90 GPU is present (the sm_90a kernels' GPU tests: ``pytest.mark.usefixtures("hopper")``)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an sm_90 GPU (sm_90a kernels)")


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
