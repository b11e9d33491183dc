"""Flash attention, GPU tier: bf16/fp16 forward and backward on the suite's shapes (fewer heads/batch so the fp64
reference fits), against an fp64 reference with the flash-attn bound: error <= 2x torch's own same-dtype math
attention error (+ a small floor); plus determinism, odd shapes, strided inputs and CUDA-graph capture.

Each kernel runs its default config (one compile); TILEWRIGHT_AUTOTUNE=full tests the swept configs instead.
"""
import pytest
import torch

import tilewright
from tilewright.reference import attention_reference

pytestmark = pytest.mark.gpu

# (B, Hq, Hkv, S, D): attention-suite rows (bench/attention.py) with heads/batch cut so the fp64 reference stays small
SUITE_SHAPES = [(2, 2, 2, 512, 64), (1, 2, 2, 8192, 64), (1, 2, 2, 2048, 128), (1, 2, 2, 4096, 128),
                (1, 1, 1, 8192, 128), (1, 1, 1, 16384, 128), (1, 4, 1, 4096, 128), (1, 2, 2, 4096, 256)]
ODD_SHAPES = [(1, 3, 3, 1000, 777, 96), (2, 2, 1, 300, 1100, 32), (1, 2, 2, 513, 513, 192), (1, 4, 2, 1537, 200, 128)]


def _run(q, k, v, causal, **options):
    out = tilewright.flash_attention(q, k, v, causal=causal, **options)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return out, grads, dout


def _compare(B, Hq, Hkv, Sq, Skv, D, causal, dtype, factor_fwd=2.0, factor_bwd=2.0, softcap=0.0, window=None,
             bottom_right=False, head_dim_v=None):
    torch.manual_seed(0)
    q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(B, Hkv, Skv, D, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(B, Hkv, Skv, head_dim_v or D, device="cuda", dtype=dtype, requires_grad=True)
    options = {**({"softcap": softcap} if softcap else {}), **({"window": window} if window else {}),
               **({"causal_align": "bottom_right"} if bottom_right else {})}
    out, grads, dout = _run(q, k, v, causal, **options)
    assert torch.isfinite(out).all()
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out64, _ = attention_reference(q64, k64, v64, causal, None, bottom_right, softcap, window)
    g64 = torch.autograd.grad(out64, (q64, k64, v64), dout.double())
    del out64
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    # torch math attention in the same low precision
    outl, _ = attention_reference(ql, kl, vl, causal, None, bottom_right, softcap, window)
    gl = torch.autograd.grad(outl, (ql, kl, vl), dout)
    ref64 = attention_reference(q64.detach(), k64.detach(), v64.detach(), causal, None,
                                bottom_right, softcap, window)[0]
    e_ours = (out.double() - ref64).abs().max().item()
    e_torch = (outl.double() - ref64).abs().max().item()
    assert e_ours <= factor_fwd * e_torch + 1e-5, f"out: {e_ours:.3e} vs torch {e_torch:.3e}"
    for name, a, b, r in zip(("dq", "dk", "dv"), grads, gl, g64):
        e_ours = (a.double() - r).abs().max().item()
        e_torch = (b.double() - r).abs().max().item()
        assert e_ours <= factor_bwd * e_torch + 1e-4, f"{name}: {e_ours:.3e} vs torch {e_torch:.3e}"


@pytest.mark.parametrize("shape", SUITE_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
def test_suite_shapes_bf16(shape, causal):
    B, Hq, Hkv, S, D = shape
    _compare(B, Hq, Hkv, S, S, D, causal, torch.bfloat16)


@pytest.mark.parametrize("shape", [(1, 2, 2, 2048, 128), (1, 4, 1, 1024, 64)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
def test_fp16(shape, causal):
    B, Hq, Hkv, S, D = shape
    _compare(B, Hq, Hkv, S, S, D, causal, torch.float16)


# issue 15.2: head dims that are multiples of 8 but not among the original six (padded inside the kernel to 16, 32,
# 64, 128 or 256 columns): ragged lengths, GQA, both dtypes. Contiguous bf16/fp16 rows of a multiple of 8 are 16-byte
# aligned, so on sm_90 these take the TMA path (zero-filled columns past D); pre-Hopper cards the pointer path.
# Not yet run on a GPU (written without one).
NEW_HEAD_DIM_SHAPES = [(1, 2, 1, 333, 517, 8), (1, 2, 2, 700, 700, 24), (1, 4, 2, 1000, 777, 40),
                       (1, 2, 2, 513, 1025, 80), (1, 2, 1, 777, 300, 112), (1, 2, 2, 600, 600, 160),
                       (1, 1, 1, 1025, 513, 224)]


@pytest.mark.parametrize("shape", NEW_HEAD_DIM_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_new_head_dims(shape, causal, dtype):
    _compare(*shape, causal, dtype)


# issue 15.3: Gemma 2's logit soft-capping, scores c * tanh(scale q k^T / c) before the mask, against the fp64 reference
# with the same cap (SDPA has none); a cap of 2 saturates most scores of these N(0, 1) inputs, 30 almost none.
@pytest.mark.parametrize("shape", [(1, 2, 2, 2048, 2048, 128), (1, 4, 1, 1000, 777, 64), (1, 2, 2, 513, 1025, 96)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("softcap", [2.0, 30.0])
def test_softcap(shape, causal, softcap):
    _compare(*shape, causal, torch.bfloat16, softcap=softcap)


# issue 15.3: sliding-window attention (Mistral: causal + (W - 1, 0); a symmetric local window; bottom-right aligned)
@pytest.mark.parametrize("shape,causal,window,bottom_right", [
    ((1, 4, 2, 2048, 2048, 128), True, (255, 0), False), ((1, 2, 2, 1000, 1500, 64), False, (100, 100), True),
    ((1, 4, 1, 777, 777, 96), True, (31, None), False), ((1, 2, 2, 1537, 600, 128), True, (64, 0), True)],
    ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_window(shape, causal, window, bottom_right):
    _compare(*shape, causal, torch.bfloat16, window=window, bottom_right=bottom_right)


# issue 15.3: a value head dim of its own (DeepSeek MLA: 192 / 128), and a narrower one at the 128 class
@pytest.mark.parametrize("shape,dv,causal", [((1, 4, 2, 1024, 1024, 192), 128, True),
                                             ((1, 2, 2, 700, 900, 128), 64, False),
                                             ((2, 4, 1, 513, 513, 64), 128, True)],
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_value_head_dim(shape, dv, causal):
    _compare(*shape, causal, torch.bfloat16, head_dim_v=dv)


def test_value_head_dim_refuses_a_forced_cuda_forward():
    q = torch.randn(1, 2, 256, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 2, 256, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="value head dim must equal"):
        tilewright.flash_attention(q, q, v, causal=True, backend="cuda")


def test_window_runs_on_a_forced_cuda_forward():
    """The sm_90a forward takes band masks (it refused them before session 13): a forced CUDA call with a window
    agrees with the reference."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the CUDA forward is sm_90a")
    q = torch.randn(1, 2, 256, 128, device="cuda", dtype=torch.bfloat16)
    out = tilewright.flash_attention(q, q, q, causal=True, window=(64, 0), backend="cuda")
    ref = attention_reference(q.double(), q.double(), q.double(), True, window=(64, 0))[0]
    low = attention_reference(q, q, q, True, window=(64, 0))[0]
    assert (out.double() - ref).abs().max() <= 2 * (low.double() - ref).abs().max() + 1e-5


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_odd_shapes_causal(shape):
    _compare(*shape, True, torch.bfloat16)


def test_strided_bshd_and_fp32():
    torch.manual_seed(0)
    B, S, H, D = 2, 700, 4, 128
    qkv = torch.randn(B, S, 3, H, D, device="cuda", dtype=torch.bfloat16)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # packed qkv, no copies
    out = tilewright.flash_attention(q, k, v, causal=True)
    ref = attention_reference(q.double(), k.double(), v.double(), True)[0]
    low = attention_reference(q, k, v, True)[0]
    assert (out.double() - ref).abs().max() <= 2 * (low.double() - ref).abs().max() + 1e-5
    q32, k32, v32 = (t.float() for t in (q, k, v))
    out32 = tilewright.flash_attention(q32, k32, v32, causal=True)
    assert (out32.double() - ref).abs().max() < 1e-4


@pytest.mark.parametrize("S", [2048, 700])
def test_heads_of_a_fused_qkv_output_keep_the_bshd_layout_forward_and_backward(S):
    """q, k, v as head slices of one (B, S, Hq + 2 Hkv, D) projection (the Llama layer's layout, non-dense views):
    values and gradients as the reference, the output and gradients in (B, S, H, D) order so the caller's
    transpose + reshape back is a view (S 2048 runs the sm_90a kernels, S 700 Triton's)."""
    torch.manual_seed(0)
    B, Hq, Hkv, D = 2, 8, 4, 128  # at S 2048: 128 key-block CTAs, the CUDA backward's dQ-in-the-pass mode
    heads = torch.randn(B, S, Hq + 2 * Hkv, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    q, k, v = (t.transpose(1, 2) for t in heads.split([Hq, Hkv, Hkv], dim=2))
    out, grads, dout = _run(q, k, v, True)
    assert out.transpose(1, 2).is_contiguous()
    assert all(g.transpose(1, 2).is_contiguous() for g in grads)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = attention_reference(q64, k64, v64, True)[0]
    g64 = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    low = attention_reference(q.detach(), k.detach(), v.detach(), True)[0]
    assert (out.double() - ref).abs().max() <= 2 * (low.double() - ref).abs().max() + 1e-5
    for a, r in zip(grads, g64):
        assert (a.double() - r).abs().max() <= 0.05 * r.abs().max() + 1e-3


def test_deterministic():
    torch.manual_seed(0)
    q = torch.randn(2, 8, 1024, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 2, 1024, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 2, 1024, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn_like(q)
    first = None
    for _ in range(3):
        out = tilewright.flash_attention(q, k, v, causal=True)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        now = (out, *grads)
        if first is None:
            first = now
        else:
            for a, b in zip(first, now):
                assert torch.equal(a, b), "forward/backward must be bitwise reproducible"


def test_empty_kv_rows():
    q = torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 2, 0, 64, device="cuda", dtype=torch.bfloat16)
    out, lse = tilewright.flash_attention(q, k, k, return_lse=True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()


@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("poison", ["k_nan", "q_minus_inf", None])
def test_nonfinite_scores_lse_matches_torch(backend, poison):
    """A +inf query entry makes some scores +inf; a NaN key entry (or a -inf query entry beside the +inf one: inf - inf
    in the dot) makes scores NaN beside them. torch's logsumexp is then NaN, and +inf only without a NaN score. The row max used to
    drop NaNs (fmaxf / tl.max), so the LSE came out +inf (GPU fuzz, CUDA backend); both backends are checked."""
    if backend == "cuda" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the CUDA attention forward is sm_90a")
    torch.manual_seed(1)
    q = torch.randn(1, 2, 70, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 2, 150, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    q[0, 1, 5, 3] = float("inf")
    if poison == "k_nan":
        k[0, 1, 100, 3] = float("nan")
    elif poison == "q_minus_inf":
        q[0, 1, 5, 4] = float("-inf")
    out, lse = tilewright.flash_attention(q, k, v, return_lse=True, backend=backend)
    s = (q.double() @ k.double().transpose(-2, -1)) / 8.0
    ref_lse = torch.logsumexp(s, -1)
    ref_out = torch.softmax(s, -1) @ v.double()
    for name, ours, ref in (("lse", lse, ref_lse), ("out", out, ref_out)):
        for test in (torch.isnan, torch.isposinf, torch.isneginf):
            assert torch.equal(test(ours), test(ref)), f"{name}: {test.__name__} pattern differs from torch's"
    fin = torch.isfinite(ref_lse)
    assert (lse[fin].double() - ref_lse[fin]).abs().max() < 1e-3


def test_cuda_graph_capture_after_warmup():
    q = torch.randn(1, 4, 512, 64, device="cuda", dtype=torch.bfloat16)
    tilewright.flash_attention(q, q, q, causal=True)  # warm-up tunes this key
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = tilewright.flash_attention(q, q, q, causal=True)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, tilewright.flash_attention(q, q, q, causal=True))


def test_opcheck_and_compile_gpu():
    from tilewright.ops.attention import flash_attn_fwd_op

    q = torch.randn(1, 2, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch.library.opcheck(flash_attn_fwd_op, (q, q.detach().clone().requires_grad_(), q.detach().clone(), True,
                                              False, 0.125, 0.0, None))
    f = torch.compile(lambda a: tilewright.scaled_dot_product_attention(a, a, a, is_causal=True).sum(),
                      fullgraph=True, backend="aot_eager")
    f(q).backward()
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("shape,causal,offset,softcap,with_dlse,window_offset", [
    ((1, 4, 2, 777, 777, 128), True, 0, 0.0, False, None),
    ((2, 2, 2, 300, 1100, 64), True, 800, 0.0, True, None),
    ((1, 6, 2, 513, 513, 96), False, 0, 20.0, False, None),
    ((1, 4, 2, 900, 900, 128), True, 0, 0.0, False, -200),
], ids=["gqa-causal", "bottom-right-dlse", "softcap-d96", "window"])
def test_backward_bound_launches_match_the_dispatch_path(shape, causal, offset, softcap, with_dlse, window_offset):
    """attention_backward binds its three launches at a signature's first call and launches them directly after: the
    bound launches on other tensors (new addresses, new values) give bitwise what Triton's dispatch gives."""
    from tilewright.triton_kernels import attention as A

    B, Hq, Hkv, Sq, Skv, D = shape
    scale = 1 / D ** 0.5

    def inputs(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        q, do = (torch.randn(B, Hq, Sq, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        k, v = (torch.randn(B, Hkv, Skv, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        out = torch.empty_like(q)
        lse = torch.empty(B, Hq, Sq, device="cuda", dtype=torch.float32)
        A.attention_forward(q, k, v, out, lse, causal, scale, causal_offset=offset, softcap=softcap,
                            window_offset=window_offset)
        dlse = torch.randn(B, Hq, Sq, device="cuda", generator=g) if with_dlse else None
        return do, q, k, v, out, lse, dlse

    def backward(t):
        do, q, k, v, out, lse, dlse = t
        grads = (torch.full_like(q, float("nan")), torch.full_like(k, float("nan")), torch.full_like(v, float("nan")))
        A.attention_backward(do, q, k, v, out, lse, *grads, causal, scale, dlse=dlse, causal_offset=offset,
                             softcap=softcap, window_offset=window_offset)
        return grads

    A._bwd_bound.clear()
    first = backward(inputs(1))  # Triton's dispatch, binds
    assert len(A._bwd_bound) == 1
    second_inputs = inputs(2)
    bound = backward(second_inputs)  # the bound launches
    assert len(A._bwd_bound) == 1
    A._bwd_bound.clear()
    dispatched = backward(second_inputs)  # Triton's dispatch again, same tensors
    for a, b in zip(bound, dispatched):
        assert torch.isfinite(a).all() and torch.equal(a, b)
    assert not all(torch.equal(a, b) for a, b in zip(first, bound))  # (the inputs did differ)
