"""Hand-written CUDA paths (inline PTX through ``ptx/*.cuh``), compiled at first use and launched via the driver API.

Nothing here imports CUDA libraries at import time; see ``build.py`` for the compiler/cache/driver layer,
``gemm.py`` for the Hopper WGMMA GEMM and ``build_check.py`` for ``tilewright build-check``.
"""
