"""Flash attention, CPU tier: the Triton kernels under TRITON_INTERPRET=1 against an fp64 reference.

Shapes are small (the interpreter costs ~2-3 ms per program x loop step) but cover every code path: causal and not,
GQA/MQA, Sq != Skv both ways, ragged lengths, the original head dims 32-256 (96/192 exercise the padded tile; the
other multiples of 8 from 8 to 256 are in tests/test_attention_head_dims.py), fp16 / fp32
(and bf16 through the interpreter's upcast path), strided inputs, the TMA-descriptor path, rows without a visible
key, the LSE output and its gradient, the op registration (opcheck, torch.compile fullgraph) and every input check.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright.ops.attention import flash_attn_bwd_op, flash_attn_fwd_op
from tilewright.reference import attention_grad_reference, attention_reference

pytestmark = pytest.mark.interpreter

TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def _inputs(B, Hq, Hkv, Sq, Skv, D, dtype, requires_grad=True):
    q = torch.randn(B, Hq, Sq, D, dtype=dtype)
    k = torch.randn(B, Hkv, Skv, D, dtype=dtype)
    v = torch.randn(B, Hkv, Skv, D, dtype=dtype)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def _check(got, ref64, lowp, dtype, what, factor=2.0):
    """flash-attn convention: error vs fp64 <= factor x the same-dtype torch reference's error (floor: TOL)."""
    err = (got.double() - ref64).abs().max().item()
    floor = TOL[dtype] * max(1.0, ref64.abs().max().item())  # relative to the values' size (one rounding)
    bound = max(factor * (lowp.double() - ref64).abs().max().item(), floor) if lowp is not None else floor
    assert err <= bound, f"{what}: max error {err:.3e} > bound {bound:.3e}"


def _fwd_bwd_check(B, Hq, Hkv, Sq, Skv, D, causal, dtype, scale=None):
    q, k, v = _inputs(B, Hq, Hkv, Sq, Skv, D, dtype)
    out, lse = tilewright.flash_attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    dout = torch.randn_like(out)
    out.backward(dout)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()

    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out64, lse64 = attention_reference(q64, k64, v64, causal, scale)
    out64.backward(dout.double())
    low = None
    if dtype != torch.bfloat16:  # torch CPU math in the same low precision (bf16 CPU matmul is not representative)
        ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
        low, _ = attention_reference(ql, kl, vl, causal, scale)
        low.backward(dout)
    _check(out, out64, low, dtype, "out")
    assert (lse.double() - lse64).abs().max().item() < 1e-4, "lse"
    for name, t, t64, tl_ in (("dq", q, q64, "q"), ("dk", k, k64, "k"), ("dv", v, v64, "v")):
        lowgrad = None if low is None else {"q": ql, "k": kl, "v": vl}[tl_].grad
        _check(t.grad, t64.grad, lowgrad, dtype, name, factor=3.0)


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Skv,D,causal,dtype", [
    (1, 2, 2, 64, 64, 64, False, torch.float32),
    (1, 2, 2, 70, 70, 64, True, torch.float16),     # ragged causal
    (2, 4, 1, 40, 100, 32, True, torch.float32),    # MQA, Sq < Skv, causal
    (1, 4, 2, 100, 40, 128, True, torch.float16),   # GQA, Sq > Skv, causal
    (1, 2, 2, 33, 47, 96, False, torch.float16),    # padded head dim, ragged
    (1, 1, 1, 50, 50, 192, True, torch.float32),    # padded head dim 192 -> 256 tile
    (1, 1, 1, 65, 64, 256, False, torch.float16),
    (1, 2, 1, 48, 48, 64, True, torch.bfloat16),    # bf16 through the interpreter's upcast path
])
def test_forward_backward_vs_fp64(B, Hq, Hkv, Sq, Skv, D, causal, dtype):
    _fwd_bwd_check(B, Hq, Hkv, Sq, Skv, D, causal, dtype)


def test_custom_scale():
    _fwd_bwd_check(1, 1, 1, 40, 40, 64, True, torch.float32, scale=0.3)


def test_causal_alignment_matches_sdpa_top_left():
    """is_causal=True is top-left aligned in SDPA (query i sees keys j <= i) whatever Sq and Skv are."""
    for Sq, Skv in ((20, 50), (50, 20)):
        q, k, v = _inputs(1, 2, 2, Sq, Skv, 32, torch.float32, requires_grad=False)
        ours = tilewright.flash_attention(q, k, v, causal=True)
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-5)


def test_strided_bshd_inputs_read_in_place():
    B, S, H, D = 2, 37, 3, 64
    qb, kb, vb = (torch.randn(B, S, H, D) for _ in range(3))
    q, k, v = (t.transpose(1, 2) for t in (qb, kb, vb))  # (B, H, S, D) views, no copy
    assert not q.is_contiguous()
    out = tilewright.flash_attention(q, k, v, causal=True)
    assert out.stride() == q.stride(), "output takes q's layout"
    ref, _ = attention_reference(q.double(), k.double(), v.double(), True)
    assert (out.double() - ref).abs().max().item() < TOL[torch.float32]
    # a non-unit last-dim stride is copied once, still correct
    q2 = torch.randn(B, H, D, S).transpose(-1, -2)
    out2 = tilewright.flash_attention(q2, k, v)
    ref2, _ = attention_reference(q2.double(), k.double(), v.double())
    assert (out2.double() - ref2).abs().max().item() < TOL[torch.float32]


def tma_path_check(D: int, scale: float) -> None:
    """The sm_90 descriptor path (forced on; the interpreter emulates TMA) at head dim D, GQA, ragged, causal: the box
    is HEAD_DIM_PAD columns wide over a D-column tensor, so columns past D are zero-filled on load and clipped on
    store. Outputs start as NaN, so an element the kernels never write fails."""
    import triton

    from tilewright.triton_kernels import attention as A

    B, Hq, Hkv, Sq, Skv = 1, 2, 1, 45, 70
    q, k, v = _inputs(B, Hq, Hkv, Sq, Skv, D, torch.float16, requires_grad=False)
    out = torch.full_like(q, float("nan"))
    lse = torch.empty(B, Hq, Sq)
    A.attention_forward(q, k, v, out, lse, True, scale, use_tma=True,
                        config=triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}))
    ref, ref_lse = attention_reference(q.double(), k.double(), v.double(), True, scale)
    assert (out.double() - ref).abs().max().item() < TOL[torch.float16]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-4
    dout = torch.randn_like(out)
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    A.attention_backward(dout, q, k, v, out, lse, dq, dk, dv, True, scale, use_tma=True)
    g64 = attention_grad_reference(dout.double(), q.double(), k.double(), v.double(), True, scale)
    for got, want in zip((dq, dk, dv), g64):
        assert (got.double() - want).abs().max().item() < 5e-3


def test_tma_descriptor_path_and_configs():
    """The descriptor path with a padded head dim (96 in a 128-wide tile)."""
    tma_path_check(96, 0.125)

def test_config_tables_respect_causal_alignment():
    from tilewright.triton_kernels import attention as A

    for table in (A._FWD_TILES, A._FWD_TILES_PTR, A._DQ_TILES, A._DQ_TILES_PTR):
        for tiles in table.values():
            assert all(bm % bn == 0 for bm, bn, _, _ in tiles)
    for table in (A._DKDV_TILES, A._DKDV_TILES_PTR):
        for tiles in table.values():
            assert all(bn % bm == 0 for bm, bn, _, _ in tiles)


def test_rows_without_visible_key_give_zero_and_neg_inf():
    """Top-left causal never empties a row, so the empty case is Skv == 0: output 0, LSE -inf, grads 0, no NaN."""
    for backend in ("triton", "torch"):
        q, k, v = _inputs(1, 2, 2, 5, 0, 64, torch.float32)
        out, lse = tilewright.flash_attention(q, k, v, causal=True, return_lse=True, backend=backend)
        assert torch.equal(out, torch.zeros_like(out))
        assert torch.isneginf(lse).all()
        (out.sum() + 0 * lse.sum()).backward()
        assert torch.equal(q.grad, torch.zeros_like(q))
    q, k, v = _inputs(1, 2, 2, 0, 8, 64, torch.float32)
    assert tilewright.flash_attention(q, k, v).shape == (1, 2, 0, 64)


def test_lse_gradient():
    q, k, v = _inputs(1, 2, 1, 30, 45, 32, torch.float32)
    w = torch.randn(1, 2, 30)
    out, lse = tilewright.flash_attention(q, k, v, causal=True, return_lse=True)
    (out.sum() + (lse * w).sum()).backward()
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    o64, l64 = attention_reference(q64, k64, v64, True)
    (o64.sum() + (l64 * w.double()).sum()).backward()
    for t, t64 in ((q, q64), (k, k64), (v, v64)):
        assert (t.grad.double() - t64.grad).abs().max().item() < 1e-4


def test_torch_backend_and_router():
    q, k, v = _inputs(1, 4, 2, 20, 30, 64, torch.float32)
    assert "triton" in tilewright.explain("attention", q, k, v).splitlines()[0]
    out = tilewright.flash_attention(q, k, v, causal=True, backend="torch")
    out.sum().backward()
    g = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    out_t = tilewright.flash_attention(q, k, v, causal=True, backend="triton")
    out_t.sum().backward()
    torch.testing.assert_close(out, out_t, atol=2e-5, rtol=1e-5)
    for a, t in zip(g, (q, k, v)):
        torch.testing.assert_close(a, t.grad, atol=1e-4, rtol=1e-4)


def test_sdpa_drop_in():
    q, k, v = _inputs(2, 4, 2, 24, 24, 32, torch.float32, requires_grad=False)
    ours = tilewright.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-5)
    ours3 = tilewright.scaled_dot_product_attention(q[0], k[0].repeat_interleave(2, 0), v[0].repeat_interleave(2, 0),
                                                   scale=0.2)
    theirs3 = F.scaled_dot_product_attention(q[0], k[0].repeat_interleave(2, 0), v[0].repeat_interleave(2, 0),
                                             scale=0.2)
    torch.testing.assert_close(ours3, theirs3, atol=2e-5, rtol=1e-5)
    with pytest.raises(NotImplementedError, match="attn_mask.*is_causal=True"):
        tilewright.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(24, 24, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match="dropout_p"):
        tilewright.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="enable_gqa"):
        tilewright.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("make, exc, match", [
    (lambda: (torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 64, dtype=torch.float16), torch.randn(1, 2, 8, 64)),
     TypeError, "^k: dtype"),
    (lambda: (torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 32), torch.randn(1, 2, 8, 64)), ValueError,
     "^k: head dim 32"),
    (lambda: (torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 12)), ValueError,
     "^v: value head dim 12 is not supported"),  # (a supported one of its own runs: test_attention_value_dim.py)
    (lambda: (torch.randn(1, 6, 8, 64), torch.randn(1, 4, 8, 64), torch.randn(1, 4, 8, 64)), ValueError,
     "^k: 4 kv heads do not divide"),
    (lambda: (torch.randn(2, 8, 64), torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 64)), ValueError, "^q: expected 4-D"),
    (lambda: (torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 64, device="meta"), torch.randn(1, 2, 8, 64)),
     ValueError, "^k: on device meta"),
    (lambda: (torch.randn(1, 2, 8, 36), torch.randn(1, 2, 8, 36), torch.randn(1, 2, 8, 36)), ValueError,
     "^q: head dim 36 is not supported: it is not a multiple of 8"),
    (lambda: (torch.randn(1, 2, 8, 264), torch.randn(1, 2, 8, 264), torch.randn(1, 2, 8, 264)), ValueError,
     "^q: head dim 264 is not supported: it is larger than 256"),
    (lambda: (torch.ones(1, 2, 8, 64, dtype=torch.int32),) * 3, TypeError, "^q: dtype torch.int32"),
    (lambda: (torch.randn(1, 2, 8, 64), torch.randn(2, 2, 8, 64), torch.randn(2, 2, 8, 64)), ValueError,
     "batch sizes"),
    (lambda: (torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 64), torch.randn(1, 2, 9, 64)), ValueError,
     "^v: shape"),
])
def test_input_checks(make, exc, match):
    q, k, v = make()
    with pytest.raises(exc, match=match):
        tilewright.flash_attention(q, k, v)


def test_unknown_backend_is_an_error():
    q, k, v = _inputs(1, 1, 1, 8, 8, 32, torch.float32, requires_grad=False)
    with pytest.raises(ValueError, match="unknown backend"):
        tilewright.flash_attention(q, k, v, backend="cudnn")


def test_opcheck():
    q, k, v = _inputs(1, 2, 1, 24, 40, 32, torch.float32)
    torch.library.opcheck(flash_attn_fwd_op, (q, k, v, True, False, 0.2, 0.0, None))
    out, lse = flash_attn_fwd_op(q.detach(), k.detach(), v.detach(), True, False, 0.2, 0.0, None)
    dout = torch.randn_like(out)
    torch.library.opcheck(flash_attn_bwd_op, (dout, None, q.detach(), k.detach(), v.detach(), out, lse, True, False,
                                              0.2, 0.0, None))
    # the bottom-right alignment and a soft cap through the ops too (Sq 24 < Skv 40: a shifted diagonal)
    torch.library.opcheck(flash_attn_fwd_op, (q, k, v, True, True, 0.2, 0.0, None))
    torch.library.opcheck(flash_attn_fwd_op, (q, k, v, True, True, 0.2, 3.0, None))


class _Block(torch.nn.Module):
    """Pre-norm transformer block whose attention is tilewright's SDPA drop-in (GQA, causal)."""

    def __init__(self, dim=64, heads=2, kv_heads=1):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * self.hd)
        self.proj = torch.nn.Linear(heads * self.hd, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(), torch.nn.Linear(2 * dim, dim))

    def forward(self, x):
        B, S, _ = x.shape
        qkv = self.qkv(self.norm1(x)).view(B, S, self.heads + 2 * self.kv_heads, self.hd)
        q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=2)
        a = tilewright.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                    is_causal=True, enable_gqa=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, -1))
        return x + self.mlp(self.norm2(x))


def test_torch_compile_fullgraph_transformer_block():
    torch._dynamo.reset()
    block = _Block()
    x = torch.randn(2, 20, 64)
    ref = block(x)
    ref.sum().backward()
    ref_grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    out = compiled(x)
    out.sum().backward()
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for p, g in zip(block.parameters(), ref_grads):
        torch.testing.assert_close(p.grad, g, atol=1e-4, rtol=1e-4)


def test_bench_tiny_suite():
    from tilewright.bench import attention as bench
    from tilewright.bench.common import COLUMNS

    df = bench.run("tiny", progress=lambda *a, **k: None)
    assert list(df.columns)[:len(COLUMNS)] == COLUMNS
    assert set(df["provider"]) == {"tilewright-triton", "torch-math"}
    # two Sq == Skv shapes x (full, causal) + one Sq != Skv shape (full only) + two option rows (window, softcap),
    # x 2 providers x (fwd, bwd)
    assert df["median_ms"].gt(0).all() and len(df) == (2 * 2 + 1 + 2) * 2 * 2
    assert set(df[df.case.str.contains("window|softcap")].case) == {
        f"{shape}|{mask}|{mode}" for shape, mask in (("1x2/1x64x32", "causal+window15:0"),
                                                     ("1x1/1x32x32", "causal+softcap20")) for mode in ("fwd", "bwd")}
    assert df.speedup.notna().all()  # every row has its peer (torch-math on CPU, the option rows' too)
    own_skv = set(df[df.case.str.startswith("1x2/2x48:80x32")].case)
    assert own_skv == {"1x2/2x48:80x32|full|fwd", "1x2/2x48:80x32|full|bwd"}
    flops = 4 * 1 * 2 * 64 ** 2 * 64
    row = df[(df.case.str.startswith("1x2/2x64x64")) & (df.provider == "torch-math")].iloc[0]
    assert math.isfinite(row.tflops) and row.tflops > 0 and flops > 0


# ---- issue 12 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", ["abc", [0.1], True])
def test_non_numeric_scale_names_the_argument(scale):
    q, k, v = _inputs(1, 2, 2, 8, 8, 32, torch.float32, requires_grad=False)
    with pytest.raises(TypeError, match="scale"):
        tilewright.flash_attention(q, k, v, scale=scale)
    with pytest.raises(TypeError, match="scale"):
        tilewright.scaled_dot_product_attention(q, k, v, scale=scale)


def test_unknown_backend_names_the_argument():
    q, k, v = _inputs(1, 2, 2, 8, 8, 32, torch.float32, requires_grad=False)
    with pytest.raises((TypeError, ValueError), match="backend"):
        tilewright.flash_attention(q, k, v, backend=["triton"])


def test_double_backward_raises_a_clear_error():
    q, k, v = _inputs(1, 2, 2, 16, 16, 32, torch.float32)
    out = tilewright.flash_attention(q, k, v)
    gq, = torch.autograd.grad((out * out).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad((gq * gq).sum(), k)


def test_backward_op_reads_any_layout_of_its_saved_tensors():
    """Direct calls of the backward op with a strided LSE / non-unit-stride dOut: the kernels read LSE as a
    contiguous (B, H, S) array and every (B, H, S, D) tensor with a unit last stride."""
    B, H, S, D = 1, 2, 24, 32
    q, k, v = _inputs(B, H, H, S, S, D, torch.float32, requires_grad=False)
    scale = 1 / math.sqrt(D)
    out, lse = flash_attn_fwd_op(q, k, v, False, False, scale, 0.0, "triton")
    do = torch.randn(B, H, S, D)
    want = flash_attn_bwd_op(do, None, q, k, v, out, lse, False, False, scale, 0.0, "triton")
    lse_strided = torch.stack([lse, torch.full_like(lse, 1e4)], -1)[..., 0]
    do_strided = do.transpose(-1, -2).contiguous().transpose(-1, -2)  # stride(-1) = S
    got = flash_attn_bwd_op(do_strided, None, q, k, v, out, lse_strided, False, False, scale, 0.0, "triton")
    for w_, g_ in zip(want, got):
        assert torch.allclose(w_, g_, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [-0.5, -0.05])
def test_negative_scale_forward_and_gradients(causal, scale):
    """Found by the fuzzer: the kernels scale the running row max after taking it, which is wrong for scale < 0
    (NaN/inf rows); the op runs softmax(|s| (-q) k^T) instead."""
    q, k, v = _inputs(1, 2, 1, 16, 40, 32, torch.float32)
    out, lse = tilewright.flash_attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    o64, l64 = attention_reference(q.double(), k.double(), v.double(), causal, scale)
    assert torch.allclose(out.double(), o64, atol=1e-4) and torch.allclose(lse.double(), l64, atol=1e-4)
    g = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    want = attention_grad_reference(g.double(), q.double(), k.double(), v.double(), causal, scale)
    for got, ref in zip((dq, dk, dv), want):
        assert torch.allclose(got.double(), ref, atol=1e-4)


@pytest.mark.parametrize("inf", [float("inf"), float("-inf")])
def test_infinite_scores_follow_sdpa_and_logsumexp(inf):
    """Found by the fuzzer: a +inf score gave a NaN LSE (torch's logsumexp: +inf). A row of -inf scores gives 0 and
    LSE -inf, as torch's fused SDPA does (its math softmax would give NaN)."""
    q, k, v = _inputs(1, 1, 1, 8, 8, 32, torch.float32, requires_grad=False)
    q[0, 0, 3] = inf
    k = k.abs() + 0.1  # every score of q row 3 is `inf` (same sign)
    out, lse = tilewright.flash_attention(q, k, v, return_lse=True)
    want = F.scaled_dot_product_attention(q, k, v)
    assert torch.equal(out.isnan(), want.isnan())
    assert torch.allclose(out.nan_to_num(), want.nan_to_num(), atol=1e-5)
    assert lse[0, 0, 3].item() == torch.logsumexp(q[0, 0, 3] @ k[0, 0].T / math.sqrt(32), -1).item()


def attention_aot_job(kernel: str, D: int, tiles: tuple, *, dtype: str = "bf16", causal: bool = True,
                      dot_precision: str = "tf32", use_tma: bool = True, softcap: bool = False,
                      window: bool = False, head_dim_v: int | None = None, varlen: bool = False) -> dict:
    """An sm_90a AOT build (``triton_kernels/aot.compile_reports``) of the forward ("fwd"), dK/dV ("dkdv") or dQ
    ("dq") kernel at head dim D with a (BLOCK_M, BLOCK_N, warps, stages) config, specialized like a launch on
    contiguous tensors (a row stride of D elements is 16-divisible only when D % 16 == 0)."""
    from tilewright.triton_kernels import attention as A

    fwd = kernel == "fwd"
    tensors = {"fwd": ("q", "k", "v", "o"), "dkdv": ("q", "k", "v", "do", "dk", "dv"),
               "dq": ("q", "k", "v", "do", "dq")}[kernel]
    ptrs = tuple(t.upper() for t in tensors)
    strides = [f"stride_{t}{d}" for t in tensors for d in "bhs"]
    stats = ("LSE",) if fwd else ("LSE", "DELTA")
    sig = {**{p: f"*{dtype}" for p in ptrs}, **{s: "*fp32" for s in stats}, "CU_Q": "*i32", "CU_K": "*i32",
           "sm_scale": "fp32",
           **{s: "i32" for s in strides}, "Hq": "i32", "Sq": "i32", "Skv": "i32", "GROUP": "i32",
           "SQ_BUCKET": "i32", "SKV_BUCKET": "i32", "CAUSAL_OFFSET": "i32", "SOFTCAP": "fp32", "WINDOW_OFFSET": "i32"}
    div = (*ptrs, *stats, *(s for s in strides if not s.endswith("s") or D % 16 == 0), "SQ_BUCKET", "SKV_BUCKET")
    bm, bn, warps, stages = tiles
    names = {"fwd": A._FWD_NAMES, "dkdv": A._DKDV_NAMES, "dq": A._DQ_NAMES}[kernel]
    function = {"fwd": "_attn_fwd_kernel", "dkdv": "_attn_bwd_dkdv_kernel", "dq": "_attn_bwd_dq_kernel"}[kernel]
    return dict(kernel=f"tilewright.triton_kernels.attention:{function}",
                signature=sig, arch=90, num_warps=warps, num_stages=stages, divisible_by_16=div,
                name=f"{kernel} D={D}",
                constexprs=dict(HEAD_DIM=D, HEAD_DIM_PAD=A.head_dim_pad(D), CAUSAL=causal, UPCAST=False,
                                DOT_PRECISION=dot_precision, USE_TMA=use_tma, HAS_SOFTCAP=softcap, WINDOW=window,
                                HEAD_DIM_V=head_dim_v or D, HEAD_DIM_V_PAD=A.head_dim_pad(head_dim_v or D),
                                VARLEN=varlen, **{names[0]: bm, names[1]: bn}))


def test_dkdv_kernel_builds_for_one_query_row_with_tma():
    """Found by the GPU fuzzer: with Sq == 1 Triton specialized Sq to a constant and the sm_90 TMA build of the dK/dV
    kernel failed ("PassManager::run failed") - a crash of any one-query-row backward (e.g. a decode step). The kernel
    now never specializes Sq; this compiles it for sm_90a the way a launch with Sq == 1 does (AOT, no GPU)."""
    import subprocess
    import sys

    from tilewright.triton_kernels.aot import compile_reports

    probe = ("from tilewright.triton_kernels import attention as ta; "
             "print([p.name for p in ta._attn_bwd_dkdv_kernel.params if p.do_not_specialize])")
    env = dict(__import__("os").environ, TRITON_INTERPRET="0")
    names = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert names.stdout.strip().splitlines()[-1] == "['Sq', 'CAUSAL_OFFSET', 'WINDOW_OFFSET']"
    rep, = compile_reports([attention_aot_job("dkdv", 64, (32, 128, 8, 3), dtype="fp16", causal=False)])
    assert rep.has("HGMMA") or rep.has("HMMA")


def test_fp32_dkdv_kernel_builds_for_sm90():
    """fp32 attention accumulates O, dK/dV and dQ through triton_kernels/dot.dot_accumulate (tile sums added apart,
    the GPU fuzzer's fp32 grad[v] fix): its sm_90 build compiles and runs on FFMAs, not wgmma. (That the helper's
    slice sums survive compilation is checked through the GEMM, test_triton_gemm_aot.py::
    test_fp32_gemm_sums_each_k_slice_apart: attention's softmax FADDs would hide the count here.)"""
    from tilewright.triton_kernels.aot import compile_reports

    rep, = compile_reports([attention_aot_job("dkdv", 64, (32, 64, 4, 2), dtype="fp32", dot_precision="ieee",
                                              use_tma=False)])
    assert rep.has("FFMA") and not rep.has("HGMMA")


@pytest.mark.parametrize("Sq,Skv", [(24, 70), (70, 24), (40, 40), (1, 50), (50, 1)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_bottom_right_causal_matches_the_shifted_mask(Sq, Skv, dtype):
    """causal_align="bottom_right": query i sees key j iff j <= i + Skv - Sq (flash-attn's convention). Output, LSE
    and gradients against the float64 reference with that mask, within 2x the same-dtype reference's error; rows that
    see no key (Sq > Skv) give 0, LSE -inf and zero gradients (GQA, odd lengths)."""
    from tilewright.reference import attention_reference, causal_visible

    q, k, v = _inputs(1, 4, 2, Sq, Skv, 32, dtype)
    out, lse = tilewright.flash_attention(q, k, v, causal=True, causal_align="bottom_right", return_lse=True)
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = attention_reference(q64, k64, v64, True, None, True)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    same, _ = attention_reference(ql, kl, vl, True, None, True)
    same_grads = torch.autograd.grad(same, (ql, kl, vl), do)
    for name, a, b, r in zip(("out", "dq", "dk", "dv"), (out, *grads), (same, *same_grads), (ref, *ref_grads)):
        err = (a.double() - r).abs().max().item()
        base = (b.double() - r).abs().max().item()
        assert err <= 2 * base + 1e-5, (name, err, base)
    none = ~causal_visible(Sq, Skv, True, "cpu").any(-1)  # rows without a visible key
    assert torch.isneginf(lse[..., none]).all() and torch.isfinite(lse[..., ~none]).all()
    assert (out[..., none, :] == 0).all() and (grads[0][..., none, :] == 0).all()
    if Sq == Skv:  # one alignment then: identical to top-left
        assert torch.equal(out, tilewright.flash_attention(q, k, v, causal=True))


def test_causal_align_is_checked_and_ignored_without_causal():
    q, k, v = _inputs(1, 2, 2, 20, 30, 16, torch.float32, requires_grad=False)
    with pytest.raises(ValueError, match="causal_align"):
        tilewright.flash_attention(q, k, v, causal=True, causal_align="bottom-right")
    with pytest.raises(TypeError, match="causal_align"):
        tilewright.flash_attention(q, k, v, causal=True, causal_align=1)
    assert torch.equal(tilewright.flash_attention(q, k, v, causal_align="bottom_right"),
                       tilewright.flash_attention(q, k, v))


@pytest.mark.parametrize("causal,bottom_right", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_softcap_matches_the_capped_reference(causal, bottom_right, dtype):
    """softcap=c: scores c * tanh(scale q k^T / c) (Gemma 2). Output, LSE and gradients against the float64
    reference with the cap (autograd through torch.tanh), within 2x the same-dtype reference's error; scores large
    enough that the cap bends them (|scale q k| up to ~10 against c = 5), GQA, odd lengths, both causal alignments."""
    from tilewright.reference import attention_reference

    q, k, v = _inputs(1, 4, 2, 37, 53, 32, dtype)
    with torch.no_grad():
        q.mul_(3.0)
    cap, align = 5.0, "bottom_right" if bottom_right else "top_left"
    out, lse = tilewright.flash_attention(q, k, v, causal=causal, causal_align=align, softcap=cap, return_lse=True)
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = attention_reference(q64, k64, v64, causal, None, bottom_right, cap)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    same, _ = attention_reference(ql, kl, vl, causal, None, bottom_right, cap)
    same_grads = torch.autograd.grad(same, (ql, kl, vl), do)
    for name, a, b, r in zip(("out", "dq", "dk", "dv"), (out, *grads), (same, *same_grads), (ref, *ref_grads)):
        err = (a.double() - r).abs().max().item()
        base = (b.double() - r).abs().max().item()
        assert err <= 2 * base + 1e-5, (name, err, base)
    finite = torch.isfinite(ref_lse)
    assert torch.allclose(lse.double()[finite], ref_lse.detach()[finite], atol=1e-4)
    uncapped = tilewright.flash_attention(q, k, v, causal=causal, causal_align=align)
    assert (uncapped - out).abs().max() > 0.1  # the cap is not a no-op on these scores


def test_softcap_is_checked_and_zero_means_none():
    q, k, v = _inputs(1, 2, 2, 20, 30, 16, torch.float32, requires_grad=False)
    for bad, err in ((-1.0, ValueError), (float("inf"), ValueError), (float("nan"), ValueError), ("5", TypeError),
                     (True, TypeError)):
        with pytest.raises(err, match="softcap"):
            tilewright.flash_attention(q, k, v, softcap=bad)
    assert torch.equal(tilewright.flash_attention(q, k, v, softcap=0.0), tilewright.flash_attention(q, k, v))
    assert torch.equal(tilewright.flash_attention(q, k, v, softcap=None), tilewright.flash_attention(q, k, v))


@pytest.mark.parametrize("option", ["softcap", "window"])
def test_mask_options_compile_for_sm90_without_new_spills(option):
    """The soft cap adds a tanh (exp2 + reciprocal) per score and, in the backward, the cap's derivative beside P; the
    sliding window (issue 15.3) adds a lower band edge (one more masked key range in the forward and dQ, one more
    masked query range in dK/dV). With either, the forward at head dim 64 and 128 (first, largest TMA tiles) stays
    spill-free with wgmma for sm_90a. The dK/dV kernel spills in most of its configs without them already (issue 15
    item 1: a backward that does not spill); with either, each config spills at most 128 bytes more than without."""
    from tilewright.triton_kernels import attention as A
    from tilewright.triton_kernels.aot import compile_reports

    fwd = [attention_aot_job("fwd", D, A._FWD_TILES[D][0], **{option: True}) for D in (64, 128)]
    dkdv = [attention_aot_job("dkdv", D, A._DKDV_TILES[D][0], **{option: on})
            for D in (64, 128) for on in (False, True)]
    reps = compile_reports(fwd + dkdv)
    for job, rep in zip(fwd, reps[:2]):
        assert rep.has("HGMMA") and rep.spill_bytes == 0, (job["name"], rep.spill_bytes, rep.registers)
    for i in range(2, len(reps), 2):
        plain, with_option = reps[i], reps[i + 1]
        assert with_option.has("HGMMA")
        assert with_option.spill_bytes <= plain.spill_bytes + 128, (dkdv[i - 2]["name"], plain.spill_bytes,
                                                                     with_option.spill_bytes)


def test_dq_class_256_default_compiles_for_sm90_without_spills():
    """The dQ kernel's class-256 default (three stages, measured 8% faster than two on H100) is spill-free with wgmma
    for sm_90a at head dim 256 (ptxas on the device: 239 registers, 0 spills)."""
    from tilewright.triton_kernels import attention as A
    from tilewright.triton_kernels.aot import compile_reports

    job = attention_aot_job("dq", 256, A._DQ_TILES[256][0])
    (rep,) = compile_reports([job])
    assert rep.has("HGMMA") and rep.spill_bytes == 0, (rep.spill_bytes, rep.registers)


def test_value_head_dim_kernels_compile_for_sm90():
    """DeepSeek MLA's head dims (q/k 192, v 128) on the 256 class's default tiles: the forward spill-free with wgmma
    for sm_90a, the dK/dV kernel spilling no more than at 192 / 192 (the class spills already, see _DKDV_TILES)."""
    from tilewright.triton_kernels import attention as A
    from tilewright.triton_kernels.aot import compile_reports

    jobs = [attention_aot_job(kernel, 192, table[256][0], head_dim_v=dv)
            for kernel, table in (("fwd", A._FWD_TILES), ("dkdv", A._DKDV_TILES)) for dv in (192, 128)]
    fwd_same, fwd_mla, dkdv_same, dkdv_mla = compile_reports(jobs)
    for rep in (fwd_same, fwd_mla, dkdv_same, dkdv_mla):
        assert rep.has("HGMMA")
    assert fwd_mla.spill_bytes == 0
    assert dkdv_mla.spill_bytes <= dkdv_same.spill_bytes, (dkdv_mla.spill_bytes, dkdv_same.spill_bytes)


def test_head_slices_of_a_fused_qkv_output_give_bshd_ordered_output_and_gradients():
    """The output and gradients keep a non-dense q / k / v view's dim order (ops.attention._empty_in_order), so the
    model's ``o.transpose(1, 2).reshape(B, S, -1)`` is a view; values match the reference."""
    torch.manual_seed(0)
    B, S, Hq, Hkv, D = 1, 40, 2, 1, 32
    heads = torch.randn(B, S, Hq + 2 * Hkv, D, dtype=torch.float32, requires_grad=True)
    q, k, v = (t.transpose(1, 2) for t in heads.split([Hq, Hkv, Hkv], dim=2))
    out = tilewright.flash_attention(q, k, v, causal=True)
    assert out.transpose(1, 2).is_contiguous()
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    assert all(g.transpose(1, 2).is_contiguous() for g in grads)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = attention_reference(q64, k64, v64, True)[0]
    g64 = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    assert (out.double() - ref).abs().max() < 1e-4
    for a, r in zip(grads, g64):
        assert (a.double() - r).abs().max() < 1e-4


def test_backward_preprocess_compiles_for_sm90_with_the_packed_statistics():
    """The backward's preprocess (delta = rowsum(dO * O), and for the sm_90a dK / dV kernel the packed base-2 LSE /
    delta blocks) compiles for sm_90a at head dim 128 and 64 with and without the statistics, spill-free, with
    vectorised loads of O and dO (LDG.E.128), at the warps attention_backward launches it with (8 when packing: 4
    spilled 32 bytes at head dim 128)."""
    from tilewright.triton_kernels import attention as A
    from tilewright.triton_kernels.aot import compile_reports

    strides = [f"stride_{t}{d}" for t in ("o", "do") for d in "bhs"]
    jobs = [dict(kernel="tilewright.triton_kernels.attention:_attn_bwd_preprocess",
                 signature={"O": "*bf16", "DO": "*bf16", "DLSE": "*fp32", "DELTA": "*fp32", "LSE": "*fp32",
                            "STATS": "*fp32", **{s: "i32" for s in strides}, "Hq": "i32", "Sq": "i32"},
                 arch=90, num_warps=A.PREPROCESS_WARPS[pack], num_stages=1, name=f"pre D={D} pack={pack}",
                 divisible_by_16=("O", "DO", "DLSE", "DELTA", "LSE", "STATS", "stride_ob", "stride_oh", "stride_os",
                                  "stride_dob", "stride_doh", "stride_dos"),
                 constexprs=dict(HEAD_DIM=D, HEAD_DIM_PAD=A.head_dim_pad(D), HAS_DLSE=False, BLOCK_M=128,
                                 PACK_STATS=pack, STAT_ROWS=64))
            for D in (128, 64) for pack in (False, True)]
    for job, rep in zip(jobs, compile_reports(jobs)):
        assert rep.spill_bytes == 0 and rep.has("LDG.E.128"), (job["name"], rep.spill_bytes)
