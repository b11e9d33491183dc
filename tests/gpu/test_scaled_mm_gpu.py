"""GPU tier: tilewright.scaled_mm (FP8) against a float64 reference and beside torch._scaled_mm (cuBLASLt)."""
import pytest
import torch

import tilewright
from tilewright.ops.scaled_mm import scaled_mm_reference

pytestmark = pytest.mark.gpu


def _inputs(M, N, K, dtype=torch.float8_e4m3fn):
    a = (torch.randn(M, K, device="cuda") * 2).to(dtype)
    b = torch.randn(N, K, device="cuda").to(dtype).t()
    return a, b


@pytest.mark.parametrize("shape", [(8192, 8192, 8192), (3000, 5000, 4000), (16, 4096, 4096), (1000, 1288, 520)])
@pytest.mark.parametrize("rowwise", [False, True])
def test_fp8_within_cublaslt_error(shape, rowwise):
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 needs sm_89+")
    M, N, K = shape
    a, b = _inputs(M, N, K)
    if rowwise:
        sa = torch.rand(M, 1, device="cuda") + 0.5
        sb = torch.rand(1, N, device="cuda") + 0.5
    else:
        sa = torch.tensor(0.5, device="cuda")
        sb = torch.tensor(2.0, device="cuda")
    out = tilewright.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    ref = scaled_mm_reference(a, b, sa, sb, None, torch.float64, torch.float64)
    peer = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    err = (out.double() - ref).abs().max().item()
    peer_err = (peer.double() - ref).abs().max().item()
    assert err <= 2 * peer_err + 1e-6, (err, peer_err)
