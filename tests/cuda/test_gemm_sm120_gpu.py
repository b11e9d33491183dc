"""GPU tier for the mma.sync GEMM (gemm_sm120.cu) built for the device's own arch (sm_90 on an H100/H200, sm_120 on
consumer Blackwell): every variant in every operand layout, fp16, every epilogue on the default variant, tile orders,
all on odd shapes against fp64 with the sm_90a kernel's rule (error <= 2x torch's unfused error in the same dtype);
10,000 randomized launches with --stress. The checks are test_gemm_sm90_gpu.py's, pointed at launch_mma_gemm."""
from __future__ import annotations

import random

import pytest
import torch
from _cuda_gpu import cuda_family
from test_gemm_sm90_gpu import (  # noqa: E402
    EPILOGUES,
    FULL_EPILOGUE,
    SWEEP_SHAPES,
    _check,
    _epi_id,
    _random_problem,
)

# (tests/cuda is on sys.path: pytest's rootdir-relative import of this folder, as tests/fuzz imports fuzz_cases)

pytestmark = pytest.mark.gpu

VARIANTS = ["mma128x128s3", "mma128x128s2", "mma64x128s4"]
DEFAULT = "mma128x128s3"  # gemm_sm120.DEFAULT_VARIANT
LAYOUTS = [(False, True), (False, False), (True, True), (True, False)]  # (A M-major, B N-major)


def _mg():
    """The gemm_sm120 module, or a skip: the kernel loads operands with TMA (sm_90 and newer) and needs a compiler."""
    return cuda_family("gemm_sm120", majors=range(9, 100), why="the mma.sync GEMM uses TMA: needs sm_90 or newer")


def _check_mma(mg, *args, **kw):
    return _check(mg, *args, launch=mg.launch_mma_gemm, constraints=mg.constraints, **kw)


def _layout_id(layout):
    return f"{'AM' if layout[0] else 'AK'}-{'BN' if layout[1] else 'BK'}"


def _sweep(mg, dtype, variant, a_mn, b_mn, epi):
    checked = 0
    for shape in SWEEP_SHAPES:
        checked += _check_mma(mg, *shape, dtype, variant=variant, a_mn=a_mn, b_mn=b_mn, **epi) is not None
    assert checked >= 3, f"only {checked} cases were TMA-able"  # M-major A with K-major B: 3 of the shapes


@pytest.mark.parametrize("epi", [EPILOGUES[0], FULL_EPILOGUE], ids=_epi_id)
@pytest.mark.parametrize("layout", LAYOUTS, ids=_layout_id)
@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_layouts_bf16(variant, layout, epi):
    _sweep(_mg(), torch.bfloat16, variant, *layout, epi)


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_fp16_full_epilogue(variant):
    _sweep(_mg(), torch.float16, variant, False, True, FULL_EPILOGUE)


@pytest.mark.parametrize("epi", EPILOGUES, ids=_epi_id)
@pytest.mark.parametrize("dtype,b_mn", [(torch.bfloat16, True), (torch.float16, False)], ids=["bf16-BN", "fp16-BK"])
def test_default_variant_every_epilogue(dtype, b_mn, epi):
    _sweep(_mg(), dtype, DEFAULT, False, b_mn, epi)


@pytest.mark.parametrize("order", ["row_major", "grouped", "morton", "hilbert"])
@pytest.mark.parametrize("group", [1, 4, 8, 16])
@pytest.mark.parametrize("shape", [(2048, 2048, 256), (1000, 3000, 128)], ids=str)
def test_tile_orders(shape, order, group):
    _check_mma(_mg(), *shape, torch.bfloat16, variant=DEFAULT, bias=True, order=order, group=group)


def test_stress_randomized_launches(stress_launches):
    """--stress: --stress-launches launches (10,000) over random variants, layouts, shapes, tile orders, with no
    epilogue or the full one; each checked."""
    mg = _mg()
    rng = random.Random(0)
    n = 0
    while n < stress_launches:
        variant = rng.choice(VARIANTS)
        a_mn, b_mn = rng.choice(LAYOUTS)
        M, N, K, order, group = _random_problem(rng, a_mn, b_mn)
        r = _check_mma(mg, M, N, K, torch.bfloat16, variant=variant, a_mn=a_mn, b_mn=b_mn, order=order, group=group,
                       **rng.choice([EPILOGUES[0], FULL_EPILOGUE]))
        n += r is not None
    torch.cuda.synchronize()
