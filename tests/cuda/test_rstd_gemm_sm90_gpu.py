"""GPU tier of the folded RMSNorm-linear (cuda_fallback/rstd_gemm_sm90.py and ops/rms_norm_linear._folded): the
kernel against its fp32 contract on shapes with M / N / K tails and every epilogue, bf16 and fp16, rstd within 1e-5;
the op on a shape where the folded path runs: error vs fp64 within 2x torch's unfused pipeline's, rstd, gradients,
an in-place weight update (the folded copy is refreshed), a CUDA graph; the row sum-of-squares pass."""
from __future__ import annotations

import importlib
import math

import pytest
import torch
from _cuda_gpu import cuda_family

import tilewright
from tilewright.reference import rms_norm_linear_reference

pytestmark = pytest.mark.gpu
EPS = 1e-6
rms = importlib.import_module("tilewright.ops.rms_norm_linear")


@pytest.fixture
def rg():
    return cuda_family("rstd_gemm_sm90", (9,))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,N,K,act,use_res", [(296, 264, 200, "gelu", True), (8, 64, 72, None, False),
                                               (1000, 3000, 1536, "silu", False), (4096, 4096, 2048, None, True)])
@pytest.mark.parametrize("variant", [None, "coop128x192s4"])
def test_kernel_matches_its_contract(rg, M, N, K, act, use_res, dtype, variant):
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    x = (3 * torch.randn(M, K, device="cuda", generator=g)).to(dtype)
    w = (torch.randn(N, K, device="cuda", generator=g) / math.sqrt(K)).to(dtype)
    sumsq = x.float().pow(2).sum(1)
    bias = torch.randn(N, device="cuda", generator=g).to(dtype)
    res = torch.randn(M, N, device="cuda", generator=g).to(dtype) if use_res else None
    out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    rstd = torch.full((M,), float("nan"), device="cuda")
    rg.launch_cuda_rstd_gemm(x, w.t(), out, sumsq, rstd, EPS, bias=bias,
                             residual=None if res is None else res.reshape(1, M, N), activation=act or 0,
                             variant=variant)
    ref, ref_rstd = rg.reference(x, w, sumsq, bias, EPS, act, res)
    assert torch.isfinite(out).all()
    rel = ((out.float() - ref).norm() / ref.norm()).item()
    assert rel < 2 ** -8, rel  # one output rounding plus fp32 accumulation order
    assert ((rstd - ref_rstd).abs() / ref_rstd).max().item() < 1e-5


def _inputs(M, N, K, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=gen).bfloat16()
    g = (1 + 0.5 * torch.randn(K, device="cuda", generator=gen)).bfloat16()
    w = (torch.randn(N, K, device="cuda", generator=gen) / math.sqrt(K)).bfloat16()
    b = (0.1 * torch.randn(N, device="cuda", generator=gen)).bfloat16()
    return x, g, w, b


def _assert_within_twice_torchs_error(y, x, g, w, b, rstd=None):
    """y's error vs float64 within 2x torch's unfused pipeline's (max and norm); rstd, if given, within 1e-6."""
    y64 = rms_norm_linear_reference(x.double(), g.double(), w.double(), b.double(), EPS)
    e, e_t = (y.double() - y64), (rms_norm_linear_reference(x, g, w, b, EPS).double() - y64)
    assert e.abs().max() <= 2 * e_t.abs().max() and e.norm() <= 2 * e_t.norm(), (e.abs().max(), e_t.abs().max())
    if rstd is not None:
        r64 = torch.rsqrt(x.double().pow(2).mean(-1) + EPS)
        assert ((rstd.double() - r64).abs() / r64).max() < 1e-6


SHAPE = (4096, 4096, 2048)  # 2^36 FLOPs: the plain sm_90 GEMM's measured region, where the op folds


@pytest.mark.parametrize("path", ["in-kernel sums", "pre-pass"])
def test_op_runs_folded_within_twice_torchs_error(rg, monkeypatch, path):
    """The op's folded forward through its first choice (the -roov build: sums of squares in-kernel) and, with that
    build declined, through the read-only pass and the rstd GEMM."""
    from tilewright.cuda_fallback import rmsnorm_gemm_sm90 as rn

    calls = []
    if path == "pre-pass":
        monkeypatch.setattr(rn, "folded_ready", lambda *a: (False, "declined by the test"))
        real = rg.try_launch
        monkeypatch.setattr(rg, "try_launch", lambda *a, **k: calls.append(1) or real(*a, **k))
    else:
        real = rn.try_launch_folded
        monkeypatch.setattr(rn, "try_launch_folded", lambda *a, **k: calls.append(1) or real(*a, **k))
    M, N, K = SHAPE
    x, g, w, b = _inputs(M, N, K)
    assert rms.folded_applies(x, N)
    y, rstd = torch.ops.tilewright.rms_norm_linear(x, g, w, b, EPS, None)
    assert calls, f"the folded kernel ({path}) did not run"
    _assert_within_twice_torchs_error(y, x, g, w, b, rstd)


def test_op_folds_on_the_wave_tile_within_twice_torchs_error(rg, monkeypatch):
    """Issue 17's 3000 x 5120 x 5120 (M not a multiple of 64: outside the plain GEMM's region) folds where the
    192-column tile balances the waves (ops/rms_norm_linear.wave_tile_folds), through the in-kernel sums' 192-column
    build (rmsnorm_gemm_sm90.folded_variant) - and with the sums given, through the rstd GEMM's 192-column build."""
    from tilewright.cuda_fallback import rmsnorm_gemm_sm90 as rn

    monkeypatch.delenv("TILEWRIGHT_CUDA_GEMM_VARIANT", raising=False)
    M, N, K = 3000, 5120, 5120
    assert rn.folded_variant(M, N, K) == rn.FOLDED_WAVE_VARIANT
    launched = []
    real = rn.launch_cuda_rmsnorm_gemm
    monkeypatch.setattr(rn, "launch_cuda_rmsnorm_gemm", lambda *a, **k: launched.append(k["variant"]) or real(*a, **k))
    x, g, w, b = _inputs(M, N, K)
    assert rms.folded_applies(x, N)
    y, rstd = torch.ops.tilewright.rms_norm_linear(x, g, w, b, EPS, None)
    assert rn.FOLDED_WAVE_VARIANT in launched
    _assert_within_twice_torchs_error(y, x, g, w, b, rstd)
    picked = []
    real_pick = rg.pick_variant
    monkeypatch.setattr(rg, "pick_variant", lambda *a: picked.append(real_pick(*a)) or picked[-1])
    y2 = tilewright.rms_norm_linear(x, g, w, b, eps=EPS, sumsq=x.float().pow(2).sum(1))
    assert picked and picked[-1].bn == 192
    _assert_within_twice_torchs_error(y2, x, g, w, b)


def test_in_place_weight_updates_refresh_the_folded_copy():
    M, N, K = SHAPE
    x, g, w, b = _inputs(M, N, K, seed=1)
    tilewright.rms_norm_linear(x, g, w, b, eps=EPS)
    for update in (lambda: w.mul_(-0.5), lambda: g.add_(1), lambda: w.copy_(torch.randn_like(w) / 64)):
        update()
        y = tilewright.rms_norm_linear(x, g, w, b, eps=EPS)
        ref = rms_norm_linear_reference(x.float(), g.float(), w.float(), b.float(), EPS)
        assert ((y.float() - ref).norm() / ref.norm()).item() < 2 ** -7


def test_the_inference_op_replays_the_fold_and_sees_weight_updates(rg, monkeypatch):
    """What a compiled inference graph calls (tilewright::rms_norm_linear_inference): its second call at a folded
    signature replays on the kept copy (the full path does not run) with the first call's bits; after in-place
    updates of the weight and of the norm weight the next calls refold and stay within the reference's error."""
    M, N, K = SHAPE
    x, g, w, b = _inputs(M, N, K, seed=2)
    full = []
    real = rms._rms_norm_linear_full
    monkeypatch.setattr(rms, "_rms_norm_linear_full", lambda *a: full.append(1) or real(*a))
    op = torch.ops.tilewright.rms_norm_linear_inference
    y1 = op(x, g, w, b, EPS, None)[0].clone()
    y2 = op(x, g, w, b, EPS, None)[0]
    assert len(full) == 1 and torch.equal(y1, y2)
    for update in (lambda: w.mul_(-0.5), lambda: g.add_(1)):
        update()
        for _ in range(2):
            y = op(x, g, w, b, EPS, None)[0]
            ref = rms_norm_linear_reference(x.float(), g.float(), w.float(), b.float(), EPS)
            assert ((y.float() - ref).norm() / ref.norm()).item() < 2 ** -7
    assert len(full) == 3  # one refold per update, then replays


def test_a_folded_call_replays_on_the_kept_copy(monkeypatch):
    """A second folded call at a signature replays (ops/rms_norm_linear._FoldedReplay: the full path does not run)
    with the same bits; an in-place weight update makes the replay stand aside - the full path refolds - and the
    call after that replays the new copy."""
    M, N, K = SHAPE
    x, g, w, b = _inputs(M, N, K, seed=4)
    with torch.no_grad():
        y1 = tilewright.rms_norm_linear(x, g, w, b, eps=EPS)
        assert any(type(r) is rms._FoldedReplay for r in rms._replays.values())
        full = rms._rms_norm_linear_full
        calls = []
        monkeypatch.setattr(rms, "_rms_norm_linear_full", lambda *a: calls.append(1) or full(*a))
        y2 = tilewright.rms_norm_linear(x, g, w, b, eps=EPS)
        assert not calls and torch.equal(y1, y2)
        w.mul_(-0.5)
        y3 = tilewright.rms_norm_linear(x, g, w, b, eps=EPS)
        assert calls == [1]
        y4 = tilewright.rms_norm_linear(x, g, w, b, eps=EPS)
        assert calls == [1] and torch.equal(y3, y4)
    ref = rms_norm_linear_reference(x.float(), g.float(), w.float(), b.float(), EPS)
    assert ((y4.float() - ref).norm() / ref.norm()).item() < 2 ** -7


def test_gradients_within_torchs_error():
    """At the folded shape with autograd recording: the call runs the two passes (training keeps them), and the
    gradients stay within torch's error - the folded path must not leak into a recorded call."""
    from test_rms_norm_linear import gradient_errors

    M, N, K = SHAPE
    x, g, w, b = _inputs(M, N, K, seed=2)
    dy = torch.randn(M, N, device="cuda").bfloat16()
    for name, e_ours, e_torch, _ in gradient_errors(x, g, w, b, dy, EPS):
        assert e_ours <= 1.5 * e_torch, (name, e_ours, e_torch)


def test_a_captured_graph_reads_the_weight_not_a_folded_copy():
    """Capture runs the two passes (the folded path is for eager calls): a graph captured after an eager (folded)
    call sees an in-place weight update made before its replay - a folded copy baked into the graph would not."""
    M, N, K = SHAPE
    x, g, w, b = _inputs(M, N, K, seed=3)
    y = tilewright.rms_norm_linear(x, g, w, b, eps=EPS)  # eager: folded, a copy kept on w
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y2 = tilewright.rms_norm_linear(x, g, w, b, eps=EPS)
    graph.replay()
    torch.cuda.synchronize()
    ref = rms_norm_linear_reference(x.float(), g.float(), w.float(), b.float(), EPS)
    assert ((y2.float() - ref).norm() / ref.norm()).item() < 2 ** -7
    assert ((y.float() - ref).norm() / ref.norm()).item() < 2 ** -7
    w.mul_(-0.5)
    graph.replay()
    torch.cuda.synchronize()
    ref = rms_norm_linear_reference(x.float(), g.float(), w.float(), b.float(), EPS)
    assert ((y2.float() - ref).norm() / ref.norm()).item() < 2 ** -7


@pytest.mark.parametrize("M,K", [(1, 8), (4099, 5000), (8192, 4096)])
def test_row_sumsq_on_the_gpu(M, K):
    from tilewright.triton_kernels.rmsnorm_gemm import launch_row_sumsq

    x = (4 * torch.randn(M, K + 8, device="cuda")).bfloat16()[:, :K]
    got = launch_row_sumsq(x)
    want = x.double().pow(2).sum(1)
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=0)


@pytest.mark.parametrize("variant", ["coop128x256s3-xf-ro", "pp128x128s5-xf-ro", "coop128x256s3-xf-roov",
                                     "pp128x128s5-xf-roov", "coop128x192s4-xf-roov"])
@pytest.mark.parametrize("M,N,K,act,use_res", [(296, 264, 200, "gelu", True), (1000, 3000, 1536, None, False),
                                               (4096, 4096, 2048, "silu", True)])
def test_in_kernel_sum_of_squares_build_matches_the_folded_contract(M, N, K, act, use_res, variant):
    """The RMSNorm-GEMM's read-only transform builds (TW_NORM_XFORM_RO 1 and 2, "-ro" / "-roov"): B = the folded
    weight, rstd from the row sums its transform warps take from shared memory - the same contract as the rstd
    GEMM's. The many-tile shape runs each CTA's ring around many times (a reader lapped by the refill, or a stage
    refilled under the readers, shows as wrong rows there)."""
    rn = cuda_family("rmsnorm_gemm_sm90", (9,))
    rgm = cuda_family("rstd_gemm_sm90", (9,))
    gen = torch.Generator(device="cuda").manual_seed(M * 7 + K)
    x = (3 * torch.randn(M, K, device="cuda", generator=gen)).bfloat16()
    wg = (torch.randn(N, K, device="cuda", generator=gen) / math.sqrt(K)).bfloat16()
    bias = torch.randn(N, device="cuda", generator=gen).bfloat16()
    res = torch.randn(M, N, device="cuda", generator=gen).bfloat16() if use_res else None
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    rstd = torch.full((M,), float("nan"), device="cuda")
    ones = torch.ones(K, device="cuda", dtype=torch.bfloat16)
    rn.launch_cuda_rmsnorm_gemm(x, ones, wg.t(), out, rstd, EPS, bias=bias,
                                residual=None if res is None else res.reshape(1, M, N), activation=act or 0,
                                variant=variant)
    ref, ref_rstd = rgm.reference(x, wg, x.float().pow(2).sum(1), bias, EPS, act, res)
    assert torch.isfinite(out).all()
    assert ((out.float() - ref).norm() / ref.norm()).item() < 2 ** -8
    assert ((rstd - ref_rstd).abs() / ref_rstd).max().item() < 1e-5
