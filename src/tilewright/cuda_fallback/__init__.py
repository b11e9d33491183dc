"""Hand-written CUDA kernels (inline PTX through ``ptx/*.cuh``), compiled at first use and launched via the driver API.

One module per kernel family beside its source, with the same base name: ``gemm_sm90`` (WGMMA), ``gemm_sm100``
(tcgen05 + TMEM), ``gemm_sm120`` (mma.sync), ``rmsnorm_gemm_sm90``, ``attention_sm90``. Each holds its kernel's host
code (variants, constraints, measured preference, launch, self-check) and registers one backend record
(``tilewright.backends``). What they share - compiler and cubin cache, driver and tensor maps, the self-check
guard, the GEMM host helpers - is :mod:`.runtime`; ``build_check.py`` is ``tilewright build-check``.

Nothing here imports CUDA libraries at import time.
"""
