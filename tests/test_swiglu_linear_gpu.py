"""GPU tier of the gated-linear GEMM (sm_90a ``TW_GLU``) and ``tilewright.swiglu_linear``: the kernel on odd shapes
(tails in M, F and K; a gate tile reading past F into the up rows), both B layouts, every tile it takes, bf16 / fp16,
NaN-poisoned outputs, against float64 within 2x torch's own same-dtype pipeline; the op's routing (fused without
autograd in its region, the pair with autograd) and capture in a CUDA graph after the first call."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilewright

pytestmark = pytest.mark.gpu

sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                          reason="the gated-linear build is sm_90a's")


def _err(got, want):
    return (got.double() - want).abs().max().item()


def _operands(M, F_, K, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    w = (torch.randn(2 * F_, K, device="cuda", generator=g) / K ** 0.5).to(dtype)
    return x, w


def _reference(x, w):
    h = x.double() @ w.double().t()
    F_ = w.shape[0] // 2
    return F.silu(h[:, :F_]) * h[:, F_:]


@pytest.fixture
def glu_launches(monkeypatch):
    """A list that gets one entry for every gated-linear launch the ops ask for (gemm_sm90.try_launch_swiglu), which
    still runs."""
    from tilewright.cuda_fallback import gemm_sm90

    launches = []
    real = gemm_sm90.try_launch_swiglu
    monkeypatch.setattr(gemm_sm90, "try_launch_swiglu", lambda *a: launches.append(1) or real(*a))
    return launches


def _torch_pipeline(x, w):
    gate, up = F.linear(x, w).chunk(2, dim=-1)
    return F.silu(gate) * up


@sm90
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("variant", ["coop128x256s3", "pp128x128s5", "pp64x256s4", "coop256x128s3"])
@pytest.mark.parametrize("M,F_,K", [(1000, 1000, 1000), (136, 72, 200), (8, 64, 72), (777, 5632, 2048)])
@pytest.mark.parametrize("b_mn", [False, True])
def test_kernel_matches_float64_within_twice_torch(dtype, variant, M, F_, K, b_mn):
    from tilewright.cuda_fallback import gemm_sm90

    x, w = _operands(M, F_, K, dtype, seed=M + F_ + K)
    b = w.t().contiguous() if b_mn else w.t()  # (K, 2F): N-major copy, or the weight's K-major view
    out = torch.full((M, F_), float("nan"), device="cuda", dtype=dtype)
    gemm_sm90.launch_cuda_swiglu(x, b, out, variant=variant)
    ref = _reference(x, w)
    own = _torch_pipeline(x, w)
    assert torch.isfinite(out).all()
    assert _err(out, ref) <= 2 * _err(own, ref) + 1e-3, (_err(out, ref), _err(own, ref))


@sm90
def test_kernel_reads_a_strided_x_and_writes_a_strided_out():
    """x a column slice of wider rows (16-byte aligned stride), out a column slice of a wider buffer: both through
    their strides; the buffer's other columns untouched."""
    from tilewright.cuda_fallback import gemm_sm90

    x_full, w = _operands(520, 576, 1024 + 64, torch.bfloat16, seed=5)
    x = x_full[:, 64:]
    w = w[:, :1024].contiguous()
    buf = torch.full((520, 576 + 64), 7.0, device="cuda", dtype=torch.bfloat16)
    out = buf[:, :576]
    gemm_sm90.launch_cuda_swiglu(x, w.t(), out)
    ref = _reference(x, w)
    assert _err(out, ref) <= 2 * _err(_torch_pipeline(x, w), ref) + 1e-3
    assert (buf[:, 576:] == 7.0).all()


@sm90
def test_op_takes_the_fused_kernel_without_grad_and_the_pair_with_grad(monkeypatch, glu_launches):
    from tilewright.ops.swiglu_linear import fused_applies

    launches = glu_launches
    x, w = _operands(4096, 5632, 2048, torch.bfloat16, seed=11)
    assert fused_applies(x, w)[0], fused_applies(x, w)[1]
    with torch.no_grad():
        y = tilewright.swiglu_linear(x.view(2, 2048, 2048), w)
    assert launches and y.shape == (2, 2048, 5632)
    ref = _reference(x, w)
    assert _err(y.reshape(4096, 5632), ref) <= 2 * _err(_torch_pipeline(x, w), ref) + 1e-3
    # with autograd: the pair (linear, then swiglu), and its gradients
    launches.clear()
    xs = x[:512].clone().requires_grad_()
    ws = w.clone().requires_grad_()
    y2 = tilewright.swiglu_linear(xs, ws)
    y2.float().square().sum().backward()
    assert not launches
    xt, wt = x[:512].clone().requires_grad_(), w.clone().requires_grad_()
    _torch_pipeline(xt, wt).float().square().sum().backward()
    xd, wd = x[:512].double().requires_grad_(), w.double().requires_grad_()
    _reference(xd, wd).square().sum().backward()
    assert _err(xs.grad, xd.grad) <= 2 * _err(xt.grad, xd.grad) + 1e-3
    assert _err(ws.grad, wd.grad) <= 2 * _err(wt.grad, wd.grad) + 1e-3
    # and with the fused path switched off, the no-grad call is the pair: same shape, within torch's error
    monkeypatch.setenv("TILEWRIGHT_SWIGLU_FUSED", "0")
    launches.clear()
    with torch.no_grad():
        y3 = tilewright.swiglu_linear(x, w)
    assert not launches and _err(y3, ref) <= 2 * _err(_torch_pipeline(x, w), ref) + 1e-3


@sm90
def test_op_captures_in_a_cuda_graph_after_its_first_call():
    x, w = _operands(4096, 5632, 2048, torch.bfloat16, seed=13)
    with torch.no_grad():
        tilewright.swiglu_linear(x, w)  # first call: self-check, build, prepared launch
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = tilewright.swiglu_linear(x, w)
        x.normal_()
        graph.replay()
        torch.cuda.synchronize()
    ref = _reference(x, w)
    assert _err(y, ref) <= 2 * _err(_torch_pipeline(x, w), ref) + 1e-3


@sm90
def test_rms_norm_linear_swiglu_takes_the_norm_pass_and_the_fused_gemm(glu_launches):
    launches = glu_launches
    x, w = _operands(4096, 5632, 2048, torch.bfloat16, seed=17)
    x = x * 3
    g = (1 + 0.1 * torch.randn(2048, device="cuda")).to(torch.bfloat16)
    with torch.no_grad():
        y = tilewright.rms_norm_linear(x.view(2, 2048, 2048), g, w, eps=1e-6, activation="swiglu")
    assert launches and y.shape == (2, 2048, 5632)
    u64 = F.rms_norm(x.double(), (2048,), g.double(), 1e-6)
    ref = _reference(u64, w)
    own = _torch_pipeline(F.rms_norm(x, (2048,), g, 1e-6), w)
    assert _err(y.reshape(4096, 5632), ref) <= 2 * _err(own, ref) + 1e-3
