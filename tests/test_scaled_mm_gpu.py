"""GPU tier: tilewright.scaled_mm (FP8) against a float64 reference and beside torch._scaled_mm (cuBLASLt).

Rule: max |ours - fp64 reference| <= 2 x max |cuBLASLt - fp64 reference| in the same accumulation mode
(use_fast_accum False: slices promoted to fp32; True: the tensor cores' FP8 accumulator across K). cuBLASLt needs
every dim a multiple of 16, so for other shapes the peer runs on the zero-padded problem (same values, same sums).
"""
import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright.ops.scaled_mm import scaled_mm_reference

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fp8_capable():
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 needs sm_89+")


def _inputs(M, N, K, dtype=torch.float8_e4m3fn):
    a = (torch.randn(M, K, device="cuda") * 2).to(dtype)
    b = torch.randn(N, K, device="cuda").to(dtype).t()
    return a, b


def _peer(a, b, sa, sb, fast, out_dtype=torch.bfloat16):
    """torch._scaled_mm on the problem zero-padded to multiples of 16 (its requirement), sliced back."""
    M, K = a.shape
    N = b.shape[1]
    pm, pn, pk = -M % 16, -N % 16, -K % 16
    a_p = F.pad(a.view(torch.uint8), (0, pk, 0, pm)).view(a.dtype)
    b_p = F.pad(b.t().contiguous().view(torch.uint8), (0, pk, 0, pn)).view(b.dtype).t()
    sa_p = F.pad(sa.reshape(-1, 1), (0, 0, 0, pm), value=1.0) if sa.numel() > 1 else sa
    sb_p = F.pad(sb.reshape(1, -1), (0, pn), value=1.0) if sb.numel() > 1 else sb
    out = torch._scaled_mm(a_p, b_p, sa_p, sb_p, out_dtype=out_dtype, use_fast_accum=fast)
    return out[:M, :N]


@pytest.mark.parametrize("fast", [False, True], ids=["accurate", "fast_accum"])
@pytest.mark.parametrize("shape", [(8192, 8192, 8192), (3000, 5000, 4000), (16, 4096, 4096), (1000, 1288, 520)])
@pytest.mark.parametrize("rowwise", [False, True])
def test_fp8_within_cublaslt_error(shape, rowwise, fast):
    M, N, K = shape
    a, b = _inputs(M, N, K)
    if rowwise:
        sa = torch.rand(M, 1, device="cuda") + 0.5
        sb = torch.rand(1, N, device="cuda") + 0.5
    else:
        sa = torch.tensor(0.5, device="cuda")
        sb = torch.tensor(2.0, device="cuda")
    out = tilewright.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    ref = scaled_mm_reference(a, b, sa, sb, None, torch.float64, torch.float64)
    peer = _peer(a, b, sa, sb, fast)
    err = (out.double() - ref).abs().max().item()
    peer_err = (peer.double() - ref).abs().max().item()
    assert torch.isfinite(out).all()
    assert err <= 2 * peer_err + 1e-6, (err, peer_err)


@pytest.mark.parametrize("fast", [False, True], ids=["accurate", "fast_accum"])
@pytest.mark.parametrize("shape", [(256, 512, 1024), (1000, 3008, 1536), (512, 512, 8192), (1000, 1288, 520)])
def test_fp32_output_rowwise_within_cublaslt_error(shape, fast):
    """The fp32-output row-wise case: an fp32 output shows the FP8 tensor-core accumulation that a bf16 rounding
    hides, so a test against an fp32 emulation flags ~1-3% of elements for cuBLASLt itself. Against float64 the
    accurate mode must be no worse than cuBLASLt (H100: equal or 1.5-1.7x smaller), fast mode within 2x."""
    M, N, K = shape
    a, b = _inputs(M, N, K)
    sa = torch.rand(M, 1, device="cuda") + 0.5
    sb = torch.rand(1, N, device="cuda") + 0.5
    out = tilewright.scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=fast)
    assert out.dtype == torch.float32
    ref = scaled_mm_reference(a, b, sa, sb, None, torch.float64, torch.float64)
    peer = _peer(a, b, sa, sb, fast, torch.float32)
    err = (out.double() - ref).abs().max().item()
    peer_err = (peer.double() - ref).abs().max().item()
    bound = (2.0 if fast else 1.0) * peer_err * (1 + 1e-3) + 1e-6  # (the 1e-3: an fp32 ulp of the sums, not a slack)
    assert err <= bound, (err, peer_err)


def _outlier_inputs(M, N, K, seed=0):
    """bf16-range activations with a few 100x 1 x 128 blocks (what block scaling exists for) and a weight."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=g)
    kb = -(-K // 128)
    for i in range(8):
        r, c = (i * 7919) % M, (i * 104729) % kb
        x[r, c * 128:(c + 1) * 128] *= 100
    w = torch.randn(N, K, device="cuda", generator=g) / K ** 0.5
    return x, w


def _rowwise_fp8(t):
    scale = t.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 448.0
    return (t / scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale


@pytest.mark.parametrize("shape", [(2048, 2048, 4096), (1000, 1288, 520), (16, 4096, 4096)])
def test_block_scaled_fp8_on_outlier_blocks_matches_rowwise_error_and_its_reference(shape):
    """Block scales (quantize_fp8 (1, 128) / (128, 128)) against rowwise scales on inputs with 100x blocks: the
    block-scaled product's error vs the float64 product of the unquantized inputs is no larger than the rowwise
    one's (Frobenius norm, 2% for the noise of two different roundings: with e4m3's exponent range, 100x blocks
    leave a rowwise-scaled row's other values in the normal range, so the two errors are statistically equal; the
    max error, dominated by the outlier blocks' own rounding - the same in both modes - was noise, first GPU run);
    and the kernel is within 2x the rowwise kernel's error of its own dequantized float64 reference."""
    M, N, K = shape
    x, w = _outlier_inputs(M, N, K)
    exact = x.double() @ w.double().t()
    x8, sx = tilewright.quantize_fp8(x, block=(1, 128))
    w8, sw = tilewright.quantize_fp8(w, block=(128, 128))
    blk = tilewright.scaled_mm(x8, w8.t(), sx, sw.t())
    xr, sxr = _rowwise_fp8(x)
    wr, swr = _rowwise_fp8(w)
    row = tilewright.scaled_mm(xr, wr.t(), sxr, swr.t())
    assert (blk.double() - exact).norm() <= 1.02 * (row.double() - exact).norm()
    ref_blk = scaled_mm_reference(x8, w8.t(), sx, sw.t(), None, torch.float64, torch.float64)
    ref_row = scaled_mm_reference(xr, wr.t(), sxr, swr.t(), None, torch.float64, torch.float64)
    err_blk = ((blk.double() - ref_blk).abs() / ref_blk.abs().amax()).max().item()
    err_row = ((row.double() - ref_row).abs() / ref_row.abs().amax()).max().item()
    assert err_blk <= 2 * err_row + 1e-6, (err_blk, err_row)


@pytest.mark.parametrize("scale", [float("-inf"), float("nan"), 2.0])
@pytest.mark.parametrize("with_bias", [False, True])
def test_k_zero_matches_torch_on_the_gpu(scale, with_bias):
    """K = 0: zeros plus the bias whatever the scales. torch._scaled_mm on CUDA agrees without a bias; with one, torch
    2.11's CUDA kernel returns zeros (it drops the bias at K = 0, unlike F.linear), so the peer there is torch's
    bias-free answer plus the bias. (The CPU tier states the value itself: torch's CPU kernel returns uninitialised
    memory at K = 0.)"""
    M, N = 16, 32
    a = torch.empty(M, 0, device="cuda", dtype=torch.float8_e4m3fn)
    b = torch.empty(N, 0, device="cuda", dtype=torch.float8_e4m3fn).t()
    sa = torch.full((), scale, device="cuda")
    sb = torch.ones((), device="cuda")
    bias = torch.arange(N, device="cuda", dtype=torch.bfloat16) if with_bias else None
    got = tilewright.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)
    want = torch.zeros(M, N, device="cuda", dtype=torch.bfloat16) + (bias if with_bias else 0)
    assert torch.equal(got, want)
    try:
        peer = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    except RuntimeError as e:  # a torch build whose cuBLASLt path refuses K = 0: the stated value stands
        pytest.skip(f"torch._scaled_mm refuses K = 0 here: {e}")
    assert torch.equal(got, peer + (bias if with_bias else 0))
