"""The GEMM epilogues' erf-free GELU (``_codes.GELU_TAIL_POLY``: Phi(-|x|) = 2^-(1 + |x| P(|x|))): its accuracy in
fp32 against math.erfc, its special values, the Triton version under the interpreter, and the CUDA epilogue holding
the same coefficients."""
from __future__ import annotations

import math
import pathlib
import re

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from tilewright._codes import GELU_TAIL_POLY
from tilewright.triton_kernels.activation import apply_activation

pytestmark = pytest.mark.interpreter


def _gelu_fast_fp32(x: np.ndarray) -> np.ndarray:
    """The kernels' formula step by step in float32 (numpy rounds each multiply and add; the kernels fuse them)."""
    x = x.astype(np.float32)
    a = np.abs(x)
    p = np.float32(GELU_TAIL_POLY[-1])
    for c in reversed(GELU_TAIL_POLY[:-1]):
        p = (p * a + np.float32(c)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        tail = np.exp2(-(p * a + np.float32(1))).astype(np.float32)
        return (x * np.where(x >= 0, np.float32(1) - tail, tail)).astype(np.float32)


def _phi(v: float) -> float:
    return 0.5 * math.erfc(-v / math.sqrt(2))


def test_the_fitted_cdf_is_within_5e_7_of_phi_everywhere():
    x = np.linspace(-14, 14, 200_001)
    got = _gelu_fast_fp32(x).astype(np.float64)
    want = np.array([v * _phi(v) for v in x.astype(np.float32).astype(np.float64)])
    # the CDF itself where x is not tiny: the fit's 3.6e-7 plus the fp32 output's rounding
    big = np.abs(x) > 1e-3
    cdf_err = np.abs(got[big] / x.astype(np.float32)[big] - want[big] / x.astype(np.float32)[big])
    assert cdf_err.max() < 5e-7
    # relative error: 1e-4 from x = -3 up (1/20 of half a bf16 ulp, 1/5 of an fp16 one); 5e-3 on the tail down to -9,
    # where torch's own fp32 erf formula loses everything to 1 + erf(x) cancelling (0.05% at -3.5, 100% past -5);
    # below -9 (|GELU| < 1e-18) the absolute error is under 1e-18
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    assert rel[x >= -3].max() < 1e-4
    assert rel[(x >= -9) & (x < -3)].max() < 5e-3
    assert np.abs(got - want)[x < -9].max() < 1e-18


def test_special_values_match_the_erf_formula():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -30.0, -13.0, 30.0, 1e30, -1e30], dtype=np.float32)
    g = _gelu_fast_fp32(x)
    assert g[0] == 0 and g[1] == 0 and np.signbit(g[1])
    assert g[2] == np.inf and np.isnan(g[3]) and np.isnan(g[4])  # torch's 0.5 x (1 + erf(x / sqrt 2)): NaN at -inf
    assert g[5] == 0 and abs(g[6]) < 1e-20  # the negative tail falls to exactly 0
    assert g[7] == 30.0 and g[8] == np.float32(1e30) and g[9] == 0


def test_the_cuda_epilogue_holds_the_same_coefficients():
    src = (pathlib.Path(__file__).parents[1] / "src/tilewright/cuda_fallback/ptx/gemm_common.cuh").read_text()
    body = src[src.index("TW_DEVICE float gelu_fast"):]
    body = body[:body.index("return")]
    lits = [float(v) for v in re.findall(r"(-?\d+\.\d+(?:e-?\d+)?)f", body)]
    lits.remove(1.0)  # the "+ 1" of the exponent
    assert lits == list(reversed(GELU_TAIL_POLY))
    assert "gelu_fast(x)" in src  # and the GELU activation code uses it


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n, EXACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, apply_activation(x, 2, EXACT), mask=offs < n)


def test_triton_gelu_fast_matches_float64_under_the_interpreter():
    x = torch.cat([torch.linspace(-12, 12, 4001), torch.randn(95) * 3])
    want = torch.nn.functional.gelu(x.double())
    for exact in (False, True):
        y = torch.empty_like(x)
        _gelu_kernel[(1,)](x, y, x.numel(), EXACT=exact, BLOCK=4096)
        assert (y.double() - want).abs().max().item() < 2e-6
