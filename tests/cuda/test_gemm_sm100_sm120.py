"""CPU tier for the Blackwell CUDA GEMMs (issue 8): build-check for sm_100a (tcgen05) and sm_120a (mma.sync), the
tcgen05 descriptor encoders against hand-computed PTX ISA examples, and the router on faked sm_100 / sm_120 devices
(including a failing first-use self-check). No GPU needed; build tests need nvcc or NVRTC."""
from __future__ import annotations

import re
import warnings

import pytest
import torch

from tilewright import backends, router
from tilewright.cuda_fallback import build_check
from tilewright.cuda_fallback import gemm_sm90 as cg
from tilewright.cuda_fallback import gemm_sm100 as tg
from tilewright.cuda_fallback import gemm_sm120 as mg
from tilewright.cuda_fallback import sm100_descriptors as d
from tilewright.cuda_fallback.runtime import build, gemm_common, guard

needs_compiler = pytest.mark.skipif(build.toolchain() is None, reason="no CUDA compiler (nvcc or NVRTC)")


# ------------------------------------------------------------------------------------------------ build-check
@needs_compiler
@pytest.mark.parametrize("arch,kernel,markers,module", [
    ("sm_100a", "gemm_sm100.cu", ("UTCATOMSWS", "LDTM", "UTCBAR", "UTMALDG"), tg),
    ("sm_120a", "gemm_sm120.cu", ("HMMA", "LDSM", "UTMALDG"), mg),
    ("sm_90a", "gemm_sm120.cu", ("HMMA", "LDSM", "UTMALDG"), mg),
])
def test_build_check_blackwell(cache, arch, kernel, markers, module):
    # this kernel's builds only: the whole sm_90a set is test_gemm_sm90's (compiling it twice cost CI ~50 s)
    rows, ok = build_check.build_check(arch, only=(kernel,))
    table = build_check.format_table(rows)
    assert ok, table
    built = [r for r in rows if r["kernel"] == kernel]
    assert len(built) == len(module.BUILD_CHECK_BUILDS), table
    for r in built:
        assert r["status"] == "ok" and r["spills"] == 0 and r["stack"] == 0, table
        assert r["smem"] <= module.SMEM_LIMIT, table
        if "not checked" not in r["markers"]:
            for m in markers:
                assert f"{m}:0" not in r["markers"] and m in r["markers"], table
    if module is tg:  # the MMA opcode per build: kind::f16 -> UTCHMMA, kind::f8f6f4 (FP8 builds) -> UTCQMMA;
        # cta_group::2 builds: their .2CTA forms, the multicast commit and the pair's TMEM alloc
        variants = [tg.BUILD_CHECK_VARIANTS[n] for n, *_ in tg.BUILD_CHECK_BUILDS]
        assert sum(v.fp8 for v in variants) == 4 and sum(v.cta2 for v in variants) == 2
        for r, v in zip(built, variants):
            want = ("UTCQMMA" if v.fp8 else "UTCHMMA") + ".2CTA" * v.cta2
            assert r["build"].startswith(v.name + " "), table
            if "not checked" not in r["markers"]:
                assert f"{want}:" in r["markers"] and f"{want}:0" not in r["markers"], table
                if v.cta2:
                    assert "UTCBAR.2CTA.MULTICAST:0" not in r["markers"], table


@needs_compiler
def test_sm100_fp8_build_sass(cache):
    """The FP8 build issues kind::f8f6f4 MMAs only (UTCQMMA, no UTCHMMA); the 16-bit build the reverse."""
    fp8 = build.compile_source(tg.SOURCE, "sm_100a", tg.FP8_VARIANTS["tc128x256s4f8"].defines(False, False, False))
    f16 = build.compile_source(tg.SOURCE, "sm_100a", tg.VARIANTS["tc128x256s4"].defines(False, False, False))
    t8, t16 = build_check.sass(fp8.cubin), build_check.sass(f16.cubin)
    if t8 is None:
        pytest.skip("no cuobjdump")
    assert "UTCQMMA" in t8 and "UTCHMMA" not in t8
    assert "UTCHMMA" in t16 and "UTCQMMA" not in t16
    assert build_check.parse_ptxas(fp8.log)["spills"] == 0


def test_sm100_fp8_variant_defines_leave_16bit_builds_alone():
    """16-bit builds get exactly the defines they had before the FP8 variant (same cache keys and SASS)."""
    assert set(tg.VARIANTS["tc128x256s4"].defines(False, False, False)) == {
        "TW_BN", "TW_STAGES", "TW_A_MN", "TW_B_MN", "TW_FP16", "TW_ACT", "TW_BIAS", "TW_RES"}
    d8 = tg.FP8_VARIANTS["tc128x256s4f8row"].defines(False, False, False)
    assert d8["TW_FP8"] == 1 and d8["TW_SCALE"] == 2
    assert not set(tg.FP8_VARIANTS) & set(tg.VARIANTS)  # never picked by the 16-bit router / launcher
    for v in tg.FP8_VARIANTS.values():
        assert v.smem_bytes() <= tg.SMEM_LIMIT and tg.tma_boxes(v) == ((128, 128), (128, v.bn))


def test_sm100_cta2_variants():
    """2-CTA builds: M = 256 per pair, B split by N (BN / 2 rows per CTA), even grids, cta_group::2 descriptors."""
    assert not set(tg.CTA2_VARIANTS) & set(tg.VARIANTS)  # build-only: never picked by the launcher / router
    v, v8 = tg.CTA2_VARIANTS["tc256x256s6c2"], tg.CTA2_VARIANTS["tc256x256s6f8c2"]
    assert v.defines(False, False, False)["TW_CTA2"] == 1 and "TW_CTA2" not in tg.VARIANTS["tc128x256s4"].defines(
        False, False, False)
    # a stage: 128 x 128 B of A + 128 x 128 B of B (half of BN = 256) = 32 KB; 6 stages + barriers + alignment slack
    assert v.smem_bytes() == 1024 + 6 * 32768 + 16 * 8 + 16 <= tg.SMEM_LIMIT
    assert tg.tma_boxes(v) == ((64, 128), (64, 128)) and tg.tma_boxes(v8) == ((128, 128), (128, 128))
    assert tg.grid_ctas(v, 148, 1000) == 148 and tg.grid_ctas(v, 132, 3) == 6 and tg.grid_ctas(v, 133, 1000) == 132
    assert tg.grid_ctas(tg.VARIANTS["tc128x256s4"], 133, 1000) == 133
    idesc, a_hi, b_hi = tg.kernel_descriptors(v, False, False, torch.bfloat16)
    assert idesc == 0x10400490 and a_hi == b_hi == 0x4000404000010000
    assert tg.kernel_descriptors_fp8(v8)[0] == 0x10400010


@needs_compiler
def test_sm100_cta2_build_sass(cache):
    """The 2-CTA build: every MMA is the pair form, commits multicast, TMEM alloc is the pair's; no 1-CTA forms."""
    b = build.compile_source(tg.SOURCE, "sm_100a", tg.CTA2_VARIANTS["tc256x256s6c2"].defines(False, False, False))
    text = build_check.sass(b.cubin)
    if text is None:
        pytest.skip("no cuobjdump")
    mmas = re.findall(r"\bUTC[HQ]MMA\S*", text)
    assert mmas and all(m.startswith("UTCHMMA.2CTA") for m in mmas), sorted(set(mmas))
    assert "UTCBAR.2CTA.MULTICAST" in text and "UTCATOMSWS.2CTA" in text and "UTMALDG" in text
    assert build_check.parse_ptxas(b.log)["spills"] == 0


@needs_compiler
def test_sm120_build_has_no_tma_syscall_fallback(cache):
    """On sm_120 the shared::cluster TMA form compiles to UTMALDG plus a syscall slow path; the kernel uses the
    shared::cta form there, so its SASS must carry no CALL at all."""
    b = build.compile_source(mg.SOURCE, "sm_120a", mg.VARIANTS[mg.DEFAULT_VARIANT].defines(False, True, False))
    text = build_check.sass(b.cubin)
    if text is None:
        pytest.skip("no cuobjdump")
    assert "CALL" not in text and "UTMALDG" in text


# ------------------------------------------------------------------------------------------------ descriptors
def test_instr_desc_hand_computed():
    # bf16 x bf16 -> f32, M = 128, N = 256, both K-major:
    #   D=F32 (1 << 4) = 0x10, A=BF16 (1 << 7) = 0x80, B=BF16 (1 << 10) = 0x400,
    #   N >> 3 = 32 -> 32 << 17 = 0x400000, M >> 4 = 8 -> 8 << 24 = 0x8000000  => 0x08400490
    assert d.instr_desc(128, 256, "bfloat16") == 0x08400490
    # f16, M = 128, N = 128, B MN-major: 0x10 | (1 << 16) = 0x10000 | (16 << 17) = 0x200000 | 0x8000000
    assert d.instr_desc(128, 128, "float16", b_mn=True) == 0x08210010
    # bf16, M = 64, N = 64, both MN-major: 0x10|0x80|0x400|0x8000|0x10000 | (8 << 17)=0x100000 | (4 << 24)
    assert d.instr_desc(64, 64, "bfloat16", a_mn=True, b_mn=True) == 0x04118490
    # kind::f8f6f4: e4m3 x e5m2 -> f32, M = 128, N = 128: 0x10 | (0 << 7) | (1 << 10) | 0x200000 | 0x8000000
    assert d.instr_desc(128, 128, "e4m3", "e5m2", kind="f8f6f4") == 0x08200410
    f = d.decode_instr_desc(d.instr_desc(128, 256, "bfloat16", b_mn=True))
    assert (f["m"], f["n"], f["a_format"], f["b_format"], f["d_format"], f["a_mn"], f["b_mn"], f["reserved"],
            f["sparse"], f["max_shift"]) == (128, 256, 1, 1, 1, 0, 1, 0, 0, 0)


def test_instr_desc_f8f6f4_hand_computed():
    """kind::f8f6f4 per the PTX ISA instruction-descriptor table: A format bits 7-9, B format bits 10-12 with
    E4M3 = 0, E5M2 = 1; D format (bits 4-5) 1 = F32; N >> 3 at bit 17, M >> 4 at bit 24."""
    # e4m3 x e4m3, M = 128, N = 256: 0x10 | 0 | 0 | (32 << 17) = 0x400000 | (8 << 24) = 0x8000000
    assert d.instr_desc(128, 256, "e4m3", kind="f8f6f4") == 0x08400010
    # e5m2 x e5m2, M = 128, N = 256: 0x10 | (1 << 7) = 0x80 | (1 << 10) = 0x400 | 0x400000 | 0x8000000 - the same
    # 32 bits as bf16 x bf16: the PTX .kind, not the descriptor, tells the two apart
    assert d.instr_desc(128, 256, "e5m2", kind="f8f6f4") == 0x08400490 == d.instr_desc(128, 256, "bfloat16")
    # e5m2 x e4m3, M = 128, N = 128: 0x10 | 0x80 | 0 | (16 << 17) = 0x200000 | 0x8000000
    assert d.instr_desc(128, 128, "e5m2", "e4m3", kind="f8f6f4") == 0x08200090
    # e4m3, M = 64, N = 8: 0x10 | (1 << 17) = 0x20000 | (4 << 24) = 0x4000000
    assert d.instr_desc(64, 8, "e4m3", kind="f8f6f4") == 0x04020010
    f = d.decode_instr_desc(d.instr_desc(128, 128, "e4m3", "e5m2", kind="f8f6f4"))
    assert (f["a_format"], f["b_format"], f["d_format"], f["a_mn"], f["b_mn"], f["reserved"], f["m"], f["n"]) == \
        (0, 1, 1, 0, 0, 0, 128, 128)
    assert d.MMA_K == {"f16": 16, "f8f6f4": 32} and d.k_block("f16") == 64 and d.k_block("f8f6f4") == 128
    with pytest.raises(ValueError):
        d.instr_desc(128, 128, "bfloat16", kind="f8f6f4")
    with pytest.raises(ValueError):
        d.instr_desc(128, 128, "e4m3", kind="f6")
    # cta_group::2, M = 256 (the pair's rows) -> M >> 4 = 16 at bit 24 = 0x10000000:
    #   bf16 N = 256: 0x10 | 0x80 | 0x400 | 0x400000 | 0x10000000; e4m3 N = 256: 0x10 | 0x400000 | 0x10000000
    assert d.instr_desc(256, 256, "bfloat16", cta_group=2) == 0x10400490
    assert d.instr_desc(256, 256, "e4m3", kind="f8f6f4", cta_group=2) == 0x10400010
    assert d.decode_instr_desc(d.instr_desc(256, 128, "float16", cta_group=2))["m"] == 256
    for bad in (dict(m=64, cta_group=2), dict(m=256, cta_group=1), dict(m=128, cta_group=3)):
        with pytest.raises(ValueError):
            d.instr_desc(n=128, a_format="bfloat16", **bad)
    # the FP8 build's descriptors: the idesc above, and the 16-bit K-major smem descriptor fields (SBO 1024, LBO 16)
    idesc, a_hi, b_hi = tg.kernel_descriptors_fp8(tg.FP8_VARIANTS["tc128x256s4f8"], "e4m3", "e5m2")
    assert idesc == 0x08400410 and a_hi == b_hi == 0x4000404000010000
    with pytest.raises(ValueError):
        tg.kernel_descriptors_fp8(tg.VARIANTS["tc128x256s4"])


@pytest.mark.parametrize("bad", [dict(m=256, n=128), dict(m=128, n=264), dict(m=128, n=24), dict(m=64, n=4),
                                 dict(m=128, n=128, a_format="e4m3")])
def test_instr_desc_rejects_invalid_shapes(bad):
    with pytest.raises(ValueError):
        d.instr_desc(**bad)


def test_smem_desc_hand_computed():
    # 128B-swizzled K-major tile at 0x8400: start 0x8400 >> 4 = 0x840, LBO 16 >> 4 = 1 at bit 16 (0x10000),
    # SBO 1024 >> 4 = 64 at bit 32 (0x40_0000_0000), version 1 at bit 46 (0x4000_0000_0000), layout 2 at bit 61
    # (0x4000_0000_0000_0000)  => 0x4000_4040_0001_0840
    assert d.smem_desc(0x8400, 16, 1024) == 0x4000404000010840
    # the Hopper encoding of the same tile (no version bit, 128B = 1 in bits 62-63) must differ
    hopper = (0x8400 >> 4) | (1 << 16) | (64 << 32) | (1 << 62)
    assert d.smem_desc(0x8400, 16, 1024) != hopper
    f = d.decode_smem_desc(d.smem_desc(0x8400 + 32, 8192, 1024))
    assert f == {"addr": 0x8420, "lbo": 8192, "sbo": 1024, "version": 1, "base_offset": 0, "lbo_mode": 0,
                 "layout": "128B"}
    assert d.decode_smem_desc(d.smem_desc(0, 16, 1024, "64B"))["layout"] == "64B"
    assert (d.smem_desc(0, 16, 1024, "32B") >> 61) == 6
    with pytest.raises(ValueError):
        d.smem_desc(0x8408, 16, 1024)  # not 16-byte aligned
    with pytest.raises(ValueError):
        d.smem_desc_hi(24, 1024)


def test_kernel_descriptors_match_the_cu_static_asserts():
    """gemm_sm100.cu static_asserts its constexpr mirror on these literals; keep both sides in sync."""
    src = (build.SOURCE_DIR / tg.SOURCE).read_text()
    for lit, val in (("0x08400490u", d.instr_desc(128, 256, "bfloat16")),
                     ("0x08210010u", d.instr_desc(128, 128, "float16", b_mn=True)),
                     ("0x04118490u", d.instr_desc(64, 64, "bfloat16", a_mn=True, b_mn=True)),
                     ("0x4000404000010000ull", d.operand_desc_hi(False)),
                     ("0x4000404002000000ull", d.operand_desc_hi(True)),
                     ("0x08400010u", d.instr_desc(128, 256, "e4m3", kind="f8f6f4")),
                     ("0x08200410u", d.instr_desc(128, 128, "e4m3", "e5m2", kind="f8f6f4")),
                     ("0x08400490u", d.instr_desc(128, 256, "e5m2", kind="f8f6f4")),
                     ("0x10400490u", d.instr_desc(256, 256, "bfloat16", cta_group=2))):
        assert lit in src and int(lit.rstrip("ul"), 16) == val
    idesc, a_hi, b_hi = tg.kernel_descriptors(tg.VARIANTS["tc128x256s4"], False, True, torch.bfloat16)
    assert idesc == 0x08410490 and a_hi == d.operand_desc_hi(False) and b_hi == d.operand_desc_hi(True)


# ------------------------------------------------------------------------------------------------ router
@pytest.fixture
def fake_gpu(monkeypatch, fake_compiler):
    state = {"cap": (10, 0), "calls": 0}
    monkeypatch.setattr(router, "_capability", lambda device: state["cap"])
    monkeypatch.delenv("TILEWRIGHT_BACKEND", raising=False)
    monkeypatch.delenv("TILEWRIGHT_CUDA", raising=False)
    return state


def _big(M=16384, N=4096, K=4096):  # in the win region (>= 69 GFLOP, gemm_sm90.PREFER_MIN_FLOPS)
    return torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)


@pytest.mark.parametrize("cap,module,label", [((10, 0), tg, "tcgen05"), ((10, 3), tg, "tcgen05"),
                                              ((12, 0), mg, "mma.sync"), ((12, 1), mg, "mma.sync")])
def test_router_blackwell_goes_to_its_family(fake_gpu, swap_record, cap, module, label):
    fake_gpu["cap"] = cap
    seen = []

    def ready(a, b, bias=None, residual=None):
        seen.append(module.__name__)
        return True, "x: self-check passed; not yet run on this hardware by the project's tests"

    swap_record("gemm", module.__name__.rsplit(".", 1)[1], ready=ready)
    dec = router.decide("gemm", *_big(), None, None)
    assert dec.backend == "cuda", str(dec)
    assert seen == [module.__name__]
    text = router.explain("gemm", *_big(), None, None)
    assert label in text and "not yet run on this hardware by the project's tests" in text
    a, b = _big(M=16, N=4096, K=4096)  # decode: outside the stand-in win region, Triton
    dec = router.decide("gemm", a, b, None, None)
    assert dec.backend == "triton" and "not yet run on this hardware" in dec.reasons[0], str(dec)


@pytest.mark.parametrize("cap,module", [((10, 0), tg), ((12, 0), mg)])
def test_router_blackwell_failing_self_check_falls_back_with_one_warning(fake_gpu, monkeypatch, cap, module):
    """The real ready(): a failing self-check disables the family (Triton serves) and warns exactly once."""
    fake_gpu["cap"] = cap
    monkeypatch.setattr(module.GUARD, "checked", {})
    monkeypatch.setattr(module.GUARD, "disabled", None)
    monkeypatch.setattr(guard, "_warned", set())
    monkeypatch.setattr(guard, "device_model", lambda device: f"Fake Blackwell (sm_{cap[0]}{cap[1]})")
    monkeypatch.setattr(gemm_common, "self_check",
                        lambda *a, **k: (False, "self-check failed on (300, 264, 200): relative error 0.9"))
    with pytest.warns(RuntimeWarning, match="Triton serves"):
        dec = router.decide("gemm", *_big(), None, None)
    assert dec.backend == "triton" and "self-check failed" in dec.reasons[0], str(dec)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # second decision: cached result, no second warning
        assert router.decide("gemm", *_big(), None, None).backend == "triton"
    with pytest.raises(ValueError, match="self-check failed"):
        router.decide("gemm", *_big(), None, None, backend="cuda")


def test_gemm_families_by_capability():
    """One "cuda" GEMM record per capability major, each launching its own family; none for sm_8x or sm_11x."""
    by_major = {m: r for r in backends.records("gemm", "cuda") for m in r.archs}
    assert by_major[9].launch == cg.try_launch and by_major[10].launch == tg.try_launch
    assert by_major[12].launch == mg.try_launch
    assert 8 not in by_major and 11 not in by_major
    a, b = _big(64, 64, 64)
    d = router.decide("gemm", a, b)  # CPU: no CUDA record serves, so the op layer's launch entry declines
    assert d.backend != "cuda" and d.launch(a, b, torch.empty(64, 64, dtype=torch.bfloat16)) is False


def test_no_result_from_blackwell_yet():
    """No measurement on an sm_100 or sm_120 card: their records carry none (runs on an sm_90 stand-in do not count),
    which keeps the "not yet run on this hardware" note in their reasons."""
    assert tg.MEASURED_ON == () and mg.MEASURED_ON == ()
    assert backends.REGISTRY[("gemm", "gemm_sm100")].measured == () and tg.GUARD.measured == ()


def test_variant_smem_fits():
    for v in mg.VARIANTS.values():
        assert v.smem_bytes() <= mg.SMEM_LIMIT and v.threads == 288
    for v in tg.VARIANTS.values():
        assert v.smem_bytes() <= tg.SMEM_LIMIT and 2 * v.bn <= 512


def test_build_check_names_an_unknown_source():
    with pytest.raises(ValueError, match="no kernel source \\['nope.cu'\\]"):
        build_check.build_check("sm_90a", only=("nope.cu",))
