"""GPU tier of the sm_90 GEMM that returns its output rows' sums of squares (cuda_fallback/gemm_sumsq_sm90.py) and of
``tilewright.linear(..., return_sumsq=True)`` where it runs: the output bit-equal to the plain sm_90 GEMM's (the same
epilogue), the summed partials within 1e-5 of the stored output's own sums, on shapes with M / N / K tails, every
epilogue, residual by TMA and by element loads, bf16 and fp16; the partials written for every (tile column, row)
(buffers pre-filled with NaN); through the op, sums and gradients."""
from __future__ import annotations

import math

import pytest
import torch
from _cuda_gpu import cuda_family

import tilewright

pytestmark = pytest.mark.gpu


@pytest.fixture
def gs():
    return cuda_family("gemm_sumsq_sm90", (9,))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,N,K,act,bias,res", [(296, 264, 200, "gelu", True, "full"), (8, 64, 72, None, False, None),
                                                (1000, 3000, 1536, "silu", True, "strided"),
                                                (4096, 4096, 2048, None, False, "full"),
                                                (520, 1032, 4096, None, True, "pos_embed")])
@pytest.mark.parametrize("variant", [None, "pp128x128s5", "coop128x192s4"])
def test_kernel_output_is_the_plain_gemms_and_the_sums_its_own(gs, M, N, K, act, bias, res, dtype, variant):
    from tilewright.cuda_fallback import gemm_sm90

    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    w = (torch.randn(N, K, device="cuda", generator=g) / math.sqrt(K)).to(dtype)
    b = torch.randn(N, device="cuda", generator=g).to(dtype) if bias else None
    if res == "full":
        r3 = torch.randn(1, M, N, device="cuda", generator=g).to(dtype)
    elif res == "strided":  # rows 2N apart: element loads, not the TMA map
        r3 = torch.randn(M, 2 * N, device="cuda", generator=g).to(dtype)[:, :N].reshape(1, M, N)
    elif res == "pos_embed":  # one (P, N) block repeated over the batch (stride 0)
        r3 = torch.randn(1, 8, N, device="cuda", generator=g).to(dtype).expand(M // 8, 8, N)
    else:
        r3 = None
    v = gs.VARIANTS[variant] if variant else gs.pick_variant(M, N, K)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    parts = torch.full((-(-N // v.bn), M), float("nan"), device="cuda")
    gs.launch_cuda_gemm_sumsq(a, w.t(), out, parts, bias=b, residual=r3, activation=act or 0, variant=v)
    plain = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    gemm_sm90.launch_cuda_gemm(a, w.t(), plain, bias=b, residual=r3, activation=act or 0,
                               variant=variant or gemm_sm90.pick_variant(M, N, K).name)
    assert torch.equal(out, plain)
    assert torch.isfinite(parts).all()
    want = out.double().square().sum(1)
    assert ((parts.double().sum(0) - want).abs() / want.clamp_min(1e-30)).max().item() < 1e-5


def test_parts_must_fit_the_variant(gs):
    a, w = torch.randn(256, 512, device="cuda").bfloat16(), torch.randn(512, 512, device="cuda").bfloat16()
    out = torch.empty(256, 512, device="cuda").bfloat16()
    with pytest.raises(ValueError, match="parts"):
        gs.launch_cuda_gemm_sumsq(a, w.t(), out, torch.empty(1, 256, device="cuda"), variant="coop128x256s3")


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_linear_returns_the_epilogue_sums_where_the_cuda_gemm_runs(gs, grad, monkeypatch):
    """4096 x 4096 x 4096 with a residual (the plain call runs the sm_90 GEMM): the sums-of-squares build launches
    (spied), y is the plain call's, the sums y's own; under autograd the gradients are the plain call's."""
    import tilewright.ops.gemm as gm

    launches = []
    real = gs.try_launch
    monkeypatch.setattr(gs, "try_launch", lambda *a, **k: launches.append(1) or real(*a, **k))
    monkeypatch.setattr(gm, "row_sumsq", lambda y: pytest.fail("the pass ran where the epilogue's sums serve"))
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(2, 2048, 4096, device="cuda", generator=gen).bfloat16().requires_grad_(grad)
    w = (torch.randn(4096, 4096, device="cuda", generator=gen) / 64).bfloat16().requires_grad_(grad)
    h = torch.randn(2, 2048, 4096, device="cuda", generator=gen).bfloat16().requires_grad_(grad)
    y, ss = tilewright.linear(x, w, residual=h, return_sumsq=True)
    assert launches == [1] and ss.shape == (2, 2048) and not ss.requires_grad
    assert torch.allclose(ss.double(), y.double().square().sum(-1), rtol=1e-5, atol=0)
    xr, wr, hr = (t.detach().clone().requires_grad_(grad) for t in (x, w, h))
    y_plain = tilewright.linear(xr, wr, residual=hr)
    assert torch.equal(y, y_plain)
    if grad:
        dy = torch.randn_like(y)
        y.backward(dy)
        y_plain.backward(dy)
        for a, b in ((x, xr), (w, wr), (h, hr)):
            assert torch.equal(a.grad, b.grad)
