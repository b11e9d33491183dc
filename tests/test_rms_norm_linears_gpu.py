"""GPU tier: ``tilewright.rms_norm_linears`` in bf16 at a Llama-like q / k / v shape with odd row counts - outputs and
every gradient against float64, each no worse than 2x torch's unfused bf16 pipeline; the inference route equal to
per-weight ``rms_norm_linear`` bit for bit."""
import math

import pytest
import torch

import tilewright
from test_rms_norm_linears import EPS, check_against_fp64

pytestmark = pytest.mark.gpu

# K 2048 (a 1B-class Llama's width), q 1536 / k 512 / v 512 (GQA); rows not a multiple of any GEMM tile
SHAPES = [((1000,), 2048, (1536, 512, 512)), ((3, 333), 2048, (1536, 512, 512)), ((997,), 2048, (5632, 5632))]


def _inputs(lead, K, ns, g_kind, bias_mask, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(*lead, K, device="cuda", generator=gen).bfloat16()
    g = torch.ones(K, device="cuda") if g_kind == "ones" else 1 + 0.3 * torch.randn(K, device="cuda", generator=gen)
    ws = [(torch.randn(n, K, device="cuda", generator=gen) / math.sqrt(K)).bfloat16() for n in ns]
    bs = [torch.randn(n, device="cuda", generator=gen).bfloat16() if has else None for n, has in zip(ns, bias_mask)]
    dys = [torch.randn(*lead, n, device="cuda", generator=gen).bfloat16() for n in ns]
    return x, g.bfloat16(), ws, bs, dys


@pytest.mark.parametrize("g_kind", ["ones", "randn"])
@pytest.mark.parametrize("lead,K,ns", SHAPES, ids=["qkv-m1000", "qkv-3x333", "gateup-m997"])
def test_bf16_outputs_and_gradients_vs_fp64_within_2x_torch(lead, K, ns, g_kind):
    """The training route (one F.rms_norm, tilewright.linear per weight) with a bias on the first projection only:
    every output and the gradients of x, norm_weight, each weight and the bias against float64, Frobenius error at
    most 2x that of torch's unfused bf16 pipeline (no floor)."""
    x, g, ws, bs, dys = _inputs(lead, K, ns, g_kind, (True,) + (False,) * (len(ns) - 1))
    check_against_fp64(x, g, ws, bs, dys, floor=0.0)


@pytest.mark.parametrize("lead,K,ns", SHAPES[:1], ids=["qkv-m1000"])
def test_bf16_inference_route_is_per_weight_rms_norm_linear_bit_for_bit(lead, K, ns):
    x, g, ws, bs, _ = _inputs(lead, K, ns, "randn", (True, False, True))
    with torch.no_grad():
        want = [tilewright.rms_norm_linear(x, g, w, b, eps=EPS) for w, b in zip(ws, bs)]
        got = tilewright.rms_norm_linears(x, g, ws, bs, eps=EPS)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
