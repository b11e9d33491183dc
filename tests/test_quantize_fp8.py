"""CPU tier: tilewright.quantize_fp8 (one-pass FP8 quantization with 1 x 128 or 128 x 128 block scales) under the
interpreter against its torch formula - bit-identical, since the kernel computes the same fp32 steps - plus what
the scales mean (x ~ q * scale within FP8's rounding), tails, strides, non-finite inputs and argument checks."""
import pytest
import torch

import tilewright
from tilewright.ops.scaled_mm import quantize_fp8_reference

pytestmark = pytest.mark.interpreter
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _same(got, want):
    (q, s), (qr, sr) = got, want
    assert q.dtype == qr.dtype and s.dtype == torch.float32 and q.shape == qr.shape and s.shape == sr.shape
    assert torch.equal(q.view(torch.uint8), qr.view(torch.uint8)), "quantized values differ from the torch formula"
    assert torch.equal(s, sr)


@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matches_the_torch_formula_with_tails(block, dtype, x_dtype):
    torch.manual_seed(0)
    x = (torch.randn(150, 300) * torch.logspace(-3, 3, 300)).to(x_dtype)  # K, M tails; per-column magnitudes
    got = tilewright.quantize_fp8(x, block, dtype)
    _same(got, quantize_fp8_reference(x, block, dtype))
    q, s = got
    rows = 150 if block == (1, 128) else 2
    assert s.shape == (rows, 3)
    # dequantized: within half an FP8 ulp of x, relative to each block's scale (3 mantissa bits e4m3, 2 e5m2)
    full = s.repeat_interleave(block[0], 0)[:150].repeat_interleave(128, 1)[:, :300]
    ulps = 2.0 ** -(3 if dtype == E4M3 else 2)
    err = (q.float() * full - x.float()).abs()
    assert (err <= 0.5 * ulps * x.float().abs() + 2.0 ** -9 * full + 1e-30).all()


def test_block_maximum_maps_to_the_format_maximum_and_zero_blocks_to_zero():
    x = torch.zeros(4, 256)
    x[0, :128] = torch.linspace(-3, 2, 128)
    q, s = tilewright.quantize_fp8(x)
    assert q[0, 0].float().item() == -448.0  # |-3| is the block's maximum
    assert s[0, 0].item() == pytest.approx(3 / 448)
    assert (q[1:].float() == 0).all() and (q[0, 128:].float() == 0).all()
    assert torch.isfinite(s).all() and (s > 0).all()


def test_strided_and_batched_inputs():
    torch.manual_seed(1)
    x = torch.randn(256, 64).t()  # (64, 256), column-major
    _same(tilewright.quantize_fp8(x), quantize_fp8_reference(x.contiguous()))
    x3 = torch.randn(2, 5, 200)
    q, s = tilewright.quantize_fp8(x3)
    qr, sr = quantize_fp8_reference(x3.reshape(10, 200))
    assert q.shape == (2, 5, 200) and s.shape == (2, 5, 2)
    _same((q.reshape(10, 200), s.reshape(10, 2)), (qr, sr))


def test_non_finite_entries():
    x = torch.randn(4, 128)
    x[0, 5] = float("nan")
    x[1, 7] = float("inf")
    got = tilewright.quantize_fp8(x)
    _same(got, quantize_fp8_reference(x))
    q, s = got
    assert torch.isnan(q[0, 5].float()) and torch.isfinite(s[0]).all()  # NaN left out of its block's maximum
    assert torch.isinf(s[1, 0]) and torch.isfinite(s[2:]).all()


def test_empty_inputs():
    q, s = tilewright.quantize_fp8(torch.randn(0, 256))
    assert q.shape == (0, 256) and s.shape == (0, 2)
    q, s = tilewright.quantize_fp8(torch.randn(3, 0), (128, 128))
    assert q.shape == (3, 0) and s.shape == (1, 0)


@pytest.mark.parametrize("kwargs, exc, needle", [
    (dict(x=torch.randn(4, 8).to(torch.int32)), TypeError, "x: dtype"),
    (dict(x=torch.randn(4, 8), block=(1, 64)), ValueError, "block"),
    (dict(x=torch.randn(2, 4, 8), block=(128, 128)), ValueError, "x: expected 2-D"),
    (dict(x=torch.randn(4, 8), dtype=torch.bfloat16), TypeError, "dtype"),
    (dict(x=[1.0]), TypeError, "x: expected a torch.Tensor"),
])
def test_bad_arguments_name_the_argument(kwargs, exc, needle):
    with pytest.raises(exc, match=needle):
        tilewright.quantize_fp8(**kwargs)


def test_opcheck():
    from tilewright.ops.scaled_mm import quantize_fp8_op

    torch.library.opcheck(quantize_fp8_op, (torch.randn(20, 300), 1, 128, E4M3))
    torch.library.opcheck(quantize_fp8_op, (torch.randn(130, 140), 128, 128, E5M2))


@pytest.mark.parametrize("per_row, q_type", [(True, "*fp8e4nv"), (False, "*fp8e4nv"), (True, "*fp8e5")])
def test_kernel_compiles_for_sm90_without_spills(per_row, q_type):
    """Tier 2: the kernel AOT-compiled for sm_90 (the GPU build casts to FP8 in the kernel: F2FP in its SASS)."""
    from tilewright.triton_kernels.aot import compile_reports

    sig = {"x_ptr": "*bf16", "q_ptr": q_type, "s_ptr": "*fp32", "M": "i32", "K": "i32", "stride_xm": "i32",
           "stride_xk": "i32", "stride_qm": "i32", "stride_sm": "i32", "stride_sk": "i32", "fp8_max": "fp32",
           "min_amax": "fp32"}
    rep, = compile_reports([dict(kernel="tilewright.triton_kernels.quantize_fp8:_quantize_fp8_kernel", signature=sig,
                                 constexprs={"TILE_M": 16 if per_row else 128, "BLOCK_K": 128, "PER_ROW": per_row},
                                 arch=90, num_warps=4 if per_row else 8, num_stages=1,
                                 divisible_by_16=("x_ptr", "q_ptr", "s_ptr"))])
    assert rep.spill_bytes == 0 and rep.sass
    assert "F2FP" in rep.sass, "no FP8 conversion instruction in the SASS"


@pytest.mark.gpu
@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_matches_the_torch_formula(block, dtype, x_dtype):
    """On the GPU the kernel casts to FP8 itself: bit-identical to the torch formula, tails and non-finite entries
    included."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    torch.manual_seed(2)
    x = (torch.randn(1000, 1500, device="cuda") * torch.logspace(-4, 4, 1500, device="cuda")).to(x_dtype)
    x[3, 7] = float("nan")
    x[500, 1400] = float("inf")
    _same(tilewright.quantize_fp8(x, block, dtype), quantize_fp8_reference(x, block, dtype))
