"""The host runtime every hand-written CUDA kernel family uses.

* :mod:`.build` - compile a ``.cu`` at first use (nvcc or NVRTC) into an on-disk cubin cache;
* :mod:`.launch` - the driver API: load cubins, encode TMA tensor maps, the prepared-launch cache;
* :mod:`.guard` - :class:`~.guard.Guard`, the memoized first-use self-check and process-wide disable switch;
* :mod:`.gemm_common` - what the GEMM-shaped families share on the host (operand rules, launch arguments, A/B tensor
  maps, the GEMM self-check), as ``ptx/gemm_common.cuh`` is what their kernels share.

:func:`cuda_backend` is the backend record with what every CUDA family has in common; a family module registers one.
"""
from __future__ import annotations

import torch

from ...backends import Backend
from .build import compiler_missing

HALF_DTYPES = (torch.bfloat16, torch.float16)  # what every kernel here is built for
# Read by every CUDA record's predicates: the compiler choice, and the cache folder (cubins, the autotune cache)
CUDA_ENV = ("TILEWRIGHT_CUDA_COMPILER", "TILEWRIGHT_CACHE_DIR")


def cuda_backend(op: str, name: str, kernel: str, archs: tuple[int, ...], *, env: tuple[str, ...] = (),
                 dtypes: tuple = HALF_DTYPES, **hooks) -> Backend:
    """The "cuda" record of kernel family ``name`` for ``op``: off with ``TILEWRIGHT_CUDA=0``, needs a compiler;
    ``hooks`` are the family's constraints / preferred / ready / launch and its ``measured`` provenance."""
    return Backend(op, "cuda", name, kernel=kernel, archs=archs, dtypes=dtypes, switch="TILEWRIGHT_CUDA",
                   requires=compiler_missing, env=CUDA_ENV + env, **hooks)
