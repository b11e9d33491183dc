"""flash_attention_varlen (ops/varlen.py; the Triton attention kernels with VARLEN): packed sequences of different
lengths - empty ones, ones shorter than a block, Sq != Skv with bottom-right causal, GQA, windows, soft cap, a strided
packed q - forward, LSE and backward against the per-sequence reference in fp64 (CPU tier: the kernels under the
interpreter, fp16 / fp32); no sequence reads another's rows; bad inputs raise naming the argument; the custom ops pass
opcheck and compile. The GPU tier (bf16, error vs torch's own) is tests/test_varlen_gpu.py."""
from __future__ import annotations

import pytest
import torch

import tilewright
from tilewright.reference import varlen_attention_reference

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _cu(lengths) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist()], dtype=torch.int32,
                        device=DEV)


def _packed(lens_q, lens_k, Hq, Hkv, D, dtype, seed=0, Dv=None, strided_q=False):
    g = torch.Generator().manual_seed(seed)
    tq, tk = sum(lens_q), sum(lens_k)
    if strided_q:  # q as a slice of a packed qkv projection: rows of 3 * Hq * D elements
        q = torch.randn(tq, 3, Hq, D, generator=g).to(dtype)[:, 1]
    else:
        q = torch.randn(tq, Hq, D, generator=g).to(dtype)
    k = torch.randn(tk, Hkv, D, generator=g).to(dtype)
    v = torch.randn(tk, Hkv, Dv or D, generator=g).to(dtype)
    return q.to(DEV), k.to(DEV), v.to(DEV)


def _check_against_reference(lens_q, lens_k, Hq, Hkv, D, dtype, causal=False, window=None, softcap=None, scale=None,
                             seed=0, strided_q=False, tol=None):
    q, k, v = _packed(lens_q, lens_k, Hq, Hkv, D, dtype, seed, strided_q=strided_q)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    cq, ck = _cu(lens_q), _cu(lens_k)
    out, lse = tilewright.flash_attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=causal,
                                                 window=window, softcap=softcap, scale=scale, return_lse=True)
    g = torch.Generator().manual_seed(seed + 1)
    grad = torch.randn(out.shape, generator=g).to(dtype).to(DEV)
    glse = torch.randn(lse.shape, generator=g).to(DEV)
    glse = torch.where(torch.isfinite(lse), glse, 0.0)
    torch.autograd.backward((out, lse), (grad, glse))
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ro, rl = varlen_attention_reference(qd, kd, vd, cq, ck, causal, scale, softcap or 0.0, window)
    if ro.requires_grad:
        torch.autograd.backward((ro, torch.where(torch.isfinite(rl), rl, 0.0)), (grad.double(), glse.double()))
    for t in (qd, kd, vd):  # no sequence with both queries and keys: every gradient is 0
        t.grad = torch.zeros_like(t) if t.grad is None else t.grad
    tol = tol or (4e-3 if dtype == torch.float16 else 2e-5)
    assert torch.isfinite(out).all()
    assert (out.double() - ro).abs().max().item() <= tol
    assert torch.equal(torch.isinf(lse), torch.isinf(rl))
    finite = torch.isfinite(rl)
    if finite.any():
        assert (lse.double() - rl)[finite].abs().max().item() <= 1e-3
    for got, want in ((q.grad, qd.grad), (k.grad, kd.grad), (v.grad, vd.grad)):
        assert torch.isfinite(got).all()
        scale_ = max(1.0, want.abs().max().item())
        assert (got.double() - want).abs().max().item() <= 5 * tol * scale_


CASES = [  # (lens_q, lens_k, Hq, Hkv, D, dtype, causal, window)
    ((5, 0, 70, 33), (5, 3, 90, 20), 4, 2, 32, torch.float32, True, None),    # empty, Sq > Skv, Sq < Skv
    ((17, 64, 1), (17, 64, 1), 2, 2, 16, torch.float16, True, None),         # equal lengths, a 1-token sequence
    ((40, 9), (40, 100), 4, 1, 24, torch.float16, False, (5, 3)),           # MQA, two-sided window, D pad
    ((66,), (66,), 2, 2, 32, torch.float32, True, (16, 0)),                  # one sequence, causal window
    ((3, 0, 0), (0, 0, 7), 2, 1, 16, torch.float16, False, None),           # sequences without keys or queries
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}-{c[2]}/{c[3]}-D{c[4]}-causal{c[6]}-w{c[7]}")
def test_forward_lse_and_backward_match_the_reference(case):
    lens_q, lens_k, Hq, Hkv, D, dtype, causal, window = case
    _check_against_reference(lens_q, lens_k, Hq, Hkv, D, dtype, causal, window)


@pytest.mark.parametrize("seed", range(6))
def test_fuzz(seed):
    """Random lengths (0 included), heads, head dims, masks, soft cap, scales (negative too) and dtypes."""
    g = torch.Generator().manual_seed(500 + seed)
    pick = lambda xs: xs[int(torch.randint(len(xs), (1,), generator=g))]  # noqa: E731
    n = pick([1, 2, 4])
    lens_q = [int(torch.randint(0, 50, (1,), generator=g)) for _ in range(n)]
    lens_k = [pick([lq, int(torch.randint(0, 50, (1,), generator=g))]) for lq in lens_q]
    if max(lens_q) == 0:
        lens_q[0] = 3
    Hkv, group, D = pick([1, 2]), pick([1, 2]), pick([8, 16, 40])
    causal = pick([True, False])
    window = pick([None, (4, 0), (None, 0)] + ([] if causal else [(3, 5), (None, 2)]))
    _check_against_reference(lens_q, lens_k, Hkv * group, Hkv, D, pick([torch.float16, torch.float32]), causal,
                             window, softcap=pick([None, None, 3.0]), scale=pick([None, 0.3, -0.2]), seed=seed,
                             strided_q=pick([False, True]))


def test_sequences_do_not_read_each_other():
    """Huge values written into one sequence's rows change no other sequence's output or gradient, bit for bit."""
    lens = (37, 50, 21)
    q, k, v = _packed(lens, lens, 2, 1, 16, torch.float32, seed=3)
    cu = _cu(lens)

    def run(k, v):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        out = tilewright.flash_attention_varlen(qq, kk, vv, cu, cu, 50, 50, causal=True)
        out.backward(torch.ones_like(out))
        return out.detach(), qq.grad, kk.grad, vv.grad

    base = run(k, v)
    k2, v2 = k.clone(), v.clone()
    k2[37:87] = 1e4
    v2[37:87] = -1e4
    other = run(k2, v2)
    others = torch.cat([torch.arange(0, 37), torch.arange(87, 108)])  # the rows of sequences 0 and 2
    for a, b in zip(base, other):  # out, dq, dk, dv
        assert torch.equal(a[others], b[others])


def test_equal_lengths_match_the_dense_op():
    """A varlen batch of equal lengths is the dense batch: same output as flash_attention (bottom-right = top-left
    when Sq == Skv)."""
    B, S, Hq, Hkv, D = 3, 45, 4, 2, 32
    q, k, v = _packed([S] * B, [S] * B, Hq, Hkv, D, torch.float16, seed=4)
    cu = _cu([S] * B)
    got = tilewright.flash_attention_varlen(q, k, v, cu, cu, S, S, causal=True)
    dense = tilewright.flash_attention(*(t.view(B, S, -1, D).transpose(1, 2) for t in (q, k, v)), causal=True)
    assert torch.allclose(got.float(), dense.transpose(1, 2).reshape(B * S, Hq, D).float(), atol=2e-3)


def _args(**over):
    q, k, v = _packed((4, 6), (4, 6), 2, 1, 16, torch.float16)
    args = dict(q=q, k=k, v=v, cu_seqlens_q=_cu((4, 6)), cu_seqlens_k=_cu((4, 6)), max_seqlen_q=6, max_seqlen_k=6)
    args.update(over)
    return args


@pytest.mark.parametrize("over,err,match", [
    (dict(q=torch.zeros(10, 2, 16, dtype=torch.float16).unsqueeze(0)), ValueError, "q"),
    (dict(k=torch.zeros(10, 3, 16, dtype=torch.float16), v=torch.zeros(10, 3, 16, dtype=torch.float16)), ValueError,
     "kv heads"),
    (dict(v=torch.zeros(9, 1, 16, dtype=torch.float16)), ValueError, "v: shape"),
    (dict(k=torch.zeros(10, 1, 8, dtype=torch.float16)), ValueError, "head dim"),
    (dict(cu_seqlens_q=torch.tensor([0, 4, 10])), TypeError, "cu_seqlens_q: dtype"),
    (dict(cu_seqlens_k=[0, 4, 10]), TypeError, "cu_seqlens_k: expected"),
    (dict(cu_seqlens_k=torch.tensor([0, 10], dtype=torch.int32)), ValueError, "cu_seqlens_k: 1 sequences"),
    (dict(cu_seqlens_q=torch.tensor([[0, 4, 10]], dtype=torch.int32)), ValueError, "cu_seqlens_q: expected a 1-D"),
    (dict(max_seqlen_q=6.0), TypeError, "max_seqlen_q"),
    (dict(cu_seqlens_q=torch.tensor([1, 4, 10], dtype=torch.int32)), ValueError, "must start at 0"),
    (dict(cu_seqlens_q=torch.tensor([0, 7, 6], dtype=torch.int32)), ValueError, "nondecreasing"),
    (dict(cu_seqlens_k=torch.tensor([0, 4, 9], dtype=torch.int32)), ValueError, "last offset 9"),
    (dict(max_seqlen_k=5), ValueError, "max_seqlen_k: 5 is shorter"),
])
def test_bad_inputs_raise_naming_the_argument(over, err, match):
    args = _args()
    for name, value in over.items():
        args[name] = value.to(DEV) if isinstance(value, torch.Tensor) else value
    with pytest.raises(err, match=match):
        tilewright.flash_attention_varlen(**args)


def test_window_and_causal_options_are_checked():
    with pytest.raises(ValueError, match="window"):
        tilewright.flash_attention_varlen(**_args(), causal=True, window=(2, 3))
    with pytest.raises(TypeError, match="softcap"):
        tilewright.flash_attention_varlen(**_args(), softcap="x")


def test_the_custom_ops_pass_opcheck_and_compile_without_graph_breaks():
    from tilewright.ops.varlen import varlen_bwd_op, varlen_fwd_op

    lens = (5, 12)
    q, k, v = _packed(lens, lens, 2, 1, 16, torch.float32, seed=7)
    cu = _cu(lens)
    torch.library.opcheck(varlen_fwd_op, (q, k, v, cu, cu, 12, 12, True, 0.25, 0.0, -1, -1))
    out, lse = varlen_fwd_op(q, k, v, cu, cu, 12, 12, True, 0.25, 0.0, -1, -1)
    torch.library.opcheck(varlen_bwd_op, (torch.randn_like(out), None, q, k, v, out, lse, cu, cu, 12, 12, True, 0.25,
                                          0.0, -1, -1))

    def f(q, k, v):
        return tilewright.flash_attention_varlen(q, k, v, cu, cu, 12, 12, causal=True).sum()

    qq = q.clone().requires_grad_()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(qq, k, v)
    got.backward()
    q2 = q.clone().requires_grad_()
    want = f(q2, k, v)
    want.backward()
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(qq.grad, q2.grad, atol=1e-5)


@pytest.mark.parametrize("kernel", ["fwd", "dkdv", "dq"])
def test_varlen_kernels_compile_for_sm90_like_the_dense_ones(kernel):
    """AOT sm_90a builds of the VARLEN kernels at head dim 128 with the default tiles: the same tensor-core
    instructions as the dense build, no spills where the dense build has none, and at most 15% more spill bytes in
    the dK/dV kernel, whose dense class-128 build spills already (its dK and dV accumulators hold 128 registers a
    thread; dense batches take the sm_90a CUDA backward instead). The per-sequence offsets cost a few registers."""
    from test_attention import attention_aot_job

    from tilewright.triton_kernels import attention as A
    from tilewright.triton_kernels.aot import compile_reports

    tiles = {"fwd": A._FWD_TILES, "dkdv": A._DKDV_TILES, "dq": A._DQ_TILES}[kernel][128][0]
    dense, varlen = compile_reports([attention_aot_job(kernel, 128, tiles),
                                     attention_aot_job(kernel, 128, tiles, varlen=True)])
    assert varlen.has("HGMMA") == dense.has("HGMMA") and (varlen.has("HGMMA") or varlen.has("HMMA"))
    assert varlen.spill_bytes <= (0 if dense.spill_bytes == 0 else 1.15 * dense.spill_bytes), \
        (varlen.spill_bytes, dense.spill_bytes)


def test_the_varlen_bench_tiny_suite_runs():
    """`tilewright bench --op varlen` on CPU: the tiny suite under the interpreter, every provider a row per
    direction, the peers chosen as documented."""
    pytest.importorskip("pandas")
    if torch.cuda.is_available():
        pytest.skip("the tiny suite's CPU path")
    from tilewright.bench import varlen

    df = varlen.run("tiny", progress=lambda s: None)
    assert set(df.direction) == {"fwd", "fwd+bwd"}
    assert set(df.provider) == {"tilewright-varlen", "tilewright-dense", "tilewright-dense-triton",
                                "tilewright-dense-mean"}
    assert (df.median_ms > 0).all() and (df.tflops > 0).all()
    eq = df[df.case.str.startswith("equal")]
    assert set(eq.peer) == {"tilewright-dense"}


def test_an_in_place_change_of_checked_offsets_is_checked_again():
    """The offsets' value check runs once per unmodified tensors (ops/_checks.CheckedValues); an in-place write
    makes the next call check again."""
    args = _args()
    tilewright.flash_attention_varlen(**args)
    tilewright.flash_attention_varlen(**args)
    args["cu_seqlens_q"][1] = 11
    with pytest.raises(ValueError, match="nondecreasing"):
        tilewright.flash_attention_varlen(**args)


def test_strided_offsets_give_the_same_result():
    """cu_seqlens as non-contiguous views (every other element of a longer tensor whose odd slots hold wrong
    offsets): forward and gradients equal the contiguous call's, bit for bit."""
    lens_q, lens_k = (7, 30, 12), (20, 30, 3)
    q, k, v = _packed(lens_q, lens_k, 2, 1, 16, torch.float32, seed=9)
    cq, ck = _cu(lens_q), _cu(lens_k)

    def run(cq, ck):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        out = tilewright.flash_attention_varlen(qq, kk, vv, cq, ck, 30, 30, causal=True)
        out.backward(torch.ones_like(out))
        return out.detach(), qq.grad, kk.grad, vv.grad

    stride = lambda cu: torch.stack([cu, cu + 3], 1).flatten()[::2]  # noqa: E731
    assert not stride(cq).is_contiguous()
    for a, b in zip(run(cq, ck), run(stride(cq), stride(ck))):
        assert torch.equal(a, b)
