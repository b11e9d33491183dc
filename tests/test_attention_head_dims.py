"""Flash attention at every head dim that is a multiple of 8 from 8 to 256 (issue 15, item 2, Triton part).

CPU tier: the Triton kernels under TRITON_INTERPRET=1 against an fp64 reference with the numerics rule of
tests/test_attention.py (its helpers), at head dims that are not among the original (32, 64, 96, 128, 192, 256):
8 and 16 (the 16-column minimum tile), 24 (-> 32), 40 (-> 64), 72 / 80 / 112 (-> 128), 160 / 224 (-> 256). Shapes
are small with ragged tails (Sq, Skv not block multiples), causal and not, GQA/MQA, fp16 and fp32; the TMA
descriptor path (emulated by the interpreter) with zero-filled columns; the op-level validation; the CUDA record
declining the new dims; and an AOT sm_90a build of the forward and dK/dV kernels at new head dims (wgmma, TMA,
register spills no worse than the original head dims of the same tile class).
"""
import pytest
import torch

import tilewright
from test_attention import TOL, _fwd_bwd_check, _inputs, attention_aot_job, tma_path_check
from tilewright.ops import attention as op_attention
from tilewright.reference import attention_grad_reference, attention_reference

pytestmark = pytest.mark.interpreter


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Skv,D,causal,dtype", [
    (1, 2, 1, 37, 45, 8, True, torch.float32),      # 8 -> 16-wide tile, GQA, causal, Sq < Skv
    (1, 2, 2, 33, 19, 8, False, torch.float16),
    (1, 2, 2, 33, 19, 16, False, torch.float16),    # 16: the minimum tile, unpadded
    (1, 3, 1, 17, 70, 24, True, torch.float16),     # 24 -> 32, MQA
    (1, 2, 1, 70, 33, 40, False, torch.float32),    # 40 -> 64, Sq > Skv
    (1, 2, 1, 45, 45, 40, True, torch.float16),
    (1, 2, 2, 45, 45, 72, True, torch.float16),     # 72 -> 128
    (1, 2, 1, 50, 31, 80, True, torch.float32),     # 80 -> 128, GQA, causal, Sq > Skv
    (1, 1, 1, 33, 65, 112, False, torch.float16),   # 112 -> 128
    (1, 2, 1, 40, 40, 160, True, torch.float16),    # 160 -> 256, GQA
    (1, 1, 1, 23, 38, 160, False, torch.float32),
    (1, 1, 1, 29, 50, 224, False, torch.float32),   # 224 -> 256
])
def test_new_head_dims_forward_backward_vs_fp64(B, Hq, Hkv, Sq, Skv, D, causal, dtype):
    _fwd_bwd_check(B, Hq, Hkv, Sq, Skv, D, causal, dtype)


@pytest.mark.parametrize("D", [8, 40, 160])
def test_new_head_dims_tma_descriptor_path(D):
    """The TMA descriptor path at the new tile widths (16, 64, 256 columns over 8, 40, 160)."""
    tma_path_check(D, 0.2)

def test_padded_columns_do_not_leak_from_neighbouring_memory():
    """D = 40 rows inside a wider buffer (row stride 64) whose columns 40..63 hold 1e30: the kernels' 64-wide tile must
    mask those columns (a leaked one overflows to inf / NaN); output, LSE and gradients match the reference."""
    B, H, S, D, W = 1, 2, 33, 40, 64
    bufs = [torch.randn(B, H, S, W) for _ in range(3)]
    for b in bufs:
        b[..., D:] = 1e30
    q, k, v = (b[..., :D].requires_grad_() for b in bufs)
    assert q.stride(2) == W
    out, lse = tilewright.flash_attention(q, k, v, causal=True, return_lse=True, backend="triton")
    dout = torch.randn_like(out)
    out.backward(dout)
    q64, k64, v64 = (t.detach().double() for t in (q, k, v))
    ref, ref_lse = attention_reference(q64, k64, v64, True)
    assert torch.isfinite(out).all() and (out.double() - ref).abs().max().item() < TOL[torch.float32]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-4
    g64 = attention_grad_reference(dout.double(), q64, k64, v64, True)
    for t, want in zip((q, k, v), g64):
        assert (t.grad.double() - want).abs().max().item() < 1e-4


@pytest.mark.parametrize("D, why", [(36, "not a multiple of 8"), (12, "not a multiple of 8"), (4, "smaller than 8"),
                                    (264, "larger than 256"), (257, "larger than 256")])
def test_unsupported_head_dims_raise_naming_the_argument(D, why):
    q, k, v = _inputs(1, 2, 2, 8, 8, D, torch.float32, requires_grad=False)
    with pytest.raises(ValueError, match=rf"^q: head dim {D} is not supported: it is {why}.*multiples of 8 from 8 "
                                         r"to 256"):
        tilewright.flash_attention(q, k, v)
    with pytest.raises(ValueError, match=rf"^query: head dim {D} is not supported"):
        tilewright.scaled_dot_product_attention(q, k, v)
    # k's head dim is checked against q's first
    q40 = torch.randn(1, 2, 8, 40)
    with pytest.raises(ValueError, match=rf"^k: head dim {D} differs from q's head dim 40"):
        tilewright.flash_attention(q40, k, v)


def test_head_dim_constants_and_pads():
    from tilewright.triton_kernels import attention as A

    every = tuple(range(8, 257, 8))
    assert op_attention.SUPPORTED_HEAD_DIMS == A.SUPPORTED_HEAD_DIMS == every
    for d in range(0, 300):
        assert op_attention.supported_head_dim(d) == A.supported_head_dim(d) == (d in every), d
    # the original head dims keep their tiles (and so their configs)
    assert {d: A.head_dim_pad(d) for d in (32, 64, 96, 128, 192, 256)} == \
        {32: 32, 64: 64, 96: 128, 128: 128, 192: 256, 256: 256}
    assert {d: A.head_dim_pad(d) for d in (8, 16, 24, 40, 56, 72, 120, 136, 248)} == \
        {8: 16, 16: 16, 24: 32, 40: 64, 56: 64, 72: 128, 120: 128, 136: 256, 248: 256}
    for d in (0, 4, 36, 264):
        with pytest.raises(ValueError, match=f"head dim {d}"):
            A.head_dim_pad(d)
    # every padded width has configs in every table, and no tile is narrower than tl.dot's K >= 16
    pads = {A.head_dim_pad(d) for d in every}
    assert pads == {16, 32, 64, 128, 256}
    for table in (A._FWD_TILES, A._FWD_TILES_PTR, A._DKDV_TILES, A._DKDV_TILES_PTR, A._DQ_TILES, A._DQ_TILES_PTR):
        for p in pads:
            assert A._tile_class(p) >= p and table[A._tile_class(p)]


def test_pruner_gives_new_head_dims_their_tile_class_default():
    """The autotune pruner (no full sweep) keeps, for a new head dim, the same config as for the original head dim of
    its tile class - for TMA and pointer tables, forward and both backward passes; fp32 keeps its small tiles."""
    from tilewright.triton_kernels import attention as A

    tables = ((A._FWD_TILES, A._FWD_TILES_PTR, A._FWD_NAMES), (A._DKDV_TILES, A._DKDV_TILES_PTR, A._DKDV_NAMES),
              (A._DQ_TILES, A._DQ_TILES_PTR, A._DQ_NAMES))

    def key(c):
        return tuple(sorted(c.kwargs.items())), c.num_warps, c.num_stages

    for tma_t, ptr_t, names in tables:
        configs = A._configs((tma_t, ptr_t), names)
        prune = A._pruner(tma_t, ptr_t, names)

        def kept(d, use_tma, precision="tf32"):
            return [key(c) for c in prune(configs, {}, DOT_PRECISION=precision, USE_TMA=use_tma,
                                          HEAD_DIM_PAD=A.head_dim_pad(d))]

        for new, old in ((8, 64), (16, 32), (24, 32), (40, 64), (72, 96), (80, 128), (112, 128), (160, 192),
                         (224, 256)):
            for use_tma, table in ((True, tma_t), (False, ptr_t)):
                got = kept(new, use_tma)
                assert got == kept(old, use_tma) and len(got) >= 1, (new, names)
                bm, bn = dict(got[0][0])[names[0]], dict(got[0][0])[names[1]]
                assert (bm, bn, got[0][1], got[0][2]) in table[A._tile_class(A.head_dim_pad(new))]
            assert kept(new, True, "ieee") == kept(old, True, "ieee")


@pytest.mark.parametrize("D,cuda", [(8, False), (40, False), (80, True), (160, True), (224, True)])
def test_cuda_attention_head_dims_and_router(D, cuda):
    """The hand-written sm_90a forward has builds for 64 / 128 / 256 and runs a multiple of 8 above 64 on the next
    one up (attention_sm90.build_head_dim: TMA zero-fills the padding); below 64 its constraints refuse with a reason,
    so the router sends those to Triton."""
    from tilewright.cuda_fallback import attention_sm90 as ca

    assert ca.HEAD_DIMS == (64, 128, 256)
    q, k, v = (torch.randn(1, 2, 64, D, dtype=torch.bfloat16) for _ in range(3))
    ok, why = ca.constraints(q, k, v)
    assert ok == cuda and (cuda or (f"head dim {D}" in why and "multiple of 8 from 72 to 256" in why)), why
    qf, kf, vf = (t.float() for t in (q, k, v))
    assert "triton" in tilewright.explain("attention", qf, kf, vf).splitlines()[0]


def test_new_head_dims_build_for_sm90_with_wgmma_and_tma():
    """AOT sm_90a builds (no GPU) of the forward and dK/dV kernels at head dims 8 (16-wide tile), 40 (64) and 160
    (256), each at its tile class's default config, beside the original head dim of the same class (64, 192) at the
    same config: wgmma (HGMMA) and TMA loads (UTMALDG) in the SASS, and register spills no worse than the original
    head dim's. The original defaults already spill in the dK/dV kernel at the 256 class (192 and 256: 1088 bytes
    causal, 860 not, with Triton 3.6), so a new head dim there is held to "no worse", not to 0; the forward and the
    64 class spill nothing."""
    from tilewright.triton_kernels import attention as A
    from tilewright.triton_kernels.aot import compile_reports

    pairs = [(8, 64), (40, 64), (160, 192)]  # (new head dim, original head dim of the same tile class)
    jobs, keys = [], []
    for kernel, table in (("fwd", A._FWD_TILES), ("dkdv", A._DKDV_TILES)):
        for new, old in pairs:
            tiles = table[A._tile_class(A.head_dim_pad(new))][0]
            for d in (new, old):
                if (kernel, d) not in keys:
                    keys.append((kernel, d))
                    jobs.append(attention_aot_job(kernel, d, tiles))
    reps = dict(zip(keys, compile_reports(jobs)))
    lines = [f"{r.name}: {r.registers} regs, {r.spill_bytes} B spilled, {r.shared_bytes} B smem" for r in reps.values()]
    print("\n".join(lines))
    for (kernel, d), rep in reps.items():
        assert rep.has("HGMMA") and rep.has("UTMALDG"), rep.name
    for kernel in ("fwd", "dkdv"):
        for new, old in pairs:
            assert reps[kernel, new].spill_bytes <= reps[kernel, old].spill_bytes, lines
            if kernel == "fwd" or A._tile_class(A.head_dim_pad(new)) == 64:
                assert reps[kernel, new].spill_bytes == 0, lines
