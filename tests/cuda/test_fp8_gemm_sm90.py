"""CPU tier for the sm_90a FP8 GEMM (fp8_gemm_sm90.cu, the TW_FP8 build of gemm_sm90.cu): its variants' switches,
the promotion compiled into the accurate build, and the operand checks. Numerics: test_fp8_gemm_sm90_gpu.py."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from tilewright.cuda_fallback import build_check
from tilewright.cuda_fallback import fp8_gemm_sm90 as f8
from tilewright.cuda_fallback.runtime import build

needs_compiler = pytest.mark.skipif(build.toolchain() is None, reason="no CUDA compiler (nvcc or NVRTC)")
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def test_variant_switches_follow_the_operands():
    v = f8.ACCURATE_VARIANT.with_operands(1, (2, 1))
    d = v.defines(False, False, True)
    assert (d["TW_FP8"], d["TW_FP8_B"], d["TW_SCALE"], d["TW_FP8_PROMOTE"], d["TW_FP16"]) == (2, 1, 1, 1, 1)
    assert v.name == "coop128x128s6f8-e5m2xe4m3" and f8.FAST_VARIANT.name == "coop128x256s3f8rowfast"
    assert f8.FAST_VARIANT.defines(False, False, False)["TW_FP8_PROMOTE"] == 0
    assert f8.PROMOTE2_VARIANT.name == "coop128x128s6f8rowp2"
    assert f8.FAST_SMALL_M_VARIANT.name == "coop128x128s6f8rowfast" and f8.FAST_SMALL_M_VARIANT.bn == 128
    assert f8.PROMOTE2_VARIANT.defines(False, False, False)["TW_FP8_PROMOTE"] == 2
    # a stage is the 16-bit GEMM's bytes: 128-byte rows of 128 fp8 elements
    assert f8.ACCURATE_VARIANT.smem_bytes() <= f8.gemm_sm90.SMEM_LIMIT


def test_block_scales_ahead_is_a_block_build_switch():
    """TW_FP8_SCALE_AHEAD (block scales copied k-blocks ahead into a shared-memory ring): its own build name and
    macro, absent from every other build's defines (their cache keys stay), both copy distances build-checked, the
    ring's bytes in the launch's shared memory (2 consumers x 2 slots x (64 rows + 4 warps) floats), and dropped for
    other scales; the default block build until session 29 (BLOCK_STAGE_VARIANT is now)."""
    v = f8.BLOCK_AHEAD_VARIANT
    assert v.name == "coop128x128s6f8blka2" and v.defines(False, False, False)["TW_FP8_SCALE_AHEAD"] == 2
    assert all("TW_FP8_SCALE_AHEAD" not in b.defines(False, False, False) for b, *_ in f8.BUILD_CHECK_BUILDS
               if not b.scale_ahead)
    assert {b.name for b, *_ in f8.BUILD_CHECK_BUILDS if b.scale_ahead} == {v.name, "coop128x128s6f8blka1"}
    assert v.smem_bytes() == f8.ACCURATE_VARIANT.smem_bytes() + 2 * 2 * (64 + 4) * 4 <= f8.gemm_sm90.SMEM_LIMIT
    assert v.with_operands(3, (2, 1)).scale_ahead == 2 and v.with_operands(2, (1, 1)) == f8.ACCURATE_VARIANT
    assert f8.ACCURATE_VARIANT.with_operands(3, (1, 1)).scale_ahead == 0  # the register-load block build
    assert f8._default_variant(4096, 2, False) is f8.ACCURATE_VARIANT
    assert f8._default_variant(4096, 2, True) is f8.FAST_VARIANT
    assert f8._default_variant(64, 1, True) is f8.FAST_SMALL_M_VARIANT


def test_block_scales_in_the_stage_is_a_block_build_switch():
    """TW_FP8_SCALE_STAGE (block scales copied into each pipeline stage by a producer warp): its own build name and
    macro, absent from every other build's defines (their cache keys stay), build-checked with and without a bias, the
    stages' scale slots in the launch's shared memory (4 stages x (128 rows + 4) floats; five fit, a sixth would not),
    dropped for other scales; the default block build, with fast accumulation or without (promotion every k-block
    applies the scales)."""
    v = f8.BLOCK_STAGE_VARIANT
    assert v.name == "coop128x128s4f8blkst" and v.defines(False, False, False)["TW_FP8_SCALE_STAGE"] == 1
    assert "TW_FP8_SCALE_AHEAD" not in v.defines(False, False, False)
    assert all("TW_FP8_SCALE_STAGE" not in b.defines(False, False, False) for b, *_ in f8.BUILD_CHECK_BUILDS
               if not b.scale_stage)
    assert sorted(bias for b, _, _, _, _, bias, _ in f8.BUILD_CHECK_BUILDS if b == v) == [False, True]
    four = replace(f8.ACCURATE_VARIANT, stages=4).smem_bytes()
    assert v.smem_bytes() == four + 4 * (128 + 4) * 4 <= f8.gemm_sm90.SMEM_LIMIT
    assert replace(v, stages=5).smem_bytes() <= f8.gemm_sm90.SMEM_LIMIT < replace(v, stages=6).smem_bytes()
    assert v.with_operands(3, (2, 1)).scale_stage == 1 and v.with_operands(2, (1, 1)).scale_stage == 0
    assert f8._default_variant(4096, 3, False) is v and f8._default_variant(4096, 3, True) is v
    assert f8._default_variant(64, 3, True) is v
    rows = {label: markers for label, _, _, markers in f8.build_check_builds()}
    assert rows[f"{v.name} bf16 A:K-major B:K-major bias"] == ("LDGSTS",)


@needs_compiler
def test_accurate_build_promotes_every_k_block(cache):
    """The accurate build adds each k-block's partial tile into the accumulator (64 FADDs a thread per k-block at
    64 x 128 per consumer) after waiting for its wgmmas; the fast build accumulates in the tensor cores."""
    def sass(v):
        return build_check.sass(build.compile_source(f8.SOURCE, "sm_90a", v.defines(False, False, False)).cubin)

    accurate, fast = sass(f8.ACCURATE_VARIANT), sass(f8.FAST_VARIANT)
    assert len(re.findall(r"\bFADD\b", accurate)) >= 64
    assert len(re.findall(r"\bFADD\b", fast)) < 16
    assert re.search(r"QGMMA\.64x128x32\.F32\.E4M3\.E4M3", accurate), "m64n128k32 e4m3 wgmma"
    assert re.search(r"QGMMA\.64x256x32\.F32\.E4M3\.E4M3", fast)


def _kblock(v, bias=False):
    """(ptxas resources, SASS of one consumer k-block: the loop holding the first QGMMA, head to back edge)."""
    b = build.compile_source(f8.SOURCE, "sm_90a", v.defines(False, False, False, 0, bias))
    ops = [(int(m.group(1), 16), m.group(2).strip())
           for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", build_check.sass(b.cubin))]
    first = next(i for i, (_, op) in enumerate(ops) if op.startswith("QGMMA"))
    for i in range(first, len(ops)):
        back = re.search(r"\bBRA (0x[0-9a-f]+)", ops[i][1])
        if back and int(back.group(1), 16) < ops[first][0]:
            return build_check.parse_ptxas(b.log), [op for a, op in ops if int(back.group(1), 16) <= a <= ops[i][0]]
    raise AssertionError("no k-loop around the QGMMAs")


def _window(body):
    """The instructions between the k-block's last QGMMA and its wgmma wait."""
    last = max(i for i, op in enumerate(body) if op.startswith("QGMMA"))
    return body[last + 1:next(i for i in range(last, len(body)) if body[i].startswith("WARPGROUP.DEPBAR"))]


def _vector(ops):
    """``ops`` less the uniform-datapath ones (U..., predicated or not): the ring counter's stage index and
    empty-barrier address, which ptxas puts between the last QGMMA and the wgmma wait since the descriptors are
    uniform adds (gemm_sm90.cu's header, descriptors)."""
    return [op for op in ops if not re.sub(r"^@!?U?P\w+\s+", "", op).startswith(("U", "VOTEU"))]


def _qgmma_span(body):
    """Instructions from the k-block's first QGMMA to its last."""
    q = [i for i, op in enumerate(body) if op.startswith("QGMMA")]
    return q[-1] - q[0]


@needs_compiler
@pytest.mark.parametrize("ahead", [1, 2])
def test_block_scales_ahead_wait_for_the_copy_group_not_the_newest_load(cache, ahead):
    """The register-load block build loads its scales with LDGs between the k-block's QGMMAs and multiplies them just
    before the WARPGROUP.DEPBAR, so each promotion waits for that k-block's load. The copied-ahead build issues no
    LDG in its k-block: it reads the scales from shared memory after one DEPBAR.LE SB0, D - 1 (cp.async.wait_group
    D - 1: the group copied D k-blocks ago, leaving the younger ones in flight) at the k-block's top, before its first
    QGMMA."""
    register = _kblock(f8.ACCURATE_VARIANT.with_operands(3, (1, 1)))[1]
    first = next(i for i, op in enumerate(register) if op.startswith("QGMMA"))
    mainloop = register[first:next(i for i in range(first, len(register))
                                   if register[i].startswith("WARPGROUP.DEPBAR"))]
    assert any(op.startswith("LDG") for op in mainloop) and mainloop[-1].startswith("FMUL")
    body = _kblock(replace(f8.BLOCK_AHEAD_VARIANT, scale_ahead=ahead))[1]
    copy_waits = [i for i, op in enumerate(body) if op.startswith("DEPBAR.LE SB0")]
    assert [body[i] for i in copy_waits] == [f"DEPBAR.LE SB0, 0x{ahead - 1}"]
    assert copy_waits[0] < next(i for i, op in enumerate(body) if op.startswith("QGMMA"))
    assert not any(op.startswith("LDG.") for op in body) and any("LDGSTS" in op for op in body)


@needs_compiler
@pytest.mark.parametrize("ahead", [1, 2])
def test_block_scales_ahead_leave_the_wgmma_wait_window_empty(cache, ahead):
    """The copied-ahead block scales are read at the k-block's top (gemm_sm90.cu's header: the window between the
    last wgmma and its wait takes the other consumer's issue slots): spill-free, QGMMA as every FP8 build, one 8-byte
    LDS for a lane's two rows, a predicated cp.async (no divergent branch), and nothing between the last QGMMA and
    the wgmma wait but the ring counter's uniform instructions - as in the row-wise build -, after which come the 64
    FFMAs and no FMUL (the products are formed before the wait); fewer instructions than the register-load k-block.
    The build-check rows (with a bias slice beside the ring) spill-free too."""
    v = replace(f8.BLOCK_AHEAD_VARIANT, scale_ahead=ahead)
    (info, body), (_, row) = _kblock(v), _kblock(f8.ACCURATE_VARIANT)
    assert info["spills"] == 0 and info["stack"] == 0
    assert sum(op.startswith("QGMMA.64x128x32.F32.E4M3.E4M3") for op in body) == 4
    assert _vector(_window(body)) == [] and _vector(_window(row)) == [], (_window(body), _window(row))
    assert sum(op.startswith("LDS.64 ") for op in body) == 1 and any("LDGSTS" in op for op in body)
    assert not any(op.startswith(("BSSY", "LDG.")) for op in body)
    wait = next(i for i, op in enumerate(body) if op.startswith("WARPGROUP.DEPBAR"))
    assert sum(op.startswith("FFMA ") for op in body[wait:]) == 64
    assert not any(op.startswith("FMUL") for op in body[wait:])
    assert len(body) < len(_kblock(f8.ACCURATE_VARIANT.with_operands(3, (1, 1)))[1])
    info, _ = _kblock(v, bias=True)
    assert info["spills"] == 0 and info["stack"] == 0


@needs_compiler
def test_block_scales_in_the_stage_leave_the_consumer_only_loads_and_multiplies(cache):
    """With the block scales copied into the stage by the producer warpgroup (TW_FP8_SCALE_STAGE), a consumer k-block
    does no copy work: no LDGSTS, copy-group wait (DEPBAR) or commit (LDGDEPBAR), no warp barrier, no global load -
    one LDS.64 (its two rows), one LDS (scale_b) and two FMULs, nothing between the last QGMMA and the wgmma wait,
    the 64 FFMAs after it and no FMUL there; fewer instructions than the copied-ahead k-block, within 8 of the
    row-wise one; every consumer thread arrives on the empty barrier (one unpredicated arrive). The copies are the
    producer side's: LDGSTS and the counted cp.async arrival (ARRIVES.LDGSTSBAR...ARVCNT: .noinc). Spill-free with
    and without a bias (the bias build's window holds the bias slice's copy branch, as every build with a bias)."""
    v = f8.BLOCK_STAGE_VARIANT
    (info, body), (_, row), (_, ahead) = _kblock(v), _kblock(f8.ACCURATE_VARIANT), _kblock(f8.BLOCK_AHEAD_VARIANT)
    counts = f"k-block: {len(body)} instructions (row-wise {len(row)}, copied ahead {len(ahead)})"
    assert info["spills"] == 0 and info["stack"] == 0, (info, counts)
    assert sum(op.startswith("QGMMA.64x128x32.F32.E4M3.E4M3") for op in body) == 4, counts
    assert _window(body) == [], (_window(body), counts)
    assert not any(op.startswith(("LDGSTS", "LDGDEPBAR", "DEPBAR", "WARPSYNC", "LDG.", "BSSY")) for op in body), counts
    assert [sum(op.startswith(f"{o} ") for op in body) for o in ("LDS.64", "LDS", "FMUL")] == [1, 1, 2], counts
    wait = next(i for i, op in enumerate(body) if op.startswith("WARPGROUP.DEPBAR"))
    assert sum(op.startswith("FFMA ") for op in body[wait:]) == 64 and not any(
        op.startswith("FMUL") for op in body[wait:]), counts
    arrives = [op for op in body if "SYNCS.ARRIVE" in op]
    assert len(arrives) == 1 and arrives[0].startswith("SYNCS.ARRIVE"), (arrives, counts)
    assert len(body) < len(ahead) and len(body) <= len(row) + 8, counts
    b = build.compile_source(f8.SOURCE, "sm_90a", v.defines(False, False, False))
    sass = build_check.sass(b.cubin)
    assert "LDGSTS" in sass and re.search(r"ARRIVES\.LDGSTSBAR\.64\.ARVCNT", sass), counts
    info, _ = _kblock(v, bias=True)
    assert info["spills"] == 0 and info["stack"] == 0, info


@needs_compiler
@pytest.mark.parametrize("name, most, span", [("ACCURATE_VARIANT", 110, 16), ("BLOCK_STAGE_VARIANT", 116, 24)])
def test_kblock_descriptors_are_uniform_adds(cache, name, most, span):
    """The consumer builds its stage-0 descriptors once and advances them by one uniform add a wgmma, its warpgroup
    index made warp-uniform by a shuffle (gemm_sm90.cu's header, descriptors): no descriptor arithmetic in vector
    registers (no R2UR), the k-block's four QGMMAs close together, spill-free within the 168 registers. Measured
    (nvcc 13.0, no bias), k-block instructions and first-to-last QGMMA span: row-wise 107 / 15 (140 / 36 with the
    descriptors built per wgmma from the per-thread row offset), block scales in the stages 112 / 21 (144 / 38). On
    the H200 this took the row-wise build from 0.91-0.94x cuBLASLt to 0.97-1.00x (perf/LOG.md, session 29)."""
    info, body = _kblock(getattr(f8, name))
    counts = f"k-block: {len(body)} instructions, QGMMA span {_qgmma_span(body)}"
    assert info["spills"] == 0 and info["stack"] == 0 and info["regs"] <= 168, (info, counts)
    assert sum(op.startswith("QGMMA.64x128x32.F32.E4M3.E4M3") for op in body) == 4, counts
    assert not any(op.startswith("R2UR") for op in body), counts
    assert len(body) <= most and _qgmma_span(body) <= span, counts


def _operands(M=256, N=512, K=1024, fa=E4M3, fb=E4M3):
    a = torch.randn(M, K).to(fa)
    b = torch.randn(N, K).to(fb).t()
    return a, b, torch.rand(M, 1) + 0.5, torch.rand(1, N) + 0.5


def test_constraints_accept_scaled_mm_operands():
    a, b, sa, sb = _operands()
    assert f8.constraints(a, b, sa, sb)[0]
    assert f8.constraints(a, b, torch.tensor(0.5), torch.tensor(2.0))[0]
    a, b, sa, sb = _operands(fa=E5M2)
    assert f8.constraints(a, b, sa, sb, torch.randn(512).to(torch.float16), torch.float16)[0]


@pytest.mark.parametrize("case, needle", [
    ("bf16 operands", "float8"), ("row-major b", "K-major"), ("K % 16", "16-byte"), ("N % 8", "N = 20"),
    ("fp16 scales", "scale_a: torch.float16, the kernel reads float32"), ("block scales", "one element each"),
    ("fp32 out", "out_dtype"), ("e8m0 block scales", "scale_a: torch.float8_e8m0fnu"),
    ("strided scale_b", "scale_b: must be contiguous"),
    ("bias dtype", "bias"), ("empty", "empty"),
])
def test_constraints_name_what_they_refuse(case, needle):
    a, b, sa, sb = _operands()
    kw = {}
    if case == "bf16 operands":
        a = a.to(torch.bfloat16)
    elif case == "row-major b":
        b = b.contiguous()
    elif case == "K % 16":
        a, b, sa, sb = _operands(K=1000)
    elif case == "N % 8":
        a, b, sa, sb = _operands(N=20)
    elif case == "fp16 scales":
        sa = sa.half()
    elif case == "block scales":
        sa = torch.rand(256, 9)  # K / 128 = 8 blocks
    elif case == "e8m0 block scales":
        sa, sb = torch.rand(256, 8).to(torch.float8_e8m0fnu), torch.rand(8, 4).to(torch.float8_e8m0fnu)
    elif case == "strided scale_b":
        sb = torch.rand(1, 1024)[:, ::2]  # (1, 512) read every other element
    elif case == "fp32 out":
        kw["out_dtype"] = torch.float32
    elif case == "bias dtype":
        kw["bias"] = torch.randn(512)
    elif case == "empty":
        a, b, sa, sb = _operands(M=0)
    ok, why = f8.constraints(a, b, sa, sb, **kw)
    assert not ok and needle in why, why


def test_launch_refuses_before_any_compile_or_launch():
    a, b, sa, sb = _operands()
    with pytest.raises(ValueError, match="fp8 gemm: .*K-major"):
        f8.launch_fp8_gemm(a, b.contiguous(), sa, sb, torch.empty(256, 512, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="out: expected"):
        f8.launch_fp8_gemm(a, b, sa, sb, torch.empty(512, 256, dtype=torch.bfloat16).t())


def test_router_region_and_refusals():
    """The scaled_mm record answers the router's (a, b, scales, out_dtype, bias_dtype, use_fast_accum) call: a bias
    of another dtype and fp32 output go elsewhere by constraint; fast mode (row-wise) and decode-sized M by
    preference; block scales are preferred from M = 256 in either mode (they ignore use_fast_accum)."""
    a, b, _, _ = _operands(M=512)
    assert f8._router_constraints(a, b, "row", torch.bfloat16, None, False)[0]
    assert f8._router_constraints(a, b, "tensor", torch.float16, torch.float16, False)[0]
    assert f8._router_constraints(a, b, "block", torch.bfloat16, None, False)[0]
    ok, why = f8._router_constraints(a, b, "blocks", torch.bfloat16, None, False)
    assert not ok and "scales 'blocks'" in why
    assert f8.preferred(a, b, "block", torch.bfloat16, None, True)[0]
    ok, why = f8._router_constraints(a, b, "row", torch.bfloat16, torch.float32, False)
    assert not ok and "bias" in why
    assert not f8._router_constraints(a, b, "row", torch.float32, None, False)[0]
    assert f8.preferred(a, b, "row", torch.bfloat16, None, False)[0]
    assert not f8.preferred(a, b, "row", torch.bfloat16, None, True)[0]
    small, _, _, _ = _operands(M=64)
    for scales in ("row", "block"):
        ok, why = f8.preferred(small, b, scales, torch.bfloat16, None, False)
        assert not ok and "M = 64 < 256" in why


def test_block_scales_are_recognised_by_shape():
    a, b, _, _ = _operands(M=256, N=300, K=1000)  # K / 128 -> 8 blocks, N / 128 -> 3
    a, b = a[:, :992], b[:992]  # (K a multiple of 16 for TMA)
    assert f8._scale_mode(torch.rand(256, 8), torch.rand(8, 3), 256, 300, 992) == 3
    assert f8._scale_mode(torch.rand(256, 1), torch.rand(1, 300), 256, 300, 992) == 2
    assert f8._scale_mode(torch.rand(1), torch.rand(1), 256, 300, 992) == 1
    assert f8.constraints(a, b, torch.rand(256, 8), torch.rand(8, 3))[0] is False  # N = 300: not a multiple of 8
    a, b, _, _ = _operands(M=256, N=384, K=1024)
    assert f8.constraints(a, b, torch.rand(256, 8), torch.rand(8, 3))[0]
    blk = f8.ACCURATE_VARIANT.with_operands(3, (1, 1))
    assert blk.name == "coop128x128s6f8blk" and blk.defines(False, False, False)["TW_SCALE"] == 3
    with pytest.raises(ValueError, match="block scales need promotion every k-block"):
        f8.launch_fp8_gemm(a, b, torch.rand(256, 8), torch.rand(8, 3), torch.empty(256, 384, dtype=torch.bfloat16),
                           variant=f8.FAST_VARIANT)


@pytest.mark.parametrize("bug", [None, "no scale", "transposed"])
def test_self_check_tells_a_right_launch_from_a_wrong_one(monkeypatch, bug):
    """The router's first-use self-check (run on the device the first time scaled_mm routes here) with the launch
    replaced by torch's formula on the CPU: it passes the right product and fails a missing scale or a wrong layout."""
    from tilewright.reference import scaled_mm_reference

    def launch(a, b, sa, sb, out, bias=None, variant=None, **kw):
        if bug == "no scale":
            sa = torch.ones_like(sa)
        if bug == "transposed":
            b = b.t().contiguous().reshape(b.shape)
        out.copy_(scaled_mm_reference(a, b, sa, sb, bias, out.dtype))
        return out

    monkeypatch.setattr(f8, "launch_fp8_gemm", launch)
    for v in (f8.ACCURATE_VARIANT, f8.ACCURATE_VARIANT.with_operands(1, (2, 1)), f8.FAST_VARIANT,
              f8.ACCURATE_VARIANT.with_operands(3, (1, 1))):
        ok, why = f8._self_check(torch.device("cpu"), v, torch.bfloat16, True)
        assert ok == (bug is None), (v.name, why)


def test_launch_builds_maps_and_arguments_for_the_kernel(monkeypatch):
    """The launcher on a fake driver (no GPU): the build's switches, K-major TMA maps whose box is one 128-byte row
    of fp8 (128 elements) by the tile's rows, the 16-bit output map, and the scales as the last two arguments."""
    import contextlib
    import types

    from tilewright.cuda_fallback.runtime import launch

    maps, launches, builds = [], [], []

    class FakeDriver:
        def function(self, bld, name, smem):
            assert name == f8.KERNEL
            return ("fn", smem)

        def encode_tiled(self, dtype, ptr, dims, strides, box, swizzle):
            maps.append((dtype, ptr, tuple(dims), tuple(strides), tuple(box), swizzle))
            return launch.TensorMap()

        def launch(self, fn, grid, block, smem, stream, args):
            launches.append((grid, block, smem, args))

    monkeypatch.setattr(build, "compile_source", lambda src, arch, d: builds.append((src, arch, dict(d))) or "bld")
    monkeypatch.setattr(launch, "driver", lambda: FakeDriver())
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: types.SimpleNamespace(cuda_stream=0))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(multi_processor_count=132))
    monkeypatch.setattr(f8, "_prepared", {})
    M, N, K = 300, 520, 1024
    a, b, sa, sb = _operands(M, N, K, fb=E5M2)
    out = torch.empty(M, N, dtype=torch.float16)
    f8.launch_fp8_gemm(a, b, sa, sb, out)
    (src, arch, d), = builds
    assert (src, arch) == (f8.SOURCE, "sm_90a")
    assert {k: d[k] for k in ("TW_FP8", "TW_FP8_B", "TW_SCALE", "TW_FP8_PROMOTE", "TW_FP16", "TW_A_MN", "TW_B_MN",
                              "TW_BM", "TW_BN")} == dict(TW_FP8=1, TW_FP8_B=2, TW_SCALE=2, TW_FP8_PROMOTE=1, TW_FP16=1,
                                                          TW_A_MN=0, TW_B_MN=0, TW_BM=128, TW_BN=128)
    assert maps == [("float8_e4m3fn", a.data_ptr(), (K, M), (K,), (128, 128), 128),
                    ("float8_e5m2", b.data_ptr(), (K, N), (K,), (128, 128), 128),
                    ("float16", out.data_ptr(), (N, M), (2 * N,), (64, 64), 128)]
    (grid, block, smem, args), = launches
    assert grid == (min(132, 3 * 5), 1, 1) and block == (384, 1, 1) and smem == f8.ACCURATE_VARIANT.smem_bytes()
    assert [x.value for x in args[-2:]] == [sa.data_ptr(), sb.data_ptr()]
    # block scales: the kernel reads scale_a column-major - a column-major view as it is, a row-major one as a copy
    out = torch.empty(M, 512, dtype=torch.float16)
    b = b[:, :512]
    sb_blocks = torch.rand(K // 128, 4)
    col_major = torch.rand(K // 128, M).t()
    f8.launch_fp8_gemm(a, b, col_major, sb_blocks, out)
    assert builds[-1][2]["TW_FP8_SCALE_STAGE"] == 1 and launches[-1][2] == f8.BLOCK_STAGE_VARIANT.smem_bytes()
    assert builds[-1][2]["TW_SCALE"] == 3 and [x.value for x in launches[-1][3][-2:]] == [col_major.data_ptr(),
                                                                                          sb_blocks.data_ptr()]
    row_major = col_major.contiguous()
    assert f8._block_scale_a(row_major).stride() == (1, M) and torch.equal(f8._block_scale_a(row_major), row_major)
    assert f8._block_scale_a(col_major) is col_major and f8._block_scale_a(torch.rand(M, 1)).shape == (M, 1)
    # the register-load block build on request; row-wise scales on the scales-ahead build build the plain tile
    f8.launch_fp8_gemm(a, b, col_major, sb_blocks, out, variant=f8.ACCURATE_VARIANT)
    assert "TW_FP8_SCALE_AHEAD" not in builds[-1][2] and builds[-1][2]["TW_SCALE"] == 3
    f8.launch_fp8_gemm(a, b, sa, sb[:, :512], out, variant=f8.BLOCK_AHEAD_VARIANT)
    assert "TW_FP8_SCALE_AHEAD" not in builds[-1][2] and launches[-1][2] == f8.ACCURATE_VARIANT.smem_bytes()
    # the default block build copies the scales into the stages: the same scale arguments (no launcher copy), built
    # once (the explicit variant reuses it); the copied-ahead build on request
    stage_builds = [d for _, _, d in builds if d.get("TW_FP8_SCALE_STAGE") == 1]
    assert len(stage_builds) == 1 and "TW_FP8_SCALE_AHEAD" not in stage_builds[0] and stage_builds[0]["TW_STAGES"] == 4
    f8.launch_fp8_gemm(a, b, col_major, sb_blocks, out, variant=f8.BLOCK_STAGE_VARIANT)
    assert launches[-1][2] == f8.BLOCK_STAGE_VARIANT.smem_bytes()
    assert [x.value for x in launches[-1][3][-2:]] == [col_major.data_ptr(), sb_blocks.data_ptr()]
    f8.launch_fp8_gemm(a, b, col_major, sb_blocks, out, variant=f8.BLOCK_AHEAD_VARIANT)
    assert builds[-1][2]["TW_FP8_SCALE_AHEAD"] == 2 and launches[-1][2] == f8.BLOCK_AHEAD_VARIANT.smem_bytes()
