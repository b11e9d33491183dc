"""CPU tier: the FP8 GEMM (tilewright.scaled_mm) under the interpreter, its checks, opcheck, and its sm_90 build.

Error rule: the kernel accumulates exactly-representable fp8 products in fp32, so its error against a float64
reference is the output rounding - at most 1 ulp of the output dtype per element (the interpreter rounds fp32 -> bf16
by truncation, up to 1 ulp; the GPU rounds to nearest, 1/2 ulp) - plus the fp32 accumulation error, bounded by
K * 2^-24 * sum_k |a||b| (which only matters near cancellation and for fp32 outputs).
"""
import pytest
import torch

import tilewright
from tilewright.ops.scaled_mm import scaled_mm_op, scaled_mm_reference

pytestmark = pytest.mark.interpreter
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _fp8_pair(M, K, N, dtype=E4M3):
    a = (torch.randn(M, K) * 2).to(dtype)
    b = torch.randn(N, K).to(dtype).t()  # K-major, as torch._scaled_mm wants
    return a, b


MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}


def _check(out, a, b, sa, sb, bias=None, out_dtype=torch.bfloat16):
    ref = scaled_mm_reference(a, b, sa, sb, bias, torch.float64, torch.float64)
    ulp = torch.exp2(torch.floor(torch.log2(ref.abs().clamp_min(1e-30))) - MANTISSA_BITS[out_dtype])
    magnitude = scaled_mm_reference(a.double().abs(), b.double().abs(), sa.abs(), sb.abs(), None, torch.float64,
                                    torch.float64)
    bound = ulp + a.shape[1] * 2.0 ** -24 * magnitude
    err = (out.double() - ref).abs()
    assert out.dtype == out_dtype and torch.isfinite(out).all()
    worst = (err / bound).max().item()
    assert worst <= 1.0, f"error {worst:.3f}x the bound (1 output ulp + fp32 accumulation)"


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("rowwise", [False, True])
def test_numerics_with_tails(dtype, rowwise):
    M, K, N = 70, 96, 88  # tails against the 64x64x32 interpreter tile
    a, b = _fp8_pair(M, K, N, dtype)
    sa, sb = (torch.rand(M) + 0.5, torch.rand(N) + 0.5) if rowwise else (torch.tensor([0.5]), torch.tensor([3.0]))
    _check(tilewright.scaled_mm(a, b, sa, sb), a, b, sa, sb)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_bias_and_out_dtypes(out_dtype):
    a, b = _fp8_pair(33, 64, 40)
    sa, sb = torch.rand(33, 1) + 0.5, torch.rand(1, 40) + 0.5  # (M, 1) / (1, N) like torch._scaled_mm
    bias = torch.randn(40).to(out_dtype)
    out = tilewright.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    _check(out, a, b, sa, sb, bias, out_dtype)


def test_torch_backend_matches():
    a, b = _fp8_pair(16, 32, 24)
    sa, sb = torch.tensor([1.5]), torch.tensor([0.25])
    ours = tilewright.scaled_mm(a, b, sa, sb)
    ref = tilewright.scaled_mm(a, b, sa, sb, backend="torch")
    assert (ours.float() - ref.float()).abs().max() <= 2 * ref.float().abs().max() * 2 ** -8


@pytest.mark.parametrize("call, exc, needle", [
    (lambda a, b: tilewright.scaled_mm(a.float(), b, torch.ones(1), torch.ones(1)), TypeError, "a:"),
    (lambda a, b: tilewright.scaled_mm(a, b.contiguous(), torch.ones(1), torch.ones(1)), ValueError, "K-major"),
    (lambda a, b: tilewright.scaled_mm(a, b[:16], torch.ones(1), torch.ones(1)), ValueError, "b:"),
    (lambda a, b: tilewright.scaled_mm(a, b, torch.ones(1, dtype=torch.float16), torch.ones(1)), TypeError,
     "scale_a"),
    (lambda a, b: tilewright.scaled_mm(a, b, torch.ones(5), torch.ones(1)), ValueError, "scale_a"),
    (lambda a, b: tilewright.scaled_mm(a, b, torch.ones(8), torch.ones(1)), ValueError, "granularity"),
    (lambda a, b: tilewright.scaled_mm(a, b, torch.ones(1), torch.ones(1), bias=torch.ones(3)), ValueError, "bias"),
    (lambda a, b: tilewright.scaled_mm(a, b, torch.ones(1), torch.ones(1), out_dtype=E4M3), TypeError, "out_dtype"),
])
def test_input_checks(call, exc, needle):
    a, b = _fp8_pair(8, 32, 24)
    with pytest.raises(exc, match=needle):
        call(a, b)


def test_opcheck():
    # test_schema is left out: it perturbs the inputs with arithmetic that torch does not implement for float8 on CPU
    utils = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")
    a, b = _fp8_pair(12, 32, 16)
    torch.library.opcheck(scaled_mm_op, (a, b, torch.ones(1), torch.full((1,), 0.5), None, torch.bfloat16, False,
                                         None), test_utils=utils)
    torch.library.opcheck(scaled_mm_op, (a, b, torch.rand(12) + 0.5, torch.rand(16) + 0.5,
                                         torch.randn(16, dtype=torch.bfloat16), torch.bfloat16, True, "triton"),
                          test_utils=utils)


def test_fp8_gemm_compiles_for_sm90_with_qgmma_and_no_spills():
    """The FP8 variant of the GEMM kernel on sm_90: FP8 wgmma (QGMMA), TMA loads, no spills, both scale modes, with
    fast accumulation (128x256 tiles) and with precise accumulation (a second accumulator: 128x128 tiles, as the
    pruner keeps them)."""
    from tilewright.triton_kernels.aot import compile_reports

    ptrs = ("a_ptr", "b_ptr", "c_ptr", "bias_ptr", "res_ptr", "preact_ptr", "g_ptr", "rstd_ptr", "scale_a_ptr",
            "scale_b_ptr")
    types = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "scale_a_ptr": "*fp32", "scale_b_ptr": "*fp32",
             "rstd_ptr": "*fp32"}
    ints = ("M", "N", "K", "stride_am", "stride_bn", "stride_cm", "stride_res0", "stride_res1", "RES_PERIOD",
            "M_BUCKET")
    sig = {**{k: types.get(k, "*bf16") for k in ptrs}, **{k: "i32" for k in ints}, "eps": "fp32"}

    def job(scale_mode, precise, bm=128, bn=None):
        bn, split = (bn, 2) if bn else (128, 2) if precise else (256, 4)
        ce = dict(stride_ak=1, stride_bk=1, stride_cn=1, stride_res2=1, A_K_CONTIG=True, B_K_CONTIG=True,
                  USE_TMA=True, TMA_STORE=True, HAS_BIAS=True, ACTIVATION=0, HAS_RESIDUAL=False, RES_PERIODIC=False,
                  STORE_PREACT=False, NORM=False, RESCALE_G=False, STORE_RSTD=False, SCALE_MODE=scale_mode,
                  PRECISE_ACC=precise, DOT_PRECISION="tf32", UPCAST_DOT=False, INDEX_64=False, BLOCK_M=bm,
                  BLOCK_N=bn, BLOCK_K=128, GROUP=8, TILE_ORDER=1, EPI_SPLIT=split, TMA_LOADS=True, PERSISTENT=True,
                  FLATTEN=False)
        return dict(kernel="tilewright.triton_kernels.gemm:_gemm_kernel", signature=sig, constexprs=ce, arch=90,
                    num_warps=8, num_stages=4, divisible_by_16=ptrs + ("stride_am", "stride_bn", "stride_cm"))

    # 3: block scales, promoted per 128-wide K slice beside a second accumulator (the plan keeps precise-mode tiles):
    # 128 x 128 (one scale of b per slice) and 64 x 256 (a scale per column)
    jobs = [job(1, False), job(2, False), job(1, True), job(2, True), job(3, True), job(3, True, bm=64, bn=256)]
    for j, rep in zip(jobs, compile_reports(jobs)):
        assert rep.has("QGMMA"), "no FP8 wgmma in SASS"
        assert rep.has("UTMALDG")
        assert rep.spill_bytes == 0, f"{rep.spill_bytes} bytes spilled ({rep.registers} registers), {j['constexprs']}"


def test_non_contiguous_bias_and_scales_are_read_through_their_strides():
    """issue 12: a sliced bias / rowwise scale was read as ptr + n."""
    M, K, N = 16, 32, 24
    a, b = _fp8_pair(M, K, N)
    bias = torch.randn(2 * N, dtype=torch.bfloat16)[::2]
    sa = torch.rand(2 * M)[::2] + 0.5
    sb = (torch.rand(1) + 0.5).expand(N)
    out = tilewright.scaled_mm(a, b, sa, sb, bias=bias)
    _check(out, a, b, sa.contiguous(), sb.contiguous(), bias.contiguous())


@pytest.mark.parametrize("kwargs,arg", [({"bias": [0.0] * 8}, "bias"), ({"backend": "nonsense"}, "backend")])
def test_wrong_argument_types_name_the_argument(kwargs, arg):
    a, b = _fp8_pair(8, 16, 8)
    one = torch.ones(1)
    with pytest.raises((TypeError, ValueError), match=arg):
        tilewright.scaled_mm(a, b, one, one, **kwargs)
    with pytest.raises(TypeError, match="scale_a"):
        tilewright.scaled_mm(a, b, 1.0, one)


@pytest.mark.parametrize("M,N", [(1, 5), (5, 1)])
def test_one_row_or_column_with_rowwise_scales_of_the_other_side(M, N):
    """Found by the fuzzer: M == 1 with a rowwise scale_b used scale_b[0] for every column (per-tensor mode was
    chosen from scale_a alone)."""
    K = 16
    a, b = _fp8_pair(M, K, N)
    sa, sb = torch.rand(M) + 0.5, torch.rand(N) + 0.5
    out = tilewright.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    _check(out, a, b, sa, sb, out_dtype=torch.float32)


@pytest.mark.parametrize("scale", [float("-inf"), float("nan"), 2.0])
@pytest.mark.parametrize("rowwise", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_k_zero_gives_zeros_plus_bias_whatever_the_scales_as_torch(scale, rowwise, with_bias, out_dtype):
    """K = 0: torch._scaled_mm returns zeros (plus the bias) for any scale, Inf and NaN included; dequantizing an
    empty product (0 * -inf) used to give NaN (issue 19). The expected value is written out: torch 2.13's CPU
    _scaled_mm returns uninitialised memory for K = 0, bias or not (seen in CI: 2.6e30, -1.6e29, ...; it passed
    while the allocator happened to hand back zeroed pages). torch's CUDA answer is compared on the GPU tier."""
    M, N = 4, 8
    a = torch.empty(M, 0, dtype=torch.float8_e4m3fn)
    b = torch.empty(N, 0, dtype=torch.float8_e4m3fn).t()
    sa = torch.full((M, 1) if rowwise else (), scale)
    sb = torch.ones((1, N) if rowwise else ())
    bias = torch.arange(N, dtype=out_dtype) if with_bias else None
    got = tilewright.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    want = torch.zeros(M, N, dtype=out_dtype) + (bias if with_bias else 0)
    assert torch.equal(got, want)


# ------------------------------------------------------------------------------------------------------------------
# Block scales (FP8 training's recipe): scale_a (M, K / 128), scale_b (K / 128, N / 128)
# ------------------------------------------------------------------------------------------------------------------
def _block_scales(M, K, N, outliers=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    kb, nb = -(-K // 128), -(-N // 128)
    sa = torch.rand(M, kb, generator=g) + 0.5
    sb = torch.rand(kb, nb, generator=g) + 0.5
    if outliers:  # a few 100x blocks: what block scaling exists for
        sa[3, -1] *= 100
        sb[0, -1] *= 100
    return sa, sb


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_block_scaled_numerics_with_tails_and_outlier_blocks(dtype):
    M, K, N = 70, 300, 200  # K: two full 128-blocks and a tail; N: one full 128-block and a tail
    a, b = _fp8_pair(M, K, N, dtype)
    sa, sb = _block_scales(M, K, N)
    _check(tilewright.scaled_mm(a, b, sa, sb), a, b, sa, sb)
    ours = tilewright.scaled_mm(a, b, sa, sb, backend="torch")
    torch.testing.assert_close(ours.float(), scaled_mm_reference(a, b, sa, sb).float())


def _launch_block_scaled(M, K, N, block_m, block_n, block_k, epi_split):
    """launch_gemm with block scales and one given config (not the interpreter's default tile), checked."""
    import triton

    from tilewright.triton_kernels.gemm import Dequant, launch_gemm

    a, b = _fp8_pair(M, K, N)
    sa, sb = _block_scales(M, K, N)
    cfg = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP": 1, "TILE_ORDER": 0,
                         "EPI_SPLIT": epi_split, "TMA_LOADS": True, "PERSISTENT": True, "FLATTEN": False,
                         "SPLIT_K": 1}, num_warps=4, num_stages=2)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    launch_gemm(a, b, out, dequant=Dequant(sa, sb, block_scaled=True), config=cfg)
    _check(out, a, b, sa, sb)


def test_block_scaled_with_a_256_wide_tile_reads_a_scale_per_column():
    """The kernel's other branch: a tile wider than a 128-column block of b (the interpreter's default tile is 64)."""
    _launch_block_scaled(40, 200, 300, block_m=32, block_n=256, block_k=64, epi_split=2)


def test_block_scaled_config_never_straddles_two_k_blocks():
    """A config with BLOCK_K 256 (the decode tiles') is cut to 128 for block scales: a slice reads one scale."""
    _launch_block_scaled(16, 512, 64, block_m=16, block_n=64, block_k=256, epi_split=1)


def test_launch_gemm_rejects_block_scales_of_the_wrong_shape():
    """The kernel indexes block scales without masks on the block: a wrong shape must raise, not read past them."""
    from tilewright.triton_kernels.gemm import Dequant, launch_gemm

    a, b = _fp8_pair(16, 256, 130)
    sa, sb = _block_scales(16, 256, 130)
    out = torch.empty(16, 130, dtype=torch.bfloat16)
    for bad_a, bad_b in ((sa[:, :1].contiguous(), sb), (sa, sb[:, :1].contiguous())):
        with pytest.raises(ValueError, match="block scales must be"):
            launch_gemm(a, b, out, dequant=Dequant(bad_a, bad_b, block_scaled=True))


def test_quantize_fp8_blocks_feed_scaled_mm():
    """The training step's recipe end to end: activations quantized per 1 x 128, the weight per 128 x 128 (its
    transpose is b), one block-scaled GEMM - equal to the dequantized product, and near the bf16 one."""
    torch.manual_seed(4)
    M, K, N = 48, 384, 160
    x = torch.randn(M, K) * torch.logspace(-1, 1, K)  # per-column magnitudes: blocks with different scales
    w = torch.randn(N, K) / K ** 0.5
    x8, sx = tilewright.quantize_fp8(x, block=(1, 128))
    w8, sw = tilewright.quantize_fp8(w, block=(128, 128))
    out = tilewright.scaled_mm(x8, w8.t(), sx, sw.t(), out_dtype=torch.float32)
    _check(out, x8, w8.t(), sx, sw.t(), out_dtype=torch.float32)
    rel = ((out - x @ w.t()).norm() / (x @ w.t()).norm()).item()
    assert rel < 0.05, f"block-scaled FP8 product {rel:.3f} off the fp32 one"


@pytest.mark.skipif(getattr(torch, "float8_e8m0fnu", None) is None, reason="this torch has no float8_e8m0fnu")
def test_block_scales_in_e8m0_are_read_as_their_powers_of_two():
    M, K, N = 20, 256, 130
    a, b = _fp8_pair(M, K, N)
    g = torch.Generator().manual_seed(5)
    sa = torch.exp2(torch.randint(-3, 4, (M, 2), generator=g).float())
    sb = torch.exp2(torch.randint(-3, 4, (2, 2), generator=g).float())
    e8 = torch.float8_e8m0fnu
    out = tilewright.scaled_mm(a, b, sa.to(e8), sb.to(e8))
    assert torch.equal(out, tilewright.scaled_mm(a, b, sa, sb))


@pytest.mark.parametrize("sa_shape, sb_shape, exc, needle", [
    ((20, 3), (2, 2), ValueError, "block scales"),     # K blocks of a's scales wrong
    ((20, 2), (2, 3), ValueError, "block scales"),     # N blocks wrong
    ((20, 2), (2, 2), None, None),                      # right
])
def test_block_scale_shapes_are_checked(sa_shape, sb_shape, exc, needle):
    a, b = _fp8_pair(20, 256, 200)
    sa, sb = torch.rand(sa_shape) + 0.5, torch.rand(sb_shape) + 0.5
    if exc is None:
        _check(tilewright.scaled_mm(a, b, sa, sb), a, b, sa, sb)
    else:
        with pytest.raises(exc, match=needle):
            tilewright.scaled_mm(a, b, sa, sb)


def test_launch_gemm_never_guesses_block_scales_from_their_shapes():
    """(M, 1) is a rowwise scale_a and a block one (K <= 128): the launcher takes block scales only when told."""
    from tilewright.triton_kernels.gemm import Dequant, launch_gemm

    a, b = _fp8_pair(16, 64, 32)
    with pytest.raises(ValueError, match="block_scaled=True"):
        launch_gemm(a, b, torch.empty(16, 32, dtype=torch.bfloat16),
                    dequant=Dequant(torch.rand(16, 1) + 0.5, torch.rand(1, 1) + 0.5))


def test_block_scales_of_another_dtype_name_the_argument():
    a, b = _fp8_pair(8, 128, 128)
    with pytest.raises(TypeError, match="scale_b: block scales must be float32"):
        tilewright.scaled_mm(a, b, torch.ones(8, 1), torch.ones(1, 1, dtype=torch.float16))


@pytest.mark.parametrize("kernel_runs", [True, False])
def test_the_op_hands_the_cuda_route_its_call_and_falls_back_to_triton(monkeypatch, kernel_runs):
    """When the router picks the sm_90a FP8 kernel (faked here: no GPU), the op passes it the checked call - flat
    row-wise scales, its output, bias and mode - and returns that output; when the kernel declines (disabled, a
    failed launch) the Triton kernel serves the same call."""
    from tilewright import router
    from tilewright.cuda_fallback import fp8_gemm_sm90

    seen = {}

    def try_launch(a, b, sa, sb, out, bias, use_fast_accum):
        seen.update(sa=tuple(sa.shape), sb=tuple(sb.shape), out=(tuple(out.shape), out.dtype), fast=use_fast_accum)
        if kernel_runs:
            out.copy_(scaled_mm_reference(a, b, sa, sb, bias, out.dtype))
        return kernel_runs

    monkeypatch.setattr(router, "dispatch", lambda op, *args, backend=None: "cuda")
    monkeypatch.setattr(fp8_gemm_sm90, "try_launch", try_launch)
    a, b = _fp8_pair(33, 64, 40)
    sa, sb = torch.rand(33, 1) + 0.5, torch.rand(1, 40) + 0.5
    out = tilewright.scaled_mm(a, b, sa, sb)
    assert seen == dict(sa=(33,), sb=(40,), out=((33, 40), torch.bfloat16), fast=False)
    _check(out, a, b, sa, sb)  # the reference above, or the Triton kernel after the decline
