"""Test tiers: CPU tests run Triton kernels under the interpreter; `gpu` tests need CUDA (run on the device).

TRITON_INTERPRET must be set before triton is imported (the @triton.jit decorator reads it), so it is decided here,
before any test module imports tilewright: interpret on a machine without a GPU unless the caller chose.
"""
import os
import shutil

if "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "0" if shutil.which("nvidia-smi") else "1"

import pytest  # noqa: E402
import torch  # noqa: E402

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
