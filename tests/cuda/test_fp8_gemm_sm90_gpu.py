"""GPU tier for the sm_90a FP8 GEMM (Hopper only): error against a float64 reference no worse than cuBLASLt's
(torch._scaled_mm) in the same accumulation mode - accurate: cuBLASLt's plus half a bf16 ulp of the largest output
(both round to bf16, and a sum a hair apart can round to the other neighbour), fast: <= 2x -
on tails that are not tile multiples, per-tensor and row-wise scales, both formats, bias and fp16 output; every
output element written (the output starts as NaN)."""
from __future__ import annotations

import pytest
import torch

from tilewright.cuda_fallback import fp8_gemm_sm90 as f8
from tilewright.reference import scaled_mm_reference

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper")]
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _case(M, N, K, fa=E4M3, fb=E4M3, rowwise=True, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(M, K, device="cuda", generator=g) * 2).to(fa)
    b = torch.randn(N, K, device="cuda", generator=g).to(fb).t()
    if rowwise:
        sa = torch.rand(M, 1, device="cuda", generator=g) + 0.5
        sb = torch.rand(1, N, device="cuda", generator=g) + 0.5
    else:
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
    return a, b, sa, sb


@pytest.mark.parametrize("fast", [False, True], ids=["accurate", "fast"])
@pytest.mark.parametrize("shape", [(256, 512, 1024), (1000, 3008, 1536), (16, 4096, 4096), (333, 1296, 8192),
                                   (2048, 2048, 16384)])
@pytest.mark.parametrize("rowwise", [True, False], ids=["rowwise", "tensor"])
def test_error_within_cublaslt(shape, rowwise, fast):
    M, N, K = shape
    a, b, sa, sb = _case(M, N, K, rowwise=rowwise)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    f8.launch_fp8_gemm(a, b, sa, sb, out, use_fast_accum=fast)
    ref = scaled_mm_reference(a, b, sa, sb, None, torch.float64, torch.float64)
    # cuBLASLt's error in the same mode (its dims must be multiples of 16: M padded with zero rows)
    pm = -M % 16
    a_p = torch.nn.functional.pad(a.view(torch.uint8), (0, 0, 0, pm)).view(a.dtype)
    sa_p = torch.nn.functional.pad(sa, (0, 0, 0, pm), value=1.0) if rowwise else sa
    peer = torch._scaled_mm(a_p, b, sa_p, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)[:M]
    assert torch.isfinite(out).all()
    err = (out.double() - ref).abs().max().item()
    peer_err = (peer.double() - ref).abs().max().item()
    bound = 2 * peer_err if fast else peer_err + 2 ** -9 * ref.abs().max().item()
    assert err <= bound + 1e-6, (err, peer_err)


@pytest.mark.parametrize("fa, fb, out_dtype", [(E5M2, E4M3, torch.float16), (E4M3, E5M2, torch.bfloat16),
                                               (E5M2, E5M2, torch.bfloat16)])
def test_formats_bias_and_fp16_output(fa, fb, out_dtype):
    M, N, K = 517, 768, 2048
    a, b, sa, sb = _case(M, N, K, fa, fb)
    bias = torch.randn(N, device="cuda").to(out_dtype)
    out = f8.fp8_gemm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    ref = scaled_mm_reference(a, b, sa, sb, bias, torch.float64, torch.float64)
    tol = 4 * 2 ** -8 * ref.abs().max().item()  # four bf16 ulps of the largest output (the inputs are exact)
    assert out.dtype == out_dtype and (out.double() - ref).abs().max().item() <= tol


def test_scaled_mm_routes_here_in_accurate_mode_from_m_256():
    """tilewright.scaled_mm on Hopper: accurate mode at M >= 256 runs this kernel (the same bits as a direct launch),
    fast mode and M < 256 stay on Triton."""
    import tilewright
    from tilewright import router

    a, b, sa, sb = _case(512, 1024, 2048)
    got = tilewright.scaled_mm(a, b, sa, sb)
    assert torch.equal(got, f8.fp8_gemm(a, b, sa.reshape(-1), sb.reshape(-1)))
    assert router.dispatch("scaled_mm", a, b, "row", torch.bfloat16, None, False) == "cuda"
    assert router.dispatch("scaled_mm", a, b, "row", torch.bfloat16, None, True) == "triton"
    assert router.dispatch("scaled_mm", a[:64], b, "row", torch.bfloat16, None, False) == "triton"


def test_scaled_mm_routes_block_scales_here_from_m_256():
    """Block scales from quantize_fp8 (the weight's as a transposed view, float32 and e8m0) through
    tilewright.scaled_mm at M >= 256: the same bits as a direct launch on contiguous float32 scales; M < 256 stays on
    Triton."""
    import tilewright
    from tilewright import router

    M, N, K = 512, 640, 1000 // 16 * 16
    g = torch.Generator(device="cuda").manual_seed(5)
    a, sa = tilewright.quantize_fp8(torch.randn(M, K, device="cuda", generator=g), block=(1, 128))
    q, sw = tilewright.quantize_fp8(torch.randn(N, K, device="cuda", generator=g), block=(128, 128))
    b = q.t()
    assert router.dispatch("scaled_mm", a, b, "block", torch.bfloat16, None, False) == "cuda"
    assert router.dispatch("scaled_mm", a, b, "block", torch.bfloat16, None, True) == "cuda"
    assert router.dispatch("scaled_mm", a[:64], b, "block", torch.bfloat16, None, False) == "triton"
    got = tilewright.scaled_mm(a, b, sa, sw.t())
    assert torch.equal(got, f8.fp8_gemm(a, b, sa, sw.t().contiguous()))
    sa8, sw8 = sa.to(torch.float8_e8m0fnu), sw.to(torch.float8_e8m0fnu)
    got = tilewright.scaled_mm(a, b, sa8, sw8.t())
    assert torch.equal(got, f8.fp8_gemm(a, b, sa8.float(), sw8.t().float().contiguous()))


@pytest.mark.parametrize("shape", [(1000, 3008, 1536), (2048, 2048, 16384)])
def test_promotion_every_two_k_blocks_stays_within_twice_cublaslt(shape):
    """PROMOTE2_VARIANT (fp32 promotion every 256 K elements, a candidate default): the scaled_mm rule (<= 2x
    cuBLASLt's accurate-mode error vs float64); the ratio it reaches is printed for the log."""
    M, N, K = shape
    a, b, sa, sb = _case(M, N, K)
    out = f8.fp8_gemm(a, b, sa, sb, variant=f8.PROMOTE2_VARIANT)
    ref = scaled_mm_reference(a, b, sa, sb, None, torch.float64, torch.float64)
    peer = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    err = (out.double() - ref).abs().max().item()
    peer_err = (peer.double() - ref).abs().max().item()
    print(f"promote every 2 k-blocks {shape}: error {err:.4g} vs cuBLASLt {peer_err:.4g} ({err / peer_err:.2f}x)")
    assert err <= 2 * peer_err, (err, peer_err)


@pytest.mark.parametrize("shape", [(512, 1024, 2048), (333, 1296, 1000 // 16 * 16), (16, 4096, 4096)])
def test_block_scales_within_the_triton_kernels_error(shape):
    """TW_SCALE 3 (scale_a (M, K/128), scale_b (K/128, N/128), applied at each k-block's promotion) on activations
    with a few 100x blocks, quantized as FP8 training does: error vs float64 no worse than the Triton block-scaled
    kernel's plus half a bf16 ulp of the largest output; tails in M, N and K."""
    import tilewright

    M, N, K = shape
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(M, K, device="cuda", generator=g)
    kb = -(-K // 128)
    for i in range(8):
        x[(i * 7919) % M, ((i * 104729) % kb) * 128:][:128] *= 100
    w = torch.randn(N, K, device="cuda", generator=g) / K ** 0.5
    a, sa = tilewright.quantize_fp8(x, block=(1, 128))
    q, sw = tilewright.quantize_fp8(w, block=(128, 128))
    b, sb = q.t(), sw.t().contiguous()
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    f8.launch_fp8_gemm(a, b, sa, sb, out)
    ref = scaled_mm_reference(a, b, sa, sb, None, torch.float64, torch.float64)
    peer = tilewright.scaled_mm(a, b, sa, sb, backend="triton")
    err = (out.double() - ref).abs().max().item()
    peer_err = (peer.double() - ref).abs().max().item()
    assert torch.isfinite(out).all()
    assert err <= peer_err + 2 ** -9 * ref.abs().max().item() + 1e-6, (err, peer_err)


# the block-scale variants' bit-equality shapes: tails in M, N and K, K of 1-2 k-blocks, several tiles a CTA
BLOCK_SHAPES = [((512, 1024, 2048), None), ((333, 1296, 1000 // 16 * 16), 3), ((300, 640, 128), 2),
                ((1024, 384, 256), 5), ((256, 512, 4096), 1)]


def _block_operands(M: int, N: int, K: int, seed: int):
    """(a, b, scale_a, scale_b) for a block-scaled GEMM: quantize_fp8's 1 x 128 / 128 x 128 blocks of random x (one
    row block 100x larger) and w, b = w^T, scale_b jittered per block so that no two blocks share a scale."""
    import tilewright

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=g)
    x[M // 3, :128] *= 100
    a, sa = tilewright.quantize_fp8(x, block=(1, 128))
    q, sw = tilewright.quantize_fp8(torch.randn(N, K, device="cuda", generator=g), block=(128, 128))
    return a, q.t(), sa, (sw.t() * (torch.rand(sw.t().shape, device="cuda", generator=g) + 0.5)).contiguous()


def _assert_block_builds_equal(shape, num_ctas, ref_variant, variant, seed: int):
    """``variant``'s output bit-equal to ``ref_variant``'s on block-scaled operands of ``shape``, without and with a
    bf16 bias (every element written: the output starts as NaN)."""
    M, N, K = shape
    a, b, sa, sb = _block_operands(M, N, K, seed=seed)
    bias_values = torch.randn(N, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed + 3))
    for bias in (None, bias_values.to(torch.bfloat16)):
        ref = f8.fp8_gemm(a, b, sa, sb, bias=bias, num_ctas=num_ctas, variant=ref_variant)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        f8.launch_fp8_gemm(a, b, sa, sb, out, bias=bias, variant=variant, num_ctas=num_ctas)
        assert torch.equal(out, ref), (variant.name, bias is not None)


@pytest.mark.parametrize("ahead", [1, 2])
@pytest.mark.parametrize("shape, num_ctas", BLOCK_SHAPES)
def test_block_scales_copied_ahead_equal_the_register_build(shape, num_ctas, ahead):
    """TW_FP8_SCALE_AHEAD (the block scales copied 1 or 2 k-blocks ahead into shared memory and read at the k-block's
    top; the default block build until session 29) computes the same products and FFMAs in the same order as the build
    loading them into registers in their k-block: bit-equal outputs, with tails in M, N and K, tiles with fewer k-blocks
    than the copy distance (K = 128, 256), several tiles per CTA (num_ctas: the first scales come from the previous
    tile's epilogue), and with a bias, whose cp.async joins the next k-block's copy group (with one k-block, none: the
    epilogue's wait_all takes it)."""
    import dataclasses

    _assert_block_builds_equal(shape, num_ctas, f8.ACCURATE_VARIANT.with_operands(3, (1, 1)),
                               dataclasses.replace(f8.BLOCK_AHEAD_VARIANT, scale_ahead=ahead), seed=5)


@pytest.mark.parametrize("shape, num_ctas", BLOCK_SHAPES)
def test_block_scales_in_the_stage_equal_the_copied_ahead_build(shape, num_ctas):
    """TW_FP8_SCALE_STAGE (BLOCK_STAGE_VARIANT, the default block build: a producer warp copies each k-block's block
    scales into its pipeline stage, counted by the stage's full barrier; 4 stages) computes the same products and FFMAs
    in the same order as BLOCK_AHEAD_VARIANT, the default before it: bit-equal outputs with tails in M (zero-filled
    scale rows), N and K, one and two k-blocks (the ring's first pass), several tiles per CTA (num_ctas: the ring wraps
    across tiles, 32 k-blocks a tile at K = 4096 on one CTA), with and without a bias; every element written (the output
    starts as NaN)."""
    _assert_block_builds_equal(shape, num_ctas, f8.BLOCK_AHEAD_VARIANT, f8.BLOCK_STAGE_VARIANT, seed=6)
