"""CPU tier: the RMSNorm-fused GEMM under the Triton interpreter - numerics against fp64 (measured against torch's own
unfused error, not against loose thresholds), rstd, tails, zero and large-magnitude rows, the (refused) folded-weight variant,
gradients, the backward kernel's long-row path, opcheck, torch.compile, input checks, module and router."""
import math

import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright import router
from tilewright.ops.rms_norm_linear import rms_norm_backward_op, rms_norm_linear_op
from tilewright.reference import rms_norm_linear_reference
from tilewright.triton_kernels.gemm import tma_compatible
from tilewright.triton_kernels.rmsnorm_gemm import launch_rmsnorm_bwd, launch_rmsnorm_gemm

pytestmark = pytest.mark.interpreter

EPS = 1e-6


def ulp(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of ``dtype`` numbers at |t| (t in fp64): 2^(floor(log2|t|) - mantissa bits), floored at the
    smallest normal's spacing."""
    info = torch.finfo(dtype)
    mant = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23}[dtype]
    a = t.abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(a)) - mant)


def ref64(x, g, w, b, eps=EPS):
    """fp64 reference of the unfused expression."""
    return rms_norm_linear_reference(x.double(), g.double(), w.double(), None if b is None else b.double(), eps)


def fused_operand_ref64(x, g, w, b, eps=EPS):
    """fp64 evaluation of what the fused kernel computes *exactly*: operand ``round(x * g)`` to x's dtype, rstd and
    the dot in fp64. The kernel's only remaining errors are fp32 accumulation and the final rounding."""
    xd = x.double()
    rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
    shift = 1.0
    if x.dtype == torch.float16:  # fp16: g scaled by 2^-e, max|g| = m * 2^e (0.5 <= m < 1), so x * g cannot overflow
        e = int(torch.frexp(g.double().abs().max()).exponent.clamp(-125, 125))
        shift = 2.0 ** -e
    a = (xd * (g.double() * shift)).to(x.dtype).double() / shift
    y = rstd * (a @ w.double().t())
    return y if b is None else y + b.double()


def make(M, N, K, dtype, bias=True, seed=0, g_kind="randn"):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen).to(dtype)
    g = (torch.randn(K, generator=gen) if g_kind == "randn" else torch.ones(K)).to(dtype)
    w = (torch.randn(N, K, generator=gen) / math.sqrt(K)).to(dtype)
    b = torch.randn(N, generator=gen).to(dtype) if bias else None
    return x, g, w, b


def run_fused(x, g, w, b, use_tma=None, eps=EPS, **kw):
    M, N = x.shape[0], w.shape[0]
    out = torch.empty(M, N, dtype=x.dtype)
    rstd = torch.empty(M, dtype=torch.float32)
    launch_rmsnorm_gemm(x, g, w.t(), out, rstd, eps, bias=b, use_tma=use_tma, **kw)
    return out, rstd


def exact_class_check(y, x, g, w, b, dtype):
    """The fused result vs the exact value of the computation it performs: within one rounding of the output plus
    an fp32-accumulation bound (K * 2^-24 * sum_k |terms|)."""
    ref = fused_operand_ref64(x, g, w, b)
    xd = x.double()
    rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS)
    terms = rstd * ((xd * g.double()).abs() @ w.double().abs().t())
    bound = ulp(ref, dtype) / 2 + x.shape[1] * 2.0 ** -24 * terms + 1e-30
    err = (y.double() - ref).abs()
    assert (err <= bound).all(), f"{(err > bound).sum().item()} elements beyond one rounding; max excess " \
                                 f"{(err - bound).max().item():.3g}"


SHAPES = [(70, 72, 80), (64, 64, 64), (5, 40, 48), (129, 33, 100)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("use_tma", [True, False])
def test_forward_vs_fp64_and_torch(dtype, shape, use_tma):
    M, N, K = shape
    x, g, w, b = make(M, N, K, dtype, bias=shape[0] % 2 == 0)
    use_tma = use_tma and tma_compatible(x) and tma_compatible(w)  # K * itemsize must be a multiple of 16 for TMA
    y, rstd = run_fused(x, g, w, b, use_tma=use_tma)
    y64 = ref64(x, g, w, b)
    # 1) exact class: the result is the correctly rounded value of the computation the kernel does
    exact_class_check(y, x, g, w, b, dtype)
    # 2) against the fp64 truth, norm-wise no worse than torch's own unfused pipeline in this dtype (x1.5)
    y_torch = rms_norm_linear_reference(x, g, w, b, EPS)
    err_fused = (y.double() - y64).norm().item()
    err_torch = (y_torch.double() - y64).norm().item()
    assert err_fused <= 1.5 * err_torch + 1e-12, (err_fused, err_torch)
    # 3) rstd, fp32, per row
    r64 = torch.rsqrt(x.double().pow(2).mean(-1) + EPS)
    assert torch.allclose(rstd.double(), r64, rtol=2 ** -22, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16])
def test_unit_norm_weight_per_element_within_torch_error_plus_one_ulp(dtype):
    """With the RMSNorm initialisation (g = 1) the operand x * g is exact, so the fused output is within one ulp of
    the truth wherever torch's is - the per-element criterion of the GPU tier, checked here in fp16."""
    x, g, w, b = make(96, 80, 112, dtype, g_kind="ones")
    y, _ = run_fused(x, g, w, b)
    y64 = ref64(x, g, w, b)
    y_torch = rms_norm_linear_reference(x, g, w, b, EPS)
    err_f = (y.double() - y64).abs()
    err_t = (y_torch.double() - y64).abs()
    assert (err_f <= err_t + ulp(torch.maximum(y64.abs(), y.double().abs()), dtype)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_large_and_small_magnitude_rows(dtype):
    """Rows scaled by 1e3 and 1e-3: rstd absorbs the scale (fp32 sum of squares); tiny rows feel eps as the formula
    says. fp16: the operand is x * g * 2^-e (max|g| < 2^e), which costs the 1e-3 rows a few subnormal bits; the
    result stays the correctly rounded value of that computation and within torch's own error norm-wise."""
    M, N, K = 40, 24, 72
    x, g, w, b = make(M, N, K, torch.float32)
    scale = torch.ones(M, 1)
    scale[::3] = 1e3
    scale[1::3] = 1e-3
    x = (x * scale).to(dtype)
    g, w, b = g.to(dtype), w.to(dtype), b.to(dtype)
    y, rstd = run_fused(x, g, w, b)
    assert torch.isfinite(y).all()
    exact_class_check(y, x, g, w, b, dtype)
    y64 = ref64(x, g, w, b)
    y_torch = rms_norm_linear_reference(x, g, w, b, EPS)
    assert (y.double() - y64).norm() <= 1.5 * (y_torch.double() - y64).norm() + 1e-12
    assert torch.allclose(rstd.double(), torch.rsqrt(x.double().pow(2).mean(-1) + EPS), rtol=2 ** -22, atol=0)


def test_zero_rows_give_bias_and_rstd_one_over_sqrt_eps():
    x, g, w, b = make(70, 40, 48, torch.float16)
    x[3] = 0
    x[65:] = 0  # includes rows of the tail tile
    y, rstd = run_fused(x, g, w, b)
    zero = x.abs().sum(-1) == 0
    assert torch.equal(y[zero], b.expand(int(zero.sum()), -1))
    assert torch.allclose(rstd[zero], torch.full((int(zero.sum()),), 1 / math.sqrt(EPS)), rtol=2 ** -22)


def test_folded_norm_weight_variant_is_refused():
    """The folded variant (norm_weight=None, W * g passed as b) fed the loaded tile straight to the tensor cores and
    computed wrong products on sm_90 for 128x256 tiles and the pointer path (GPU fuzzer, 2026-11-26): removed, and a
    caller who still passes None gets an error that says so instead of a launch."""
    x, g, w, b = make(96, 72, 80, torch.float16)
    out = torch.empty(96, 72, dtype=torch.float16)
    with pytest.raises(TypeError, match="folded-weight variant"):
        launch_rmsnorm_gemm(x, None, (w.float() * g.float()).half().t(), out, None, EPS, bias=b)


def test_fp16_g_scale_is_a_power_of_two_over_finite_entries():
    """g_pow2_scale: [2^-e, 2^e] with max|finite g| = m * 2^e (0.5 <= m < 1), Inf/NaN ignored, e clamped to
    [-125, 125]; recomputed at every call (an in-place update shows at once), long g in several chunks."""
    from tilewright.triton_kernels.rmsnorm_gemm import g_pow2_scale

    g = torch.tensor([0.5, -3.0, float("inf"), float("nan"), 1.0], dtype=torch.float16)
    assert g_pow2_scale(g).tolist() == [0.25, 4.0]  # 3 = 0.75 * 2^2
    g.mul_(4)  # 12 = 0.75 * 2^4
    assert g_pow2_scale(g).tolist() == [2.0 ** -4, 16.0]
    assert g_pow2_scale(torch.full((4,), 2.0 ** -14, dtype=torch.float16)).tolist() == [2.0 ** 13, 2.0 ** -13]
    long = torch.ones(3000, dtype=torch.float16)
    long[2500] = -100.0  # 100 = 0.78 * 2^7, in the third 1024-chunk
    assert g_pow2_scale(long).tolist() == [2.0 ** -7, 2.0 ** 7]
    for bad in (torch.ones(16, dtype=torch.float16)[::2], torch.ones(1, dtype=torch.float16).expand(8)):
        with pytest.raises(ValueError, match="norm_weight must be a unit-stride"):  # would read past / beside g
            g_pow2_scale(bad)
    s0 = g_pow2_scale(torch.zeros(8, dtype=torch.float16)).tolist()
    assert s0[0] * s0[1] == 1.0 and s0[1] in (2.0 ** -125, 1.0)  # all zero: any exact power of two will do

def test_epilogue_activation_and_residual():
    from tilewright.reference import activation_reference

    x, g, w, b = make(50, 40, 64, torch.float32)
    res = torch.randn(5, 10, 40)  # (R0, P, N), R0 * P == M
    y, _ = run_fused(x, g, w, b, activation=4, residual=res)
    ref = activation_reference(ref64(x, g, w, b), "silu") + res.reshape(50, 40).double()
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5)


def test_m_major_x_and_batched_input():
    x, g, w, b = make(48, 40, 64, torch.float32)
    xt = x.t().contiguous().t()  # (M, K) with strides (1, M): A is M-major
    y = tilewright.rms_norm_linear(xt, g, w, b)
    assert torch.allclose(y.double(), ref64(x, g, w, b), rtol=1e-5, atol=1e-5)
    x3 = torch.randn(2, 7, 64)
    y3 = tilewright.rms_norm_linear(x3, g, w, b, eps=1e-5)
    assert y3.shape == (2, 7, 40)
    assert torch.allclose(y3.double(), ref64(x3.reshape(14, 64), g, w, b, 1e-5).reshape(2, 7, 40), atol=1e-5)


# ---------------------------------------------------------------------------------------------------------- autograd
@pytest.mark.parametrize("bias", [True, False])
def test_gradients_match_torch_autograd(bias):
    B, S, K, N = 2, 9, 40, 24
    x = torch.randn(B, S, K, requires_grad=True)
    g = (1 + 0.3 * torch.randn(K)).requires_grad_()
    w = torch.randn(N, K, requires_grad=True)
    b = torch.randn(N, requires_grad=True) if bias else None
    y = tilewright.rms_norm_linear(x, g, w, b, eps=1e-5)
    dy = torch.randn_like(y)
    y.backward(dy)
    leaves = [t for t in (x, g, w, b) if t is not None]
    refs = [t.detach().double().requires_grad_() for t in leaves]
    y64 = rms_norm_linear_reference(refs[0], refs[1], refs[2], refs[3] if bias else None, 1e-5)
    y64.backward(dy.double())
    for name, t, r in zip(("x", "norm_weight", "weight", "bias"), leaves, refs):
        assert t.grad.shape == r.shape, name
        assert torch.allclose(t.grad.double(), r.grad, rtol=1e-4, atol=1e-4), (name, (t.grad.double() - r.grad).abs().max())


def gradient_errors(x, g, w, b, dy, eps=EPS):
    """[(name, ours, torch's, |ref|)] for the gradients of x, norm_weight, weight and bias: the Frobenius error of
    tilewright.rms_norm_linear's and of the unfused torch pipeline's (same dtype) against the float64 reference, and
    the reference gradient's norm. Shared by the CPU and GPU tiers."""
    ours = [t.clone().requires_grad_() for t in (x, g, w, b)]
    tilewright.rms_norm_linear(*ours, eps=eps).backward(dy)
    theirs = [t.clone().requires_grad_() for t in (x, g, w, b)]
    rms_norm_linear_reference(*theirs, eps).backward(dy)
    ref = [t.double().requires_grad_() for t in (x, g, w, b)]
    rms_norm_linear_reference(*ref, eps).backward(dy.double())
    return [(name, (a.grad.double() - r.grad).norm().item(), (t.grad.double() - r.grad).norm().item(),
             r.grad.norm().item())
            for name, a, t, r in zip(("x", "norm_weight", "weight", "bias"), ours, theirs, ref)]


def test_gradients_fp16_within_torch_error():
    M, N, K = 33, 24, 48
    x, g, w, b = make(M, N, K, torch.float16)
    for name, e_ours, e_torch, mag in gradient_errors(x, g, w, b, torch.randn(M, N).half()):
        assert e_ours <= 1.5 * e_torch + 1e-3 * mag * 2 ** -10, (name, e_ours, e_torch)


def test_only_some_gradients():
    x, g, w, b = make(20, 16, 32, torch.float32)
    w.requires_grad_()
    y = tilewright.rms_norm_linear(x, g, w, b)
    y.sum().backward()
    ref = w.detach().double().requires_grad_()
    rms_norm_linear_reference(x.double(), g.double(), ref, b.double(), EPS).sum().backward()
    assert torch.allclose(w.grad.double(), ref.grad, atol=1e-4)
    assert x.grad is None and g.grad is None


@pytest.mark.parametrize("max_block_k", [None, 16])
def test_norm_backward_kernel_single_and_chunked(max_block_k):
    M, K = 37, 80
    x = torch.randn(M, K)
    g = torch.randn(K)
    du = torch.randn(M, K)
    xr, gr = x.double().requires_grad_(), g.double().requires_grad_()
    u64 = F.rms_norm(xr, (K,), gr, EPS)
    u64.backward(du.double())
    rstd = torch.rsqrt(x.double().pow(2).mean(-1) + EPS).float()
    dx, u, dg = launch_rmsnorm_bwd(x, du, g, rstd, need_dx=True, need_u=True, need_dg=True, max_block_k=max_block_k)
    assert torch.allclose(dx.double(), xr.grad, rtol=1e-5, atol=1e-5)
    assert torch.allclose(u.double(), u64.detach(), rtol=1e-5, atol=1e-6)
    assert torch.allclose(dg.double(), gr.grad, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("P,K", [(1, 1), (33, 130), (70, 7), (64, 128), (600, 20)])
def test_dg_reduction_sums_the_partials_in_float64(P, K):
    """dg's last reduction level (_dg_reduce_kernel): the column sums of the programs' fp32 partials, accumulated in
    float64 and rounded once - tails in both dimensions (P not a multiple of its 256-row step, K of its 16 columns);
    partials with a wide range, where an fp32 sum would lose the small ones."""
    from tilewright.triton_kernels.rmsnorm_gemm import _reduce_dg

    torch.manual_seed(P * 1000 + K)
    part = torch.randn(P, K) * torch.exp2(torch.randint(-20, 20, (P, K)).float())
    dg, bound = _reduce_dg(part)
    assert bound is None and dg.dtype == torch.float32 and dg.shape == (K,)
    torch.testing.assert_close(dg, part.double().sum(0).float(), rtol=0, atol=0)
    assert _reduce_dg(None) == (None, None)


# ---------------------------------------------------------------------------------------- torch integration, checks
def _opcheck_samples():
    x, g, w, b = make(12, 8, 16, torch.float32)
    yield (x, g, w, None, 1e-6, None)
    yield (x.half(), g.half(), w.half(), b.half(), 1e-5, "triton")
    yield (x.clone().requires_grad_(), g.clone().requires_grad_(), w.clone().requires_grad_(),
           b.clone().requires_grad_(), 1e-6, None)


@pytest.mark.parametrize("args", list(_opcheck_samples()))
def test_opcheck_forward(args):
    torch.library.opcheck(rms_norm_linear_op, args)


def test_opcheck_backward_op():
    x, g, _, _ = make(12, 8, 16, torch.float32)
    du = torch.randn(12, 16)
    rstd = torch.rsqrt(x.pow(2).mean(-1) + EPS)
    torch.library.opcheck(rms_norm_backward_op, (x, du, g, rstd, True, True, True, None))
    torch.library.opcheck(rms_norm_backward_op, (x, du, g, rstd, False, False, True, "triton"))


def test_torch_compile_fullgraph_with_backward():
    mod = tilewright.nn.RMSNormLinear(32, 16)

    def f(x):
        return torch.relu(mod(x)).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    x = torch.randn(3, 5, 32, requires_grad=True)
    loss = compiled(x)
    loss.backward()
    ref_x = x.detach().clone().requires_grad_()
    f(ref_x).backward()
    assert torch.allclose(x.grad, ref_x.grad, atol=1e-5)


@pytest.mark.parametrize("args", list(_opcheck_samples())[:2])
def test_opcheck_inference_op(args):
    from tilewright.ops.rms_norm_linear import rms_norm_linear_inference_op

    torch.library.opcheck(rms_norm_linear_inference_op, args, test_utils=("test_schema", "test_faketensor"))


def test_a_graph_traced_without_gradients_calls_the_inference_op(monkeypatch):
    """torch.compile of the module under no_grad (its parameters require grad, as a model's in eval) puts
    tilewright::rms_norm_linear_inference in the graph, whose full path knows no gradient flows - the weight may
    keep its folded copy (_keeps_fold) - and gives the eager output; with gradients the graph calls
    tilewright::rms_norm_linear (the weight keeps no fold: it trains)."""
    import importlib

    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    rms = importlib.import_module("tilewright.ops.rms_norm_linear")  # (the package attribute is the function)
    keeps = []
    full = rms._rms_norm_linear_full
    monkeypatch.setattr(rms, "_rms_norm_linear_full",
                        lambda x, g, w, *rest: (keeps.append(rms._keeps_fold(w)), full(x, g, w, *rest))[1])
    mod = tilewright.nn.RMSNormLinear(32, 16)
    x = torch.randn(3, 5, 32)
    graphs = []

    def forward_compiler(gm, example_inputs):  # the ATen-level graph, where the public function became its ops
        graphs.append(str(gm.graph))
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=forward_compiler)

    with torch.no_grad():
        want = mod(x)
        keeps.clear()
        got = torch.compile(mod, backend=backend, fullgraph=True)(x)
    assert torch.equal(got, want) and keeps == [True]
    assert "tilewright.rms_norm_linear_inference" in graphs[-1]
    torch._dynamo.reset()
    keeps.clear()
    y = torch.compile(mod, backend="aot_eager", fullgraph=True)(x)
    y.sum().backward()
    assert keeps == [False] and mod.weight.grad is not None


def test_input_checks_name_the_argument():
    x, g, w, b = make(4, 8, 16, torch.float32)
    with pytest.raises(ValueError, match="norm_weight"):
        tilewright.rms_norm_linear(x, g[:8], w, b)
    with pytest.raises(ValueError, match="weight"):
        tilewright.rms_norm_linear(x, g, w[:, :8], b)
    with pytest.raises(TypeError, match="weight.*dtype"):
        tilewright.rms_norm_linear(x, g, w.half(), b)
    with pytest.raises(TypeError, match="norm_weight.*dtype"):
        tilewright.rms_norm_linear(x, g.half(), w, b)
    with pytest.raises(TypeError, match="bias.*dtype"):
        tilewright.rms_norm_linear(x, g, w, b.double())
    with pytest.raises(ValueError, match="bias"):
        tilewright.rms_norm_linear(x, g, w, b[:3])
    for bad in (0.0, -1e-6, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eps"):
            tilewright.rms_norm_linear(x, g, w, b, eps=bad)
    with pytest.raises(TypeError, match="eps"):
        tilewright.rms_norm_linear(x, g, w, b, eps=None)
    with pytest.raises(ValueError, match="norm_weight"):
        tilewright.rms_norm_linear(x, g[None], w, b)


def test_module_from_modules_shares_parameters():
    norm = torch.nn.RMSNorm(32, eps=1e-5)
    with torch.no_grad():
        norm.weight.normal_()
    lin = torch.nn.Linear(32, 24)
    fused = tilewright.nn.RMSNormLinear.from_modules(norm, lin)
    assert fused.weight is lin.weight and fused.norm_weight is norm.weight and fused.bias is lin.bias
    x = torch.randn(2, 3, 32)
    assert torch.allclose(fused(x), lin(norm(x)), atol=1e-5)
    # eps=None (torch: finfo(dtype).eps) and no affine weight
    norm2 = torch.nn.RMSNorm(32, elementwise_affine=False)
    lin2 = torch.nn.Linear(32, 8, bias=False)
    fused2 = tilewright.nn.RMSNormLinear.from_modules(norm2, lin2)
    assert torch.allclose(fused2(x), lin2(norm2(x)), atol=1e-5)
    assert [n for n, _ in fused2.named_parameters()] == ["weight"]
    with pytest.raises(ValueError, match="normalized_shape"):
        tilewright.nn.RMSNormLinear.from_modules(torch.nn.RMSNorm((4, 8)), lin)


def test_module_init_matches_shapes():
    m = tilewright.nn.RMSNormLinear(16, 8, bias=False, eps=1e-5)
    assert m.norm_weight.shape == (16,) and m.weight.shape == (8, 16) and m.bias is None
    assert torch.equal(m.norm_weight, torch.ones(16))
    assert m(torch.randn(5, 16)).shape == (5, 8)


def test_router_entry_and_torch_backend():
    x, g, w, b = make(10, 8, 16, torch.float32)
    text = router.explain("rms_norm_linear", x, g, w, b)
    assert "triton" in text
    y_torch = tilewright.rms_norm_linear(x, g, w, b, backend="torch")
    assert torch.allclose(y_torch, rms_norm_linear_reference(x, g, w, b, EPS))
    y = tilewright.rms_norm_linear(x, g, w, b)
    assert torch.allclose(y, y_torch, atol=1e-5)
    with tilewright.use_backend("torch"):
        assert torch.equal(tilewright.rms_norm_linear(x, g, w, b), y_torch)


def test_empty_and_k_zero_edges():
    g, w = torch.randn(16), torch.randn(8, 16)
    assert tilewright.rms_norm_linear(torch.randn(0, 16), g, w).shape == (0, 8)
    y = tilewright.rms_norm_linear(torch.randn(3, 0), torch.randn(0), torch.randn(8, 0), torch.ones(8))
    assert torch.equal(y, torch.ones(3, 8))


def test_flat_abs_error_rule_flags_torch_itself_at_magnitude_64():
    """Why "abs error > 1 means wrong" misjudges bf16 results when |y| ~ sqrt(K) = 64 (CPU, torch only).

    randn x and weights, K = 4096: y has a standard deviation of ~64 and tails past 256, where one bf16 ulp is 2 (0.5
    on [64, 128), 1 on [128, 256)). torch's own unfused bf16 pipeline - correct by definition here - is compared with
    the fp64 truth: the flat rule flags some of its elements, all of them at |y| >= 128 and each within 1 ulp + the
    error of the bf16 operand rounding. A fused kernel compared against torch inherits those flags (two correct
    results can be 1-2 ulps apart, 2-4 in absolute terms). The GPU tier repeats this with the kernel itself
    (tests/test_rms_norm_linear_gpu.py); the evidence that decides correctness is the error against fp64
    relative to torch's own (test_forward_vs_fp64_and_torch).
    """
    gen = torch.Generator().manual_seed(0)
    M, N, K = 1024, 1024, 4096
    x = torch.randn(M, K, generator=gen).bfloat16()
    w = torch.randn(N, K, generator=gen).bfloat16()
    g = torch.ones(K).bfloat16()
    y_torch = rms_norm_linear_reference(x, g, w, None, EPS).double()
    y64 = ref64(x, g, w, None)
    err = (y_torch - y64).abs()
    flagged = err > 1
    assert flagged.sum() > 0, "the flat rule should fire on torch's own correct bf16 output at this magnitude"
    assert (y64[flagged].abs() >= 128).all()
    assert (err[flagged] <= 1.5 * ulp(y64[flagged], torch.bfloat16)).all()
    assert y64.std() > 60


def test_interpreter_bf16_downcast_truncates():
    """Why bf16 numerics are tested on GPU, not here: Triton 3.6's interpreter converts fp32 -> bf16 by truncation
    (round toward zero), where the GPU rounds to nearest even. Output roundings (and the fused kernel's bf16(x * g))
    would then carry up to 1 ulp, biased, and the CPU error ratios against torch would be meaningless for bf16."""
    import triton
    import triton.language as tl

    @triton.jit
    def _cvt(src, dst, n: tl.constexpr):
        o = tl.arange(0, n)
        tl.store(dst + o, tl.load(src + o).to(tl.bfloat16))

    s = torch.tensor([1.0 + 2 ** -8 + 2 ** -10, -(1.0 + 2 ** -8 + 2 ** -10), 3.0, 0.5], dtype=torch.float32)
    d = torch.empty(4, dtype=torch.bfloat16)
    _cvt[(1,)](s, d, 4)
    rne = s.bfloat16()
    if torch.equal(d, rne):
        pytest.skip("this Triton's interpreter rounds to nearest: bf16 numerics could be tested on CPU")
    assert d[0].item() == 1.0 and rne[0].item() == 1.0078125


def test_fused_kernel_compiles_for_sm90_with_wgmma_and_no_spills():
    """AOT (no GPU): the fused forward compiles for sm_90a with wgmma (A from registers after the g multiply), TMA
    loads and no spills, for the 128x256 tile with the 4-chunk epilogue the space gives it, with and without bias,
    and for fp16 (g rescaled by a power of two)."""
    from tilewright.triton_kernels.aot import compile_reports

    ptrs = ("a_ptr", "b_ptr", "c_ptr", "g_ptr", "bias_ptr", "res_ptr", "preact_ptr")
    fp32_ptrs = ("rstd_ptr", "gscale_ptr", "scale_a_ptr", "scale_b_ptr")
    ints = ("M", "N", "K", "stride_am", "stride_bk", "stride_cm", "stride_res0", "stride_res1", "RES_PERIOD",
            "M_BUCKET")

    def job(bias, dtype="bf16"):
        sig = {**{k: f"*{dtype}" for k in ptrs}, **{k: "*fp32" for k in fp32_ptrs}, **{k: "i32" for k in ints},
               "eps": "fp32"}
        ce = dict(stride_ak=1, stride_bn=1, stride_cn=1, stride_res2=1, A_K_CONTIG=True, B_K_CONTIG=True,
                  USE_TMA=True, TMA_STORE=True, NORM=True, RESCALE_G=dtype == "fp16",
                  STORE_RSTD=True, STORE_PREACT=False, SCALE_MODE=0, PRECISE_ACC=False,
                  HAS_BIAS=bias, ACTIVATION=0,
                  HAS_RESIDUAL=False, RES_PERIODIC=False, DOT_PRECISION="tf32", UPCAST_DOT=False, INDEX_64=False,
                  BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP=8, TILE_ORDER=1, EPI_SPLIT=4, TMA_LOADS=True,
                  PERSISTENT=True, FLATTEN=False)
        return dict(kernel="tilewright.triton_kernels.gemm:_gemm_kernel", signature=sig,
                    constexprs=ce, arch=90, num_warps=8, num_stages=3,
                    divisible_by_16=ptrs + ("rstd_ptr", "stride_am", "stride_bk", "stride_cm", "stride_res1"))

    # fp16 also loads the power-of-two rescale of g (rmsnorm_gemm.g_pow2_scale)
    for rep in compile_reports([job(True), job(False), job(True, "fp16")]):
        assert rep.has("HGMMA"), "no wgmma in SASS"
        assert rep.has("UTMALDG"), "no TMA loads"
        assert rep.spill_bytes == 0, f"{rep.spill_bytes} bytes spilled"
        assert rep.shared_bytes <= 227 * 1024


# ---- issue 12: inputs that used to give a wrong answer --------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sliced", "expanded", "offset"])
def test_non_contiguous_norm_weight_and_bias_are_read_through_their_strides(kind):
    M, K, N = 9, 40, 24
    x, w = torch.randn(M, K), torch.randn(N, K)
    g = {"sliced": torch.randn(2 * K)[::2], "expanded": torch.randn(1).expand(K),
         "offset": torch.randn(K + 5)[5:]}[kind]
    bias = {"sliced": torch.randn(2 * N)[::2], "expanded": torch.randn(1).expand(N),
            "offset": torch.randn(N + 1)[1:]}[kind]
    out = tilewright.rms_norm_linear(x, g, w, bias, eps=EPS)
    assert (out.double() - ref64(x, g, w, bias)).abs().max().item() < 1e-3


def test_backward_op_reads_strided_norm_weight_and_rstd():
    M, K = 6, 48
    x, du = torch.randn(M, K), torch.randn(M, K)
    g = torch.randn(2 * K)[::2]
    rstd = torch.rsqrt(x.pow(2).mean(-1) + EPS)
    rstd_strided = torch.stack([rstd, torch.full_like(rstd, 1e3)], 1)[:, 0]  # stride 2, garbage between
    want = rms_norm_backward_op(x, du, g.contiguous(), rstd, True, True, True, "torch")
    got = rms_norm_backward_op(x, du, g, rstd_strided, True, True, True, "triton")
    for w_, g_ in zip(want, got):
        assert torch.allclose(w_, g_, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_fp16_large_x_times_norm_weight_stays_finite_and_accurate(backend):
    """|x * g| > 65504 overflowed the fp16 operand (NaN rows) although the normalised rows are O(|g|); the Triton
    kernel scales g by a power of two first. Error stays within 2x torch's own unfused fp16 pipeline."""
    M, K, N = 24, 96, 40
    x = (torch.randn(M, K) * 400).half()
    g = (torch.rand(K) * 400 + 100).half()  # |x * g| up to ~1e6
    w = (torch.randn(N, K) * 0.05).half()
    out = tilewright.rms_norm_linear(x, g, w, eps=EPS, backend=backend)
    assert torch.isfinite(out).all()
    ref = ref64(x, g, w, None)
    torch_fp16 = F.linear(F.rms_norm(x.float(), (K,), g.float(), EPS).half().float(), w.float())
    base = (torch_fp16.double() - ref).abs().max().item()
    assert (out.double() - ref).abs().max().item() <= 2 * base + 1e-3


def test_fp16_rescaled_g_is_bit_identical_where_nothing_overflows():
    """The power-of-two rescale must not change a single bit of the result where x * g fits in fp16."""
    M, K, N = 20, 64, 32
    x, w = torch.randn(M, K).half(), torch.randn(N, K).half()
    g = (torch.rand(K) * 3 + 0.5).half()  # max|g| in (2, 4]: e = 2, g * 2^-2
    y = torch.empty(M, N, dtype=torch.float16)
    launch_rmsnorm_gemm(x, g, w.t(), y, None, EPS)
    ref = rms_norm_linear_reference(x.float(), g.float(), w.float(), None, EPS)
    assert (y.float() - ref).abs().max().item() < 0.05 * ref.abs().max().item()
    y_unit = torch.empty_like(y)
    launch_rmsnorm_gemm(x, (g.float() / 4).half(), w.t(), y_unit, None, EPS)  # same operand bits, e = 0
    assert torch.equal(y * 0.25, y_unit)


def test_double_backward_raises_a_clear_error():
    x = torch.randn(6, 32, requires_grad=True)
    g, w = torch.randn(32, requires_grad=True), torch.randn(8, 32, requires_grad=True)
    y = tilewright.rms_norm_linear(x, g, w)
    gx, = torch.autograd.grad((y * y).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad((gx * gx).sum(), w)


@pytest.mark.parametrize("kwargs,arg", [({"bias": [0.0] * 8}, "bias"), ({"backend": "nonsense"}, "backend"),
                                        ({"backend": 3}, "backend")])
def test_wrong_argument_types_name_the_argument(kwargs, arg):
    with pytest.raises((TypeError, ValueError), match=arg):
        tilewright.rms_norm_linear(torch.randn(4, 16), torch.ones(16), torch.randn(8, 16), **kwargs)


def test_g_scale_kernel_compiles_for_sm90():
    """Every Triton kernel is AOT-compiled for sm_90 in the CPU tier: the one-program g scale reduction too."""
    from tilewright.triton_kernels.aot import compile_reports

    rep, = compile_reports([dict(kernel="tilewright.triton_kernels.rmsnorm_gemm:_g_pow2_scale_kernel",
                                 signature={"g_ptr": "*fp16", "out_ptr": "*fp32", "K": "i32"},
                                 constexprs={"BLOCK": 1024}, arch=90, num_warps=4, num_stages=1,
                                 divisible_by_16=("g_ptr", "out_ptr"))])
    assert rep.spill_bytes == 0 and rep.sass


def test_dg_reduction_kernel_compiles_for_sm90():
    """The norm backward's last dg level (_dg_reduce_kernel) AOT-compiled for sm_90 as the backward launches it: no
    spills, its float64 accumulation in SASS (DADD)."""
    from tilewright.triton_kernels import rmsnorm_gemm
    from tilewright.triton_kernels.aot import compile_reports

    rep, = compile_reports([dict(kernel="tilewright.triton_kernels.rmsnorm_gemm:_dg_reduce_kernel",
                                 signature={"part_ptr": "*fp32", "dg_ptr": "*fp32", "P": "i32", "K": "i32"},
                                 constexprs={"BLOCK_P": rmsnorm_gemm.DG_REDUCE_BLOCK_P,
                                             "BLOCK_K": rmsnorm_gemm.DG_REDUCE_BLOCK_K},
                                 arch=90, num_warps=4, num_stages=3, divisible_by_16=("part_ptr", "dg_ptr", "K"))])
    assert rep.spill_bytes == 0 and rep.has("DADD")


# ----------------------------------------------------------------------------------------------------------------------
# The two-pass forward (ops/rms_norm_linear._two_pass): u = rms_norm(x) * g and rstd, then the plain GEMM
# ----------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_block_k", [None, 16])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_norm_forward_kernel_gives_u_and_rstd_single_and_chunked(max_block_k, dtype):
    from tilewright.triton_kernels.rmsnorm_gemm import launch_rmsnorm_fwd

    torch.manual_seed(0)
    M, K = 37, 123  # K not a multiple of 8 (nor of the 16-column chunks)
    x = (torch.randn(M, K + 5) * 3).to(dtype)[:, :K]  # row stride K + 5: rows are read through their stride
    g = (1 + 0.1 * torch.randn(K)).to(dtype)
    rstd = torch.full((M,), float("nan"))
    u = launch_rmsnorm_fwd(x, g, rstd, EPS, max_block_k=max_block_k)
    xd = x.double()
    r64 = torch.rsqrt(xd.pow(2).mean(-1) + EPS)
    assert ((rstd.double() - r64).abs() / r64).max() < 1e-6
    want = xd * r64[:, None] * g.double()
    own = (F.rms_norm(x, (K,), None, EPS) * g).double()  # torch's unfused operand in the same dtype
    assert (u.double() - want).abs().max() <= max(2 * (own - want).abs().max().item(), 1e-6)


@pytest.mark.parametrize("bias", [False, True])
def test_two_pass_forward_matches_fp64_within_torch_error(bias):
    import importlib

    _two_pass = importlib.import_module("tilewright.ops.rms_norm_linear")._two_pass

    torch.manual_seed(1)
    M, N, K = 70, 48, 40
    x = torch.randn(M, K, dtype=torch.float16) * 2
    g = (1 + 0.1 * torch.randn(K)).half()
    w = (torch.randn(N, K) / K ** 0.5).half()
    b = (0.1 * torch.randn(N)).half() if bias else None
    rstd = torch.empty(M)
    y, r = _two_pass(x, g, w, b, EPS, rstd)
    want = ref64(x, g, w, b)
    own = F.linear(F.rms_norm(x.float(), (K,), g.float(), EPS).half(), w, b)  # torch's fp16 unfused pipeline
    assert r is rstd and torch.isfinite(y).all()
    assert (y.double() - want).abs().max() <= max(2 * (own.double() - want).abs().max().item(), 1e-3)


def test_the_two_pass_rule(monkeypatch):
    """Two passes where the router picks the fused CUDA kernel, or the fused Triton kernel at >= 2^36 FLOPs; never
    when forced, for fp32, for CPU tensors, or with TILEWRIGHT_RMS_TWO_PASS=0."""
    import importlib
    from types import SimpleNamespace as NS

    op_module = importlib.import_module("tilewright.ops.rms_norm_linear")  # (the package attribute is the function)
    rule = op_module.two_pass_applies

    def x(M=8192, K=4096, dtype=torch.bfloat16, cuda=True):
        return NS(is_cuda=cuda, dtype=dtype, shape=(M, K))

    cuda, triton = NS(backend="cuda", forced=False), NS(backend="triton", forced=False)
    assert rule(cuda, x(), 4096) and rule(cuda, x(M=128), 4096)  # the CUDA kernel's own region decides its size
    assert rule(triton, x(3000, 5120), 5120) and not rule(triton, x(512), 4096)  # 2^36 FLOPs for the Triton pick
    assert rule(triton, x(128), 4096) and rule(triton, x(16), 4096)  # decode rows: two passes
    assert not rule(NS(backend="cuda", forced=True), x(), 4096)
    assert not rule(NS(backend="torch", forced=False), x(), 4096)
    assert not rule(cuda, x(dtype=torch.float32), 4096) and not rule(cuda, x(cuda=False), 4096)
    # given the weight: where the plain GEMM would go to cuBLAS (decode, small problems), two passes
    from tilewright import cublas_routes

    w = torch.empty(4096, 4096, dtype=torch.bfloat16)
    asked = []
    monkeypatch.setattr(cublas_routes, "cublas_preferred",
                        lambda a, b, bias=None: (asked.append((a.shape, b.shape, b.stride())) or True, "test"))
    assert rule(triton, x(512), 4096, w) and asked == [((512, 4096), (4096, 4096), (1, 4096))]  # b = weight.t()
    monkeypatch.setattr(cublas_routes, "cublas_preferred", lambda a, b, bias=None: (False, "test"))
    assert not rule(triton, x(512), 4096, w)
    monkeypatch.setenv("TILEWRIGHT_RMS_TWO_PASS", "0")
    assert not rule(cuda, x(), 4096)


def test_the_op_runs_the_two_passes_when_the_rule_says_so(monkeypatch):
    import importlib

    op_module = importlib.import_module("tilewright.ops.rms_norm_linear")
    torch.manual_seed(2)
    x, g, w = torch.randn(20, 16).half(), (1 + 0.1 * torch.randn(16)).half(), torch.randn(12, 16).half()
    seen = []
    real = op_module._two_pass
    monkeypatch.setattr(op_module, "two_pass_applies", lambda *a: True)
    monkeypatch.setattr(op_module, "_two_pass", lambda *a: seen.append(1) or real(*a))
    y, rstd = op_module._rms_norm_linear_full(x, g, w, None, EPS, None)
    assert seen and (y.double() - ref64(x, g, w, None)).abs().max() < 2e-2
    assert torch.allclose(rstd.double(), torch.rsqrt(x.double().pow(2).mean(-1) + EPS), rtol=1e-6)
