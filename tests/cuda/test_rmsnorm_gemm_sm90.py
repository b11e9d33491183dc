"""CPU tier for the sm_90a RMSNorm-fused GEMM (cuda_fallback/rmsnorm_gemm_sm90.py + .cu): one build with its
resource report and SASS markers, host validation, the router's decisions on a faked sm_90 device, and the
op layer's fallbacks. The full build matrix is in build-check (test_cuda_build.py). No GPU needed."""
from __future__ import annotations

import re
import warnings

import pytest
import torch

from tilewright import router
from tilewright.cuda_fallback import build_check
from tilewright.cuda_fallback import gemm_sm90 as cg
from tilewright.cuda_fallback import rmsnorm_gemm_sm90 as rg
from tilewright.cuda_fallback.runtime import build

needs_compiler = pytest.mark.skipif(build.toolchain() is None, reason="no CUDA compiler (nvcc or NVRTC)")


def _sm90_build(name, fp16=False, act=0, bias=False, res=False):
    v = rg.VARIANTS[name]
    b = build.compile_source(rg.SOURCE, "sm_90a", v.defines(False, False, fp16, act, bias, res))
    info = build_check.parse_ptxas(b.log)
    assert info["spills"] == 0 and info["stack"] == 0, b.log
    assert not build_check.PERF_WARNINGS.search(b.log), b.log  # no serialized wgmma, setmaxnreg honoured
    return b


@needs_compiler
@pytest.mark.parametrize("fp16,act,bias,res", [(False, 0, False, False), (True, 2, True, True)])
def test_xform_build_transform_warps_ss_hgmma_no_spills(cache, fp16, act, bias, res):
    """-xf (selectable, not the default): the consumers' wgmmas read A (x * g, written back by the transform warps) from smem descriptors; the
    transform warps use 16-byte shared loads/stores and no ldmatrix; 72/216 setmaxnreg split."""
    assert rg.VARIANTS[rg.XFORM_VARIANT].xform
    b = _sm90_build(rg.XFORM_VARIANT, fp16, act, bias, res)
    text = build_check.sass(b.cubin)
    if text is None:
        pytest.skip("no cuobjdump")
    assert rg.KERNEL in text
    hgmma = re.findall(r"HGMMA\.64x256x16\.F32(?:\.BF16)? R\d+, (\S+),", text)
    assert hgmma and all(a.startswith("gdesc") for a in hgmma), hgmma  # A from smem, as the plain GEMM
    assert not re.search(r"\bLDSM\b", text)
    for marker in ("LDS.128", "STS.128", "USETMAXREG", "UTMALDG", "UTMASTG", "FENCE.VIEW.ASYNC.S"):
        assert re.search(rf"\b{re.escape(marker)}\b", text), marker
    assert re.search(r"USETMAXREG\.DEALLOC\.CTAPOOL 0x48\b", text)  # producer warpgroup: 72 registers
    assert re.search(r"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, 0xd8\b", text)  # consumers: 216


@needs_compiler
def test_register_a_build_hgmma_no_spills(cache):
    v = rg.VARIANTS[rg.REGISTER_A_VARIANT]
    assert not v.xform
    b = build.compile_source(rg.SOURCE, "sm_90a", v.defines(False, False, False))
    info = build_check.parse_ptxas(b.log)
    assert info["spills"] == 0 and info["stack"] == 0, b.log
    assert not build_check.PERF_WARNINGS.search(b.log), b.log  # no serialized wgmma, setmaxnreg honoured
    text = build_check.sass(b.cubin)
    if text is None:
        pytest.skip("no cuobjdump")
    assert rg.KERNEL in text
    hgmma = re.findall(r"HGMMA\.64x256x16\.F32\.BF16 R\d+, (\S+),", text)
    assert hgmma and all(a.startswith("R") for a in hgmma), hgmma  # A operand from registers, not a gdesc
    for marker in ("LDSM", "USETMAXREG", "UTMALDG", "UTMASTG"):
        assert re.search(rf"\b{marker}\b", text), marker


def test_build_check_covers_the_kernel():
    assert "rmsnorm_gemm_sm90.cu" in build_check.KERNELS
    archs, markers, builds = build_check.KERNELS["rmsnorm_gemm_sm90.cu"]
    assert archs == ("sm_90a",) and "HGMMA" in markers
    rows = builds()
    assert len(rows) == len(rg.BUILD_CHECK_BUILDS)
    assert any(d.get("TW_NORM_DBUF") == 0 for _, d, _, _ in rows)  # the fallback build is compiled too
    # per-build markers: ldmatrix for register-A, 16-byte shared loads/stores for the transform warps
    for _, d, _, extra in rows:
        assert ("LDS.128" in extra) == (d.get("TW_NORM_XFORM") == 1) and ("LDSM" in extra) != ("LDS.128" in extra)
    assert sum(d.get("TW_NORM_XFORM") == 1 for _, d, _, _ in rows) >= 3


def test_variants():
    for v in rg.VARIANTS.values():
        assert v.smem_bytes() <= cg.SMEM_LIMIT
    sb = rg.VARIANTS["coop128x256s3-sb"]
    assert sb.defines(False, False, False)["TW_NORM_DBUF"] == 0
    assert "TW_NORM_DBUF" not in rg.VARIANTS["coop128x256s3"].defines(False, False, False)
    xf = rg.VARIANTS["coop128x256s3-xf"]
    assert xf.defines(False, False, False)["TW_NORM_XFORM"] == 1
    assert "TW_NORM_XFORM" not in rg.VARIANTS["coop128x256s3"].defines(False, False, False)
    # transform barriers + rstd[2][BM] fp32 on top of the GEMM's layout
    assert xf.smem_bytes() >= rg.VARIANTS["coop128x256s3"].smem_bytes() + 2 * 128 * 4 + 3 * 8 + 32
    # measured on H200: the register-A builds are the defaults, -xf stays selectable
    assert not rg.VARIANTS[rg.DEFAULT_VARIANT].xform and not rg.VARIANTS[rg.SMALL_M_VARIANT].xform
    assert rg.VARIANTS[rg.XFORM_VARIANT].xform and rg.DEFAULT_VARIANT == rg.REGISTER_A_VARIANT
    dbg = rg.DEBUG_VARIANTS["coop128x256s3-ssdebug"]
    assert dbg.defines(False, False, False)["TW_NORM_SS_DEBUG"] == 1 and dbg.name not in rg.VARIANTS
    # the timing-only builds without the sums' reads: the folded builds' defines plus TW_NORM_XFORM_NOREAD, never
    # a build the op or the router can name
    for name in ("coop128x192s4-xf-roov", "coop128x256s3-xf-roov"):
        noread = rg.DEBUG_VARIANTS[name + "-noread"]
        assert noread.defines(False, False, False) == {**rg.READ_ONLY_VARIANTS[name].defines(False, False, False),
                                                       "TW_NORM_XFORM_NOREAD": 1}
        assert noread.name not in rg.VARIANTS and noread.name not in rg.READ_ONLY_VARIANTS
    assert "TW_NORM_XFORM_NOREAD" not in rg.READ_ONLY_VARIANTS["coop128x192s4-xf-roov"].defines(False, False, False)
    assert rg.pick_variant(8192, 4096, 4096).name == rg.DEFAULT_VARIANT
    assert rg.pick_variant(16, 4096, 4096).name == rg.SMALL_M_VARIANT


def test_sums_once_where_it_measured_faster(monkeypatch):
    """The folded launch sums once a row block on the 192-column build with more than one column tile (measured
    faster there, level on the 256-column one), unless TILEWRIGHT_RMS_SUMS_ONCE=0."""
    monkeypatch.delenv(rg.SUMS_ONCE_ENV, raising=False)
    assert rg.folded_variant(3000, 5120, 5120) == rg.FOLDED_WAVE_VARIANT and rg.sums_once_applies(3000, 5120, 5120)
    assert rg.folded_variant(8192, 4096, 4096) == rg.FOLDED_VARIANT and not rg.sums_once_applies(8192, 4096, 4096)
    monkeypatch.setenv(rg.SUMS_ONCE_ENV, "0")
    assert not rg.sums_once_applies(3000, 5120, 5120)
    # the switch is one of the family's: in every replay key (ops/_fast.state), so flipping it re-decides
    from tilewright import backends
    assert rg.SUMS_ONCE_ENV in backends.environment()


def test_variant_override(monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CUDA_RMSNORM_VARIANT", "coop128x256s3-sb")
    assert not rg.pick_variant(8192, 4096, 4096).dbuf


def _operands(M=256, N=512, K=256, dtype=torch.bfloat16):
    return (torch.randn(M, K, dtype=dtype), torch.ones(K, dtype=dtype), torch.randn(N, K, dtype=dtype),
            torch.randn(N, dtype=dtype))


def test_constraints():
    x, g, w, b = _operands()
    assert rg.constraints(x, g, w, b)[0]
    assert not rg.constraints(x.float(), g.float(), w.float())[0]
    assert "unit stride along K" in rg.constraints(x.t().contiguous().t(), g, w)[1]
    assert "shape" in rg.constraints(x, g[:-2], w)[1]
    assert not rg.constraints(x, g, w.half())[0]
    ok, why = rg.constraints(torch.randn(64, 200, dtype=torch.bfloat16)[:, :198], torch.ones(198, dtype=torch.bfloat16),
                             torch.randn(64, 198, dtype=torch.bfloat16))
    assert not ok  # weight rows of 396 B are not 16-byte multiples (TMA)
    assert not rg.constraints(x, g[None], w)[0]
    assert not rg.constraints(x, g, w[:, :, None])[0]  # backward-style argument lists are declined, not crashed on
    x2, du = torch.randn(8, 64, dtype=torch.bfloat16), torch.randn(8, 64, dtype=torch.bfloat16)
    assert not rg.constraints(x2, du, torch.ones(64, dtype=torch.bfloat16))[0]


def test_launch_validation_before_any_gpu_work():
    x, g, w, b = _operands()
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype)
    with pytest.raises(ValueError, match="rstd"):
        rg.launch_cuda_rmsnorm_gemm(x, g, w.t(), out, torch.empty(3), 1e-6)
    with pytest.raises(ValueError, match="eps"):
        rg.launch_cuda_rmsnorm_gemm(x, g, w.t(), out, None, 0.0)
    with pytest.raises(ValueError, match="unit stride"):
        rg.launch_cuda_rmsnorm_gemm(x.t().contiguous().t(), g, w.t(), out, None, 1e-6)


def test_reference_matches_unfused_for_unit_weight():
    x, g, w, b = _operands(M=16, N=32, K=64, dtype=torch.float32)
    y, rstd = rg.reference(x, g, w, b, 1e-6)
    want = torch.nn.functional.linear(torch.nn.functional.rms_norm(x, (64,), g, 1e-6), w, b)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rstd, torch.rsqrt(x.pow(2).mean(-1) + 1e-6))


def test_try_launch_never_raises(monkeypatch, fresh_guard):
    fresh_guard(rg.GUARD)

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(rg, "launch_cuda_rmsnorm_gemm", broken)
    x, g, w, b = _operands()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert rg.try_launch(x, g, w, torch.empty(1), None, 1e-6) is False
    assert rg.GUARD.disabled and "boom" in rg.GUARD.disabled
    assert any("RMSNorm-GEMM" in str(w.message) for w in caught)
    assert rg.try_launch(x, g, w, torch.empty(1), None, 1e-6) is False  # stays disabled, no second warning


def test_cache_key_covers_an_included_kernel_body(tmp_path):
    tc = build.Toolchain("nvcc", "nvcc", "13.0")
    body = tmp_path / "body.cu"
    thin = tmp_path / "thin.cu"
    body.write_text("// v1\n")
    thin.write_text('#define X 1\n#include "body.cu"\n')
    k1 = build.cache_key(thin, "sm_90a", (), tc)
    body.write_text("// v2\n")
    assert build.cache_key(thin, "sm_90a", (), tc) != k1


# ------------------------------------------------------------------------------------------------ router
@pytest.fixture
def fake_sm90(monkeypatch, swap_record, fake_compiler):
    """CPU tensors on a pretend sm_90 device with a compiler; the self-check result is recorded and faked."""
    state = {"calls": [], "self_check": (True, "self-check passed")}

    def self_check(*tensors):
        state["calls"].append("rms_norm_linear")
        return state["self_check"]

    monkeypatch.setattr(router, "_capability", lambda device: (9, 0))
    swap_record("rms_norm_linear", "rmsnorm_gemm_sm90", ready=self_check)
    monkeypatch.delenv("TILEWRIGHT_BACKEND", raising=False)
    monkeypatch.delenv("TILEWRIGHT_CUDA", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return state


def test_router_automatic_follows_the_measured_region(fake_sm90):
    x, g, w, b = _operands(M=256, N=1024, K=512)  # M <= 256: outside the GEMM's measured win region
    d = router.decide("rms_norm_linear", x, g, w, b)
    assert d.backend == "triton" and "outside the measured win region" in str(d)
    assert fake_sm90["calls"] == []  # no self-check (no compile) when not preferred
    x, g, w, b = _operands(M=512, N=1024, K=512)  # in the shape region but 0.5 GFLOP: host-bound, Triton's
    d = router.decide("rms_norm_linear", x, g, w, b)
    assert d.backend == "triton" and "host-bound" in str(d) and fake_sm90["calls"] == []
    x, g, w, b = _operands(M=8192, N=4096, K=1024)  # inside it (69 GFLOP)
    d = router.decide("rms_norm_linear", x, g, w, b)
    assert d.backend == "cuda" and fake_sm90["calls"] == ["rms_norm_linear"]


def test_router_forced_cuda_runs_the_self_check(fake_sm90):
    x, g, w, b = _operands()
    d = router.decide("rms_norm_linear", x, g, w, b, backend="cuda")
    assert d.backend == "cuda" and d.forced and fake_sm90["calls"] == ["rms_norm_linear"]
    fake_sm90["self_check"] = (False, "self-check failed")
    with pytest.raises(ValueError, match="self-check failed"):
        router.decide("rms_norm_linear", x, g, w, b, backend="cuda")


def test_router_forced_cuda_explains_constraints(fake_sm90):
    x, g, w, b = _operands(dtype=torch.float32)
    with pytest.raises(ValueError, match="bfloat16"):
        router.decide("rms_norm_linear", x, g, w, b, backend="cuda")
    assert fake_sm90["calls"] == []


def test_router_other_capability(fake_sm90, monkeypatch):
    monkeypatch.setattr(router, "_capability", lambda device: (10, 0))
    x, g, w, b = _operands()
    ok, why = router._eligible("rms_norm_linear", "cuda", (x, g, w, b))
    assert not ok and "no rms_norm_linear kernel for sm_100" in why


def test_backward_forced_cuda_runs_triton(fake_sm90, monkeypatch):
    """The CUDA kernel is the forward only: the norm backward maps a forced "cuda" to Triton's kernel."""
    import importlib

    op = importlib.import_module("tilewright.ops.rms_norm_linear")

    seen = []
    monkeypatch.setattr(op.router, "dispatch", lambda name, *t, backend=None: seen.append(backend) or "torch")
    x = torch.randn(4, 16)
    op.rms_norm_backward_op(x, torch.randn(4, 16), torch.ones(16), torch.ones(4), True, True, True, "cuda")
    with router.use_backend("cuda"):
        op.rms_norm_backward_op(x, torch.randn(4, 16), torch.ones(16), torch.ones(4), True, False, False, None)
    assert seen == ["triton", "triton"]
