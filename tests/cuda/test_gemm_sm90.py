"""CPU tier for the CUDA fallback: build-check (compile + SASS markers), the cubin cache, the launcher's input
constraints, and the router's decisions for faked capabilities. No GPU needed; build tests need nvcc or NVRTC."""
from __future__ import annotations

import contextlib
import re
import shutil
import types
import warnings

import pytest
import torch

from tilewright import router
from tilewright.cuda_fallback import build_check
from tilewright.cuda_fallback import gemm_sm90 as cg
from tilewright.cuda_fallback.runtime import build, launch

needs_compiler = pytest.mark.skipif(build.toolchain() is None, reason="no CUDA compiler (nvcc or NVRTC)")


# ------------------------------------------------------------------------------------------------ build-check
@needs_compiler
def test_build_check_sm90a_passes(cache):
    rows, ok = build_check.build_check("sm_90a")
    table = build_check.format_table(rows)
    assert ok, table
    built = [r for r in rows if r["kernel"] == "gemm_sm90.cu"]
    assert len(built) == len(cg.BUILD_CHECK_BUILDS)
    for r in built:
        assert r["spills"] == 0 and r["stack"] == 0, table
        assert r["smem"] <= cg.SMEM_LIMIT, table
        if "not checked" not in r["markers"]:  # a disassembler ships with triton, so normally checked
            store = ("LDS.128", "STG.E.NA.128") if "TW_STORE_DIRECT=1" in r["build"] else ("UTMASTG",)
            for marker in ("HGMMA", "UTMALDG", "USETMAXREG") + store:
                assert f"{marker}:0" not in r["markers"] and marker in r["markers"], table
    assert any("TW_STORE_DIRECT=1" in r["build"] for r in built)


@needs_compiler
def test_the_direct_store_build_stores_by_its_threads_and_the_default_by_tma(cache):
    """TW_STORE_DIRECT: no TMA store in the build, the staged tile read back 16 bytes at a time and stored by
    16-byte global stores (16-bit ones for an N tail); the default build the other way round."""
    v = cg.VARIANTS["coop128x256s3"]
    texts = {}
    for direct in (0, 1):
        defines = {**v.defines(False, True, False, 0, False, False), **({"TW_STORE_DIRECT": 1} if direct else {})}
        texts[direct] = build_check.sass(build.compile_source(cg.SOURCE, "sm_90a", defines).cubin)
        if texts[direct] is None:
            pytest.skip("no cuobjdump to read SASS with")
    count = {d: {m: len(re.findall(rf"\b{re.escape(m)}\b", t)) for m in ("UTMASTG", "STG.E.NA.128", "LDS.128")}
             for d, t in texts.items()}
    assert count[0]["UTMASTG"] > 0 and count[0]["STG.E.NA.128"] == 0, count
    assert count[1]["UTMASTG"] == 0 and count[1]["STG.E.NA.128"] > 0 and count[1]["LDS.128"] > 0, count
    assert re.search(r"\bSTG\.E\.NA\.U16\b", texts[1]), "the N tail's 16-bit stores"


def _line_aligned(rows: int, cols: int, dtype=torch.bfloat16) -> torch.Tensor:
    """A (rows, cols) tensor whose base lies on the 128-byte grid (CPU allocations need not: CUDA ones do)."""
    size = torch.tensor([], dtype=dtype).element_size()
    storage = torch.empty(rows * cols + 128 // size, dtype=dtype)
    off = (-storage.data_ptr() % 128) // size
    return storage[off:off + rows * cols].view(rows, cols)


def test_odd_pitches_and_bases_take_the_direct_store():
    """gemm_sm90.direct_store: a base or (over more than one row) a row pitch off the 128-byte grid."""
    buf = _line_aligned(8, 2048)
    assert not cg.direct_store(buf[:, :1000])  # pitch 4096 bytes: TMA, whatever N is
    assert cg.direct_store(_line_aligned(8, 1000))  # pitch 2000 bytes
    assert not cg.direct_store(_line_aligned(8, 1024))
    assert cg.direct_store(buf[:, 8:1008])  # base 16 bytes past the grid
    assert not cg.direct_store(buf[:, 64:1064])  # 128 bytes past
    assert not cg.direct_store(_line_aligned(1, 1000))  # one row: no pitch
    assert cg.direct_store(_line_aligned(4, 1000, torch.float32)[:, :-1])  # 4000-byte pitch
    # the same rule from a contiguous output's shape (what a tune launches)
    assert cg.direct_store_contiguous(8, 1000, 2) and not cg.direct_store_contiguous(8, 1024, 2)
    assert not cg.direct_store_contiguous(1, 1000, 2) and cg.direct_store_contiguous(8, 1000, 4)


@needs_compiler
def test_bias_comes_by_async_copy_into_smem(cache):
    """The bias builds copy the tile's bias slice with cp.async (SASS LDGSTS) during the mainloop and read it back
    from shared memory; a build without bias has no such copy."""
    import re

    builds = {label: defines for label, defines, *_ in cg.build_check_builds()}
    with_bias = next(d for label, d in builds.items() if "bias" in label)
    without = next(d for label, d in builds.items() if "bias" not in label)
    counts = []
    for defines in (with_bias, without):
        text = build_check.sass(build.compile_source(cg.SOURCE, "sm_90a", defines).cubin)
        if text is None:
            pytest.skip("no cuobjdump to read SASS with")
        counts.append(len(re.findall(r"\bLDGSTS\b", text)))
    assert counts[0] >= 1 and counts[1] == 0, counts


@needs_compiler
def test_a_residual_build_compiles_one_path(cache):
    """The launcher compiles the residual's path in (TW_RES_PATH): the TMA-tile build has neither the element loads'
    code nor their global loads, and is far shorter than a build with both paths (measured: the unused path more than
    doubled the epilogue and slowed the mainloop beside it); the element-load build has the loads."""
    import re

    v = cg.VARIANTS["coop128x256s3"]
    texts = {}
    for path in (0, 1, 2):
        defines = {**v.defines(False, True, False, 0, True, True), **({"TW_RES_PATH": path} if path else {})}
        texts[path] = build_check.sass(build.compile_source(cg.SOURCE, "sm_90a", defines).cubin)
        if texts[path] is None:
            pytest.skip("no cuobjdump to read SASS with")
    count = {p: len(re.findall(r"/\*[0-9a-f]{4,}\*/", t)) for p, t in texts.items()}
    loads = {p: len(re.findall(r"\bLDG\.E", t)) for p, t in texts.items()}
    assert count[1] < 0.7 * count[0] and count[2] < count[0], count
    assert loads[1] < loads[2] and loads[2] > 0, loads
    # the bias alike (TW_BIAS_PATH): the smem slice alone has no register-load copies of the epilogue
    alone = build_check.sass(build.compile_source(cg.SOURCE, "sm_90a", {**v.defines(False, True, False, 0, True, False),
                                                                        "TW_BIAS_PATH": 1}).cubin)
    both = build_check.sass(build.compile_source(cg.SOURCE, "sm_90a", v.defines(False, True, False, 0, True, False)).cubin)
    n_alone, n_both = (len(re.findall(r"/\*[0-9a-f]{4,}\*/", t)) for t in (alone, both))
    assert n_alone < 0.9 * n_both and re.search(r"\bLDGSTS\b", alone), (n_alone, n_both)


@needs_compiler
def test_the_swiglu_build_loads_b_in_two_halves_and_stores_half_the_columns(cache):
    """TW_GLU: each k-block's B comes as two boxes (gate and up halves: one TMA load more a stage than the plain
    build), the tile stores BN / 2 columns (half the TMA stores and stmatrix), the silu is the fast exponent and
    division (one MUFU.EX2 an output element: 64 a thread in the cooperative 64 x 128 output), and the epilogue stays
    small: 0 spills, under 1.4x the plain build's SASS."""
    v = cg.VARIANTS["coop128x256s3"]
    stats = {}
    for glu in (False, True):
        defines = {**v.defines(False, False, False, 0, False, False), **({"TW_GLU": 1} if glu else {})}
        bld = build.compile_source(cg.SOURCE, "sm_90a", defines)
        text = build_check.sass(bld.cubin)
        if text is None:
            pytest.skip("no cuobjdump to read SASS with")
        assert "0 bytes spill stores" in bld.log, bld.log
        stats[glu] = {k: len(re.findall(p, text)) for k, p in (
            ("n", r"/\*[0-9a-f]{4,}\*/"), ("ldg", r"\bUTMALDG"), ("stg", r"\bUTMASTG"), ("stsm", r"\bSTSM"),
            ("ex2", r"MUFU\.EX2"))}
    plain, glu = stats[False], stats[True]
    assert glu["ldg"] > plain["ldg"] and glu["stg"] * 2 == plain["stg"] and glu["stsm"] * 2 == plain["stsm"], stats
    assert plain["ex2"] == 0 and glu["ex2"] == 64 and glu["n"] < 1.4 * plain["n"], stats


def test_the_swiglu_build_refuses_odd_tiles_and_outputs():
    """The gated-linear launcher's own errors, seen without a GPU: tiles of 128 or 256 columns only (the halves are
    whole 64-column chunks), out of (M, N) for b's 2N columns, an even column count; the tile pick never gives the
    192-column wave tile."""
    a = torch.empty(256, 512, dtype=torch.bfloat16)
    b = torch.empty(1024, 512, dtype=torch.bfloat16).t()
    with pytest.raises(ValueError, match="variant coop128x192s4"):
        cg.launch_cuda_swiglu(a, b, torch.empty(256, 512, dtype=torch.bfloat16), variant="coop128x192s4")
    with pytest.raises(ValueError, match="out must be"):
        cg.launch_cuda_swiglu(a, b, torch.empty(256, 1024, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="even count"):
        cg.launch_cuda_swiglu(a, torch.empty(1009, 512, dtype=torch.bfloat16).t(),
                              torch.empty(256, 504, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="N = 505"):
        cg.launch_cuda_swiglu(a, torch.empty(1010, 512, dtype=torch.bfloat16).t(),
                              torch.empty(256, 505, dtype=torch.bfloat16))
    assert cg.glu_variant(16384, 11264, 2048).name == cg.GLU_VARIANT == "pp128x128s5"
    assert cg.glu_variant(3000, 10240, 5120).name == cg.GLU_VARIANT  # (not the wave tile: 192 columns do not halve)


def test_the_swiglu_tile_follows_the_variant_variable_when_it_halves(monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CUDA_GEMM_VARIANT", "coop128x256s3")
    assert cg.glu_variant(16384, 11264, 2048).name == "coop128x256s3"
    monkeypatch.setenv("TILEWRIGHT_CUDA_GEMM_VARIANT", "coop128x192s4")
    assert cg.glu_variant(16384, 11264, 2048).name == cg.GLU_VARIANT


def test_the_launcher_picks_the_epilogue_paths(monkeypatch):
    """gemm_sm90.prepare compiles the TMA-tile path where the residual has a map (full rows, a pos_embed period that
    whole tiles hold), the element loads otherwise (transposed, a period inside a tile), neither without a residual
    or in a build that reads the residual element-wise anyway (the RMSNorm builds: residual_tma=False); a 4-byte
    aligned bias's smem path, else its register loads (gemm_sm90.epilogue_paths)."""
    seen = []

    class Stop(Exception):
        pass

    def record(*args, extra_defines=None, **kw):
        seen.append(extra_defines)
        raise Stop

    monkeypatch.setattr(cg.gemm_common, "build_and_map_operands", record)
    M, N, K = 4096, 1024, 512
    a, b, out = torch.empty(M, K), torch.empty(K, N), _line_aligned(M, N, torch.float32)  # (the TMA store)
    v = cg.VARIANTS["pp128x128s5"]
    cases = [((1 << 20, (M * N, N, 1), M), True, {"TW_RES_PATH": 1}),  # full rows
             ((1 << 20, (0, N, 1), 1024), True, {"TW_RES_PATH": 1}),  # a pos_embed, 1024 rows a period
             ((1 << 20, (0, N, 1), 96), True, {"TW_RES_PATH": 2}),  # a period inside a tile
             ((1 << 20, (M * N, 1, M), M), True, {"TW_RES_PATH": 2}),  # transposed
             ((1 << 20, (M * N, N, 1), M), False, {}),  # the RMSNorm builds
             ((0, (0, 0, 0), 1), True, {})]  # no residual
    for (res_ptr, rs, period), residual_tma, want in cases:
        with pytest.raises(Stop):
            cg.prepare(a, b, out, v, None, res_ptr, rs, period, 0, 0, 16, None, residual_tma=residual_tma)
        assert seen[-1] == want, (rs, period, residual_tma, seen[-1])
    storage = torch.empty(N + 2)
    aligned, odd = storage[:N], storage[1:N + 1]  # fp32: 4-byte aligned either way; 2-byte elements below
    half = torch.empty(N + 1, dtype=torch.bfloat16)
    for bias, residual_tma, want in [(aligned, True, {"TW_BIAS_PATH": 1}), (odd, True, {"TW_BIAS_PATH": 1}),
                                     (half[:N], True, {"TW_BIAS_PATH": 1}), (half[1:], True, {"TW_BIAS_PATH": 2}),
                                     (half[1:], False, {})]:
        assert (bias.data_ptr() % 4 == 0) == (want.get("TW_BIAS_PATH") == 1) or not want
        with pytest.raises(Stop):
            cg.prepare(a, b, out, v, bias, 0, (0, 0, 0), 1, 0, 0, 16, None, residual_tma=residual_tma)
        assert seen[-1] == want, (bias.data_ptr() % 4, residual_tma, seen[-1])


def test_the_launcher_passes_an_odd_pitch_output_by_pointer(monkeypatch):
    """prepare: the direct store's build (TW_STORE_DIRECT) for an odd-pitch output of the plain GEMM, with out's
    address and row stride as the last two arguments - the pointer tagged with out's role, the unread map not
    (a bound launch rewrites the pointer per call) -; the TMA map otherwise, and never in the builds of other
    sources (the RMSNorm / sums ones) or the gated one."""
    seen = []

    class Driver:
        def encode_tiled(self, *args):
            m = launch.TensorMap()
            m.ptr = args[1]
            return m

    def fake_build(*args, extra_defines=None, **kw):
        seen.append(dict(extra_defines))
        return Driver(), "fn", launch.TensorMap(), launch.TensorMap(), None, None, 132

    monkeypatch.setattr(cg.gemm_common, "build_and_map_operands", fake_build)
    M, N, K = 1000, 1000, 256
    a, b = torch.empty(M, K, dtype=torch.bfloat16), torch.empty(K, N, dtype=torch.bfloat16)
    v = cg.VARIANTS["coop128x256s3"]
    odd = _line_aligned(M, N)  # pitch 2000 bytes
    fn, grid, args = cg.prepare(a, b, odd, v, None, 0, (0, 0, 0), 1, 0, 0, 16, None)
    assert seen[-1] == {"TW_STORE_DIRECT": 1}
    tagged = [(i, x) for i, x in enumerate(args) if getattr(x, "role", None) == "c_ptr"]
    assert len(tagged) == 1 and tagged[0][0] == len(args) - 2 and tagged[0][1].value == odd.data_ptr()
    assert args[-1].value == N and getattr(args[2], "role", None) is None
    wide = _line_aligned(M, 1024)[:, :N]  # pitch 2048 bytes: the TMA store
    monkeypatch.setattr(cg.torch.cuda, "device", lambda d: contextlib.nullcontext())  # (no CUDA device here)
    fn, grid, args = cg.prepare(a, b, wide, v, None, 0, (0, 0, 0), 1, 0, 0, 16, None)
    assert seen[-1] == {} and args[2].role == "c_ptr" and args[2].ptr == wide.data_ptr()
    assert not any(getattr(x, "role", None) == "c_ptr" for x in args[3:])
    cg.prepare(a, b, odd, v, None, 0, (0, 0, 0), 1, 0, 0, 16, None, source="rmsnorm_gemm_sm90.cu",
               residual_tma=False)
    assert "TW_STORE_DIRECT" not in seen[-1]
    cg.prepare(a, torch.empty(K, 2 * N, dtype=torch.bfloat16), odd, cg.VARIANTS["pp128x128s5"], None, 0, (0, 0, 0),
               1, 0, 0, 16, None, glu=True)
    assert seen[-1] == {"TW_GLU": 1}


@needs_compiler
def test_build_check_cli_exit_code(cache, capsys):
    # one kernel (the whole sm_90a set is test_build_check_sm90a_passes'): its rows only, the others not listed
    assert build_check.main_build_check(types.SimpleNamespace(arch=["sm_90a"], kernel=["gemm_sm90.cu"])) == 0
    out = capsys.readouterr().out
    assert "sm_90a: ok" in out and "HGMMA" in out and "gemm_sm90.cu" in out and "attention_sm90.cu" not in out
    assert build_check.main_build_check(types.SimpleNamespace(arch=["sm_90a"], kernel=["nope.cu"])) == 2
    assert "no kernel source ['nope.cu']" in capsys.readouterr().err


def test_build_check_other_arch_is_skipped_not_failed():
    rows, ok = build_check.build_check("sm_80")  # no kernel targets sm_80 (sm_100a/sm_120a: test_cuda_build_blackwell)
    assert ok
    assert all(r["status"].startswith("skipped") for r in rows)


@pytest.mark.skipif(not build._nvrtc_candidates(), reason="no libnvrtc (pip install nvidia-cuda-nvrtc)")
def test_nvrtc_builds_the_same_kernel(cache, monkeypatch):
    """The NVRTC path (no nvcc on the user's machine) compiles the kernel with the same markers and no spills."""
    monkeypatch.setenv("TILEWRIGHT_CUDA_COMPILER", "nvrtc")
    tc = build.toolchain()
    if tc is None or tc.kind != "nvrtc":
        pytest.skip("libnvrtc present but not loadable")
    b = build.compile_source(cg.SOURCE, "sm_90a", cg.VARIANTS[cg.DEFAULT_VARIANT].defines(False, True, False),
                             tc=tc)
    info = build_check.parse_ptxas(b.log)
    assert info["spills"] in (0, None)
    text = build_check.sass(b.cubin)
    if text is not None:
        assert "HGMMA" in text and "USETMAXREG" in text and "UTMALDG" in text


@needs_compiler
@pytest.mark.parametrize("source", ["gemm_sm90.cu", "rstd_gemm_sm90.cu", "gemm_sumsq_sm90.cu"])
def test_the_192_column_tile_builds_with_its_wgmma_width(cache, source):
    """coop128x192s4 (wave balancing) in the plain GEMM and its two switched builds: the mainloop's wgmma is
    m64n192k16 (HGMMA.64x192x16 in SASS, no other width), 0 spills, within the shared memory limit; the RMSNorm
    prologue's build, which has no register-A wgmma of that width, refuses it at compile time."""
    v = cg.VARIANTS["coop128x192s4"]
    assert v.smem_bytes() <= cg.SMEM_LIMIT
    b = build.compile_source(build.SOURCE_DIR / source, "sm_90a", v.defines(False, True, False, 0, True, True))
    assert build_check.parse_ptxas(b.log)["spills"] in (0, None)
    text = build_check.sass(b.cubin)
    if text is not None:
        assert set(re.findall(r"HGMMA\.(\d+x\d+x\d+)", text)) == {"64x192x16"}


@needs_compiler
def test_the_192_column_tile_refuses_the_rmsnorm_prologue(cache):
    v = cg.VARIANTS["coop128x192s4"]
    with pytest.raises(build.CompileError, match="192-column tiles"):
        build.compile_source(cg.SOURCE, "sm_90a", {**v.defines(False, True, False), "TW_NORM_A": 1})


def test_the_192_column_tile_is_picked_where_the_waves_pay(monkeypatch):
    """gemm_sm90.wave_balanced: the 128 x 192 tile where ceil(tiles / SMs) x columns beats the default's by the
    margin and the default has two waves or more - the measured rows of its A/B, on 132 SMs, picked as measured
    (3000 x 5120 and 6000 x 5120 faster with it; 4096^3, 8192 x 4096, 16384 x 1024 slower) -, the SM count taken into
    account (6000 x 5120 on 114 SMs: 9 waves of 940 tiles against 12 of 1269, no gain), the small-M tile at M <= 256,
    under two waves the default, and the user's named variant always (also the switched builds, which follow this
    pick)."""
    from tilewright.cuda_fallback import gemm_sumsq_sm90, rstd_gemm_sm90

    monkeypatch.delenv("TILEWRIGHT_CUDA_GEMM_VARIANT", raising=False)
    wave, default = cg.VARIANTS[cg.WAVE_VARIANT], cg.VARIANTS[cg.DEFAULT_VARIANT]
    for M, N in ((3000, 5120), (6000, 5120), (3000, 5000)):
        assert cg.pick_variant(M, N, 4096, sms=132) is wave, (M, N)
    for M, N in ((3000, 4096), (8192, 4096), (8192, 6144), (2048, 14336), (16384, 3072), (16384, 11264),
                 (16384, 2048), (4096, 4096), (16384, 1024)):
        assert cg.pick_variant(M, N, 4096, sms=132) is default, (M, N)
    assert cg.pick_variant(6000, 5120, 4096, sms=114) is default
    assert cg.pick_variant(1000, 3000, 1536, sms=132) is default  # 96 tiles: under two waves
    assert cg.pick_variant(256, 5120, 4096, sms=132).name == cg.SMALL_M_VARIANT
    assert cg.pick_variant(3000, 5120, 4096).name == wave.name  # no GPU here: the reference 132 SMs
    assert rstd_gemm_sm90.pick_variant(3000, 5120, 4096).name == wave.name + "-rstd"
    assert gemm_sumsq_sm90.partial_shape(3000, 5120, 4096) == (27, 3000)  # 5120 / 192 tile columns
    monkeypatch.setenv("TILEWRIGHT_CUDA_GEMM_VARIANT", cg.DEFAULT_VARIANT)  # the user's choice wins
    assert cg.pick_variant(3000, 5120, 4096, sms=132) is default
    assert cg.WAVE_VARIANT not in cg.AB_ONLY and wave.smem_bytes() <= cg.SMEM_LIMIT


def test_parse_ptxas_report():
    log = ("ptxas info    : Function properties for k\n"
           "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 168 registers, 1024 bytes smem, used 16 barriers\n")
    assert build_check.parse_ptxas(log) == {"regs": 168, "spills": 16, "stack": 8, "static_smem": 1024}
    assert build_check.PERF_WARNINGS.search("ptxas info (C7508) Potential Performance Loss: 'setmaxnreg' ignored")


@needs_compiler
def test_setmaxnreg_dropped_without_min_blocks_is_caught(cache, tmp_path):
    """The check that guards __launch_bounds__(384, 1): with no register cap at entry ptxas drops setmaxnreg (C7508)
    and build-check must flag it."""
    src = (build.SOURCE_DIR / cg.SOURCE).read_text().replace("__launch_bounds__(384, 1)", "")
    bad = tmp_path / "bad.cu"
    bad.write_text(src.replace('#include "ptx/', f'#include "{build.SOURCE_DIR}/ptx/'))
    b = build.compile_source(bad, "sm_90a", cg.VARIANTS[cg.DEFAULT_VARIANT].defines(False, True, False))
    text = build_check.sass(b.cubin)
    assert build_check.PERF_WARNINGS.search(b.log), b.log
    assert text is None or "USETMAXREG" not in text


# ------------------------------------------------------------------------------------------------ cache
@needs_compiler
def test_cache_hit_and_keying(cache):
    defines = cg.VARIANTS[cg.DEFAULT_VARIANT].defines(False, True, False)
    build._memo.clear()
    first = build.compile_source(cg.SOURCE, "sm_90a", defines)
    build._memo.clear()  # a new process: only the disk cache is left
    second = build.compile_source(cg.SOURCE, "sm_90a", defines)
    assert second.cached and second.key == first.key and second.cubin == first.cubin
    assert second.path.parent == cache / "cuda"
    other = build.compile_source(cg.SOURCE, "sm_90a", {**defines, "TW_ACT": 1})
    assert other.key != first.key and not other.cached


def test_cache_key_covers_source_headers_arch_flags_and_compiler(tmp_path, monkeypatch):
    tc = build.Toolchain("nvcc", "/x/nvcc", "13.0.88")
    src = build.SOURCE_DIR / cg.SOURCE
    base = build.cache_key(src, "sm_90a", ("-DA=1",), tc)
    assert base == build.cache_key(src, "sm_90a", ("-DA=1",), tc)
    assert base != build.cache_key(src, "sm_100a", ("-DA=1",), tc)
    assert base != build.cache_key(src, "sm_90a", ("-DA=2",), tc)
    assert base != build.cache_key(src, "sm_90a", ("-DA=1",), build.Toolchain("nvcc", "/x/nvcc", "13.1.0"))
    assert base != build.cache_key(src, "sm_90a", ("-DA=1",), build.Toolchain("nvrtc", "/x/lib", "13.0.88"))
    assert base == build.cache_key(src, "sm_90a", ("-DA=1",), build.Toolchain("nvcc", "/other/nvcc", "13.0.88"))
    # editing any ptx/ header invalidates every kernel that could include it
    copy = tmp_path / "ptx"
    shutil.copytree(build.PTX_DIR, copy)
    monkeypatch.setattr(build, "PTX_DIR", copy)
    assert build.cache_key(src, "sm_90a", ("-DA=1",), tc) == base
    (copy / "mbarrier.cuh").write_text((copy / "mbarrier.cuh").read_text() + "\n// edited\n")
    assert build.cache_key(src, "sm_90a", ("-DA=1",), tc) != base


def test_prebuild_compiles_the_builds_calls_ask_for_in_parallel_and_then_runs_nothing(tmp_path, monkeypatch):
    """runtime.build.prebuild (a self-check's problems' builds, compiled concurrently before the problems run): each
    call stops at its first compile_source - nothing after it runs, an ``except Exception`` around it does not
    swallow the stop - the distinct uncached builds compile at once, a call failing before its build is skipped, a
    failing build is left for its call; the calls afterwards find their builds cached."""
    import threading
    import time

    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_memo", {})
    src = tmp_path / "k.cu"
    src.write_text("// a kernel\n")
    tc = build.Toolchain("nvcc", "/fake/nvcc", "13.0.88")
    monkeypatch.setattr(build, "toolchain", lambda: tc)
    running, peak, compiled = [0], [0], []
    lock = threading.Lock()

    def fake_nvcc(tc, source, arch, flags, out):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
            compiled.append(flags)
        if "-DBAD=1" in flags:
            raise build.CompileError("bad build")
        out.write_bytes(b"cubin")
        return "log"

    monkeypatch.setattr(build, "_compile_nvcc", fake_nvcc)
    launched = []

    def call(i, bad=False):
        def run():
            try:  # (a launcher's fallback around its build must not take the stop for a failure)
                build.compile_source(src, "sm_90a", {"V": i, **({"BAD": 1} if bad else {})})
            except Exception:
                launched.append(("fallback", i))
                return
            launched.append(i)
        return run

    def fails_first():
        raise ValueError("bad input, before any build")

    calls = [call(0), call(1), call(2), call(1), fails_first, call(3, bad=True)]
    build.prebuild(calls)
    assert launched == []  # nothing ran past its build
    assert len(compiled) == 4 and peak[0] >= 2  # the four distinct builds, concurrently (one failing)
    for c in calls[:4]:
        c()
    assert launched == [0, 1, 2, 1] and len(compiled) == 4  # all cached now
    calls[-1]()
    assert launched[-1] == ("fallback", 3) and len(compiled) == 5  # the failed build: compiled again by its call


def test_no_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(build, "toolchain", lambda: None)
    with pytest.raises(build.CudaUnavailable, match="no CUDA compiler"):
        build.compile_source(cg.SOURCE, "sm_90a")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_driver_without_gpu_is_a_clear_error():
    with pytest.raises(build.CudaUnavailable, match="CUDA device"):
        launch.driver()


def test_try_launch_never_raises(fresh_guard, failing_compiler):
    fresh_guard(cg.GUARD)
    a = torch.randn(256, 256, dtype=torch.bfloat16)
    b = torch.randn(256, 256, dtype=torch.bfloat16)
    out = torch.empty(256, 256, dtype=torch.bfloat16)
    with pytest.warns(RuntimeWarning, match="Triton serves"):
        assert cg.try_launch(a, b, out) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cg.try_launch(a, b, out) is False  # disabled now: declines silently, one warning in total
    assert cg.try_launch(a, b, out, preact=out) is False


def test_try_launch_swiglu_never_raises_and_leaves_the_plain_gemm_on(fresh_guard, failing_compiler):
    """A failing gated-linear launch disables that build alone (its own guard), with one warning naming what serves
    instead; the plain GEMM's switch stays as it was."""
    fresh_guard(cg.GLU_GUARD)
    fresh_guard(cg.GUARD)
    a = torch.randn(256, 256, dtype=torch.bfloat16)
    b = torch.randn(512, 256, dtype=torch.bfloat16).t()
    out = torch.empty(256, 256, dtype=torch.bfloat16)
    with pytest.warns(RuntimeWarning, match="the unfused GEMM \\+ SwiGLU serves"):
        assert cg.try_launch_swiglu(a, b, out) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cg.try_launch_swiglu(a, b, out) is False
    assert cg.GLU_GUARD.disabled and not cg.GUARD.disabled


# ------------------------------------------------------------------------------------------------ constraints
def test_constraints():
    bf = torch.bfloat16
    a = torch.randn(64, 128, dtype=bf)
    b = torch.randn(128, 64, dtype=bf)
    assert cg.constraints(a, b)[0]
    assert cg.constraints(a, torch.randn(64, 128, dtype=bf).t())[0]  # nn.Linear weight, K-major B
    assert cg.constraints(torch.randn(128, 64, dtype=bf).t(), b)[0]  # M-major A
    ok, why = cg.constraints(a.float(), b.float())
    assert not ok and "float32" in why
    ok, why = cg.constraints(torch.randn(64, 130, dtype=bf)[:, :127], torch.randn(127, 64, dtype=bf))
    assert not ok and "16 bytes" in why
    ok, why = cg.constraints(a, torch.randn(128, 66, dtype=bf)[:, 1:65])
    assert not ok and "16-byte aligned" in why
    ok, why = cg.constraints(a, torch.randn(60, 128, dtype=bf).t())  # K-major B, but 60-wide output rows
    assert not ok and "N = 60" in why
    ok, why = cg.constraints(a, b, residual=torch.randn(1, 64, 64))
    assert not ok and "residual dtype" in why
    ok, why = cg.constraints(a[:, ::2], torch.randn(64, 64, dtype=bf))
    assert not ok and "unit stride" in why
    # a size-1 dim's stride does not matter (M = 1 decode row with an odd K stride)
    assert cg.constraints(torch.randn(1, 72, dtype=bf), torch.randn(72, 64, dtype=bf))[0]


# ------------------------------------------------------------------------------------------------ router
@pytest.fixture
def fake_gpu(monkeypatch, swap_record, fake_compiler):
    """Pretend CPU tensors live on a GPU of a chosen capability, with a compiler and a passing self-check."""
    state = {"cap": (9, 0), "self_check": (True, "pp128x128s4: self-check passed"), "calls": 0}

    def self_check(*tensors):
        state["calls"] += 1
        return state["self_check"]

    monkeypatch.setattr(router, "_capability", lambda device: state["cap"])
    swap_record("gemm", "gemm_sm90", ready=self_check)
    monkeypatch.delenv("TILEWRIGHT_BACKEND", raising=False)
    monkeypatch.delenv("TILEWRIGHT_CUDA", raising=False)
    return state


def _big(dtype=torch.bfloat16, M=16384, N=4096, K=4096):  # in the win region (>= 69 GFLOP)
    return torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)


def test_cuda_is_a_backend():
    assert "cuda" in router.BACKENDS
    assert router.PREFERENCE["gemm"][0] == "cuda"
    with router.use_backend("cuda"):
        pass


def test_router_sm90_large_bf16_goes_to_cuda(fake_gpu):
    a, b = _big()
    d = router.decide("gemm", a, b, None, None)
    assert d.backend == "cuda", str(d)
    assert fake_gpu["calls"] == 1
    assert router.decide("gemm", *_big(torch.float16), None, None).backend == "cuda"


@pytest.mark.parametrize("cap", [(8, 0), (8, 9), (11, 0)])  # sm_100 / sm_120: test_cuda_build_blackwell.py
def test_router_other_capabilities_fall_back(fake_gpu, cap):
    fake_gpu["cap"] = cap
    d = router.decide("gemm", *_big(), None, None)
    assert d.backend != "cuda"
    assert f"sm_{cap[0]}{cap[1]}" in d.reasons[0], str(d)
    assert fake_gpu["calls"] == 0  # never self-checked where no kernel exists
    with pytest.raises(ValueError, match=f"sm_{cap[0]}{cap[1]}"):
        router.decide("gemm", *_big(), None, None, backend="cuda")


def test_router_no_gpu(fake_gpu, monkeypatch):
    monkeypatch.setattr(router, "_capability", lambda device: None)
    d = router.decide("gemm", *_big(), None, None)
    assert d.backend != "cuda" and "needs an NVIDIA GPU" in d.reasons[0]


def test_router_no_gpu_real_capability():
    d = router.decide("gemm", *_big(), None, None)  # real _capability: CPU tensors
    assert d.backend != "cuda" and "needs an NVIDIA GPU" in d.reasons[0]


def test_router_constraint_failures(fake_gpu):
    bf = torch.bfloat16
    d = router.decide("gemm", *_big(torch.float32), None, None)
    assert d.backend != "cuda" and "float32" in d.reasons[0]
    a = torch.randn(2048, 2047, dtype=bf)  # row stride 2047 * 2 B: not TMA-able
    d = router.decide("gemm", a, torch.randn(2047, 2048, dtype=bf), None, None)
    assert d.backend != "cuda" and "16 bytes" in d.reasons[0], str(d)
    assert fake_gpu["calls"] == 0


def test_router_decode_shapes_prefer_triton(fake_gpu):
    a, b = _big(M=16, N=4096, K=4096)
    d = router.decide("gemm", a, b, None, None)
    assert d.backend == "triton" and "win region" in d.reasons[0], str(d)
    assert router.decide("gemm", a, b, None, None, backend="cuda").backend == "cuda"  # forcing still works


def test_router_toolchain_missing(fake_gpu, monkeypatch):
    monkeypatch.setattr(build, "toolchain", lambda: None)
    d = router.decide("gemm", *_big(), None, None)
    assert d.backend != "cuda" and "no CUDA compiler" in d.reasons[0]


def test_router_self_check_failure_falls_back(fake_gpu):
    fake_gpu["self_check"] = (False, "self-check failed for pp128x128s4: relative error 0.5")
    d = router.decide("gemm", *_big(), None, None)
    assert d.backend == "triton" and "self-check failed" in d.reasons[0]
    with pytest.raises(ValueError, match="self-check failed"):
        router.decide("gemm", *_big(), None, None, backend="cuda")


def test_router_env_switch(fake_gpu, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CUDA", "0")
    d = router.decide("gemm", *_big(), None, None)
    assert d.backend != "cuda" and "TILEWRIGHT_CUDA=0" in d.reasons[0]


def test_router_explain_mentions_cuda(fake_gpu):
    text = router.explain("gemm", *_big(), None, None)
    assert "backend=cuda" in text and "self-check passed" in text


@pytest.mark.parametrize("shape,expect", [
    ((4096, 4096, 4096), True), ((1024, 4096, 4096), False), ((8192, 8192, 8192), True), ((8192, 6144, 4096), True),
    ((8192, 4096, 4096), True),
    ((8192, 28672, 4096), True), ((8192, 4096, 14336), True), ((8192, 10240, 8192), True),
    ((8192, 8192, 28672), True), ((16, 4096, 4096), False), ((128, 4096, 4096), False), ((3000, 5000, 4000), False),
], ids=str)
def test_router_default_per_suite_shape(fake_gpu, shape, expect):
    """The automatic choice on the benchmark suite follows the measurements (faster of Triton and CUDA end to end:
    1024 x 4096 x 4096, 34 GFLOP, is below the floor gemm_sm90.PREFER_MIN_FLOPS = 2^36; 4096^3 is above it)."""
    M, N, K = shape
    a = torch.empty(M, K, dtype=torch.bfloat16)
    b = torch.empty(K, N, dtype=torch.bfloat16)
    assert (router.decide("gemm", a, b, None, None).backend == "cuda") == expect


# ---------------------------------------------------------------------------------------- residual win region
def test_residual_region_follows_the_measured_rows(monkeypatch):
    """A residual repeated over the batch (a pos_embed) and one of a row per output row (with RESIDUAL_ROWS, the
    default: measured faster than Triton on the model benches' residual GEMMs) take the sm_90a kernel in its region;
    RESIDUAL_ROWS off keeps the latter on Triton; no residual: the plain region."""
    assert cg.RESIDUAL_ROWS and cg.preferred(16384, 2048, 2048, "rows")[0]
    assert cg.preferred(16384, 1024, 4096, "rows")[0] and not cg.preferred(16384, 1000, 4096, "rows")[0]
    assert not cg.preferred(16384, 1024, 1024, "rows")[0]  # (the host-bound floor holds as ever)
    monkeypatch.setattr(cg, "RESIDUAL_ROWS", False)
    assert not cg.preferred(16384, 2048, 2048, "rows")[0]
    assert "Triton" in cg.preferred(16384, 2048, 2048, "rows")[1]
    assert cg.preferred(16384, 2048, 2048, "repeated")[0]
    assert cg.preferred(32768, 1024, 1536, "repeated")[0]  # (the region's FLOPs floor holds as ever)
    assert cg.preferred(32768, 1024, 1536, False)[0]
    assert not cg.preferred(32768, 1000, 1536, "repeated")[0]  # outside the region (N % 128)


def test_residual_kind_of_the_op_layers_view():
    from tilewright.cuda_fallback.runtime.gemm_common import residual_kind

    assert residual_kind(None) is False
    assert residual_kind(torch.randn(2, 8, 16)) == "rows"
    assert residual_kind(torch.randn(1, 8, 16)) == "rows"
    assert residual_kind(torch.randn(8, 16).expand(2, 8, 16)) == "repeated"  # pos_embed over a batch of 2
    assert residual_kind(torch.randn(16).expand(2, 8, 16)) == "repeated"  # one row for all


def test_residual_map_rows():
    """Which residual layouts the sm_90a kernel reads through a TMA map (and with how many rows), which by element
    loads: the map needs unit columns, 16-byte base and row stride, rows that never repeat within a tile."""
    v = cg.VARIANTS["coop128x256s3"]  # 64 rows per consumer tile
    M, N = 4096, 1024
    assert cg.residual_map_rows(M, N, v, 1 << 20, (M * N, N, 1), M) == M  # (1, M, N)
    assert cg.residual_map_rows(M, N, v, 1 << 20, (1024 * N, N, 1), 1024) == M  # batches back to back
    assert cg.residual_map_rows(M, N, v, 1 << 20, (0, N, 1), 1024) == 1024  # pos_embed over the batch
    assert cg.residual_map_rows(M, N, v, 1 << 20, (0, N, 1), 96) == 0  # a period inside a tile
    assert cg.residual_map_rows(M, N, v, 1 << 20, (0, 0, 1), 1024) == 0  # one row for all
    assert cg.residual_map_rows(M, N, v, (1 << 20) + 2, (M * N, N, 1), M) == 0  # base off 16 bytes
    assert cg.residual_map_rows(M, N, v, 1 << 20, (M * (N + 1), N + 1, 1), M) == 0  # odd row stride
    assert cg.residual_map_rows(M, N, v, 1 << 20, (M * N, 1, M), M) == 0  # transposed
    assert cg.residual_map_rows(M, N, v, 1 << 20, (2048 * N * 2, N, 1), 2048) == 0  # batches with a gap
    assert cg.residual_map_rows(M, N, v, 0, (M * N, N, 1), M) == 0  # no residual


def test_a_fused_residual_takes_the_residual_tile(monkeypatch):
    """A launch with a fused residual takes RESIDUAL_VARIANT (GemmFamily.residual_launch) after that variant's own
    self-check - over the static pick and over a tuned plain winner; without a residual the plain choice stays; a
    failed self-check or the user's named variant (TILEWRIGHT_CUDA_GEMM_VARIANT) keeps the plain choice."""
    from tilewright.autotune import cache

    a = torch.empty(8192, 4096, dtype=torch.bfloat16)
    b = torch.empty(4096, 4096, dtype=torch.bfloat16)
    r = torch.empty(1, 8192, 4096, dtype=torch.bfloat16)
    out = torch.empty(8192, 4096, dtype=torch.bfloat16)
    residual_tile = cg.VARIANTS[cg.RESIDUAL_VARIANT]
    assert cg.pick_variant(8192, 4096, 4096) is not residual_tile  # (else this test shows nothing)
    checked, failing = [], set()
    monkeypatch.setattr(cg.FAMILY.guard, "check", lambda device, name, key, run, fallback="": (
        checked.append(name), (name not in failing, "x"))[1])
    launched = []
    monkeypatch.setattr(cg.FAMILY.guard, "run", lambda fn, *args, **kw: launched.append(kw) or True)
    monkeypatch.setattr(cache, "lookup", lambda *args: None)
    assert cg.FAMILY.try_launch(a, b, out, residual=r)
    assert launched[-1]["variant"] is residual_tile and checked == [residual_tile.name]
    assert cg.FAMILY.try_launch(a, b, out)  # no residual: the static pick (no variant keyword)
    assert "variant" not in launched[-1]
    record = {"winner": "cuda", "backends": {"cuda": {"config": {"variant": "coop128x192s4", "tile_order": "row_major",
                                                                 "group": 16}}}}
    monkeypatch.setattr(cache, "lookup", lambda *args: record)
    assert cg.FAMILY.try_launch(a, b, out, residual=r)  # over a tuned plain winner, its tile order with it
    assert launched[-1] == {"bias": None, "residual": r, "activation": None, "variant": residual_tile}
    assert cg.FAMILY.try_launch(a, b, out)
    assert launched[-1]["variant"].name == "coop128x192s4"
    failing.add(residual_tile.name)  # the residual tile's self-check fails: the plain choice
    assert cg.FAMILY.residual_launch(a, b, r) == {}
    assert cg.FAMILY.try_launch(a, b, out, residual=r) and launched[-1]["variant"].name == "coop128x192s4"
    failing.clear()
    monkeypatch.setenv("TILEWRIGHT_CUDA_GEMM_VARIANT", "coop256x128s3")  # the user's named variant wins
    assert cg.FAMILY.residual_launch(a, b, r) == {}


def test_a_tuned_cuda_winner_is_what_the_launch_runs(monkeypatch):
    """``tilewright tune``'s winning variant / tile order for a shape (the autotune cache's "cuda" record) is what the
    op layer's launch takes (GemmFamily.tuned_launch), after that variant's own self-check; the static pick when
    Triton won, when the record names a variant this build lacks or one not yet run on a GPU (AB_ONLY), when the
    winner's self-check fails, or when the user names a variant (TILEWRIGHT_CUDA_GEMM_VARIANT)."""
    from tilewright.autotune import cache

    a = torch.empty(3000, 4096, dtype=torch.bfloat16)
    b = torch.empty(4096, 5120, dtype=torch.bfloat16)
    record = {"winner": "cuda", "backends": {"cuda": {"config": {"variant": "pp128x128s5", "tile_order": "row_major",
                                                                 "group": 16}}}}
    monkeypatch.setattr(cache, "lookup", lambda op, device, dtype, M, N, K: record)
    checked, verdict = [], [True]
    monkeypatch.setattr(cg.FAMILY.guard, "check",
                        lambda device, name, key, run, fallback="": (checked.append(name), (verdict[0], "x"))[1])
    assert cg.FAMILY.tuned_launch(a, b) == {"variant": cg.VARIANTS["pp128x128s5"], "tile_order": "row_major",
                                            "group": 16}
    assert checked == ["pp128x128s5"]
    launched = []
    monkeypatch.setattr(cg.FAMILY.guard, "run", lambda fn, *args, **kw: launched.append(kw) or True)
    assert cg.FAMILY.try_launch(a, b, torch.empty(3000, 5120, dtype=torch.bfloat16))
    assert launched[-1]["variant"].name == "pp128x128s5" and launched[-1]["tile_order"] == "row_major"
    verdict[0] = False  # the winner's self-check fails: the static pick
    assert cg.FAMILY.tuned_launch(a, b) == {}
    verdict[0] = True
    record["backends"]["cuda"]["config"]["variant"] = cg.pick_variant(3000, 5120, 4096).name  # no second check
    checked.clear()
    assert cg.FAMILY.tuned_launch(a, b)["variant"] is cg.pick_variant(3000, 5120, 4096) and checked == []
    for name in ("pp96x96s9", *cg.AB_ONLY):  # a variant this build lacks; one not yet run on a GPU
        record["backends"]["cuda"]["config"]["variant"] = name
        assert cg.FAMILY.tuned_launch(a, b) == {}
    record["backends"]["cuda"]["config"]["variant"] = "pp128x128s5"
    for bad in ({"tile_order": "spiral"}, {"group": 12}, {"group": "16"}):  # a record this build cannot launch
        record["backends"]["cuda"]["config"].update(bad)
        assert cg.FAMILY.tuned_launch(a, b) == {}, bad
        record["backends"]["cuda"]["config"].update({"tile_order": "row_major", "group": 16})
    record["backends"]["cuda"]["config"]["variant"] = "pp128x128s5"
    assert cg.FAMILY.tuned_launch(a, b)["variant"].name == "pp128x128s5"
    monkeypatch.setenv("TILEWRIGHT_CUDA_GEMM_VARIANT", "coop256x128s3")  # the user's named variant wins
    assert cg.FAMILY.tuned_launch(a, b) == {}
    monkeypatch.delenv("TILEWRIGHT_CUDA_GEMM_VARIANT")
    record["winner"] = "triton"
    assert cg.FAMILY.tuned_launch(a, b) == {}
