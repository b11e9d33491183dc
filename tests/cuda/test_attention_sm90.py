"""CPU tier for the sm_90a flash-attention forward (cuda_fallback/attention_sm90.py + attention_sm90.cu): the builds
build-check does not cover (variant "a"), the host-side constraints and launch arguments with a fake driver, and the
router's decisions for a faked sm_90 device. The GPU tier is tests/cuda/test_attention_sm90_gpu.py."""
from __future__ import annotations

import contextlib
import re
import types
import warnings

import pytest
import torch

from tilewright import router
from tilewright.cuda_fallback import attention_sm90 as ca
from tilewright.cuda_fallback import build_check
from tilewright.cuda_fallback.runtime import build, launch

needs_compiler = pytest.mark.skipif(build.toolchain() is None, reason="no CUDA compiler (nvcc or NVRTC)")
bf = torch.bfloat16


def _qkv(B=2, Hq=4, Hkv=2, Sq=100, Skv=130, D=128, dtype=bf):
    return (torch.randn(B, Hq, Sq, D, dtype=dtype), torch.randn(B, Hkv, Skv, D, dtype=dtype),
            torch.randn(B, Hkv, Skv, D, dtype=dtype))


# ------------------------------------------------------------------------------------------------ builds
def _clean_build_sass(defines: dict, perf_warnings: bool = True) -> str:
    """The SASS of one forward build, after asserting ptxas reported no spills and no stack (and, unless
    ``perf_warnings`` is False, no performance warning such as C7512's serialised wgmmas)."""
    b = build.compile_source(ca.SOURCE, "sm_90a", defines)
    info = build_check.parse_ptxas(b.log)
    assert info["spills"] == 0 and info["stack"] == 0, b.log
    assert not (perf_warnings and build_check.PERF_WARNINGS.search(b.log)), b.log
    text = build_check.sass(b.cubin)
    assert text is not None, "the SASS check needs cuobjdump (shipped in the triton wheel)"
    return text


@needs_compiler
def test_variant_a_builds_without_spills(cache):
    """Variant "a" (one consumer warpgroup, the simplest schedule) is not in the build-check table (it has no
    setmaxnreg by design); compile it here: wgmma + TMA present, no spills, no serialisation warning."""
    text = _clean_build_sass(ca.VARIANTS["a"].defines(128, True, False))
    for marker in ("HGMMA", "UTMALDG", "UTMASTG", "STSM"):
        assert marker in text


def _sass_kernels(text: str) -> dict:
    """Per kernel function of a SASS listing: its instructions (the predicate kept, as the disassembler prints it)."""
    return {part.split("\n", 1)[0].strip(): re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", part)
            for part in re.split(r"\n\s*Function : ", text)[1:]}


# build-check row -> (HGMMAs, R2URs at most, instructions at most): nvcc 13.0, measured when the consumers' wgmma
# descriptors moved to uniform registers (R2UR / instructions before -> after: b hdim128 64 / 1656 -> 49 / 1552,
# c hdim128 full 94 / 2360 -> 50 / 2176, causal 97 / 2568 -> 53 / 2392, c hdim64 causal fp16 20 / 2144 -> 5 / 2040,
# c hdim256 full 185 / 2656 -> 96 / 2392). Unpredicated R2URs: the predicated ones are the epilogue's global stores.
DESCRIPTOR_BUILDS = {"b hdim128 full bf16": (16, 49, 1552), "c hdim128 full bf16": (32, 50, 2176),
                     "c hdim128 causal bf16": (32, 53, 2392), "c hdim64 causal fp16": (24, 5, 2040),
                     "c hdim256 full bf16": (40, 96, 2392)}


@needs_compiler
@pytest.mark.parametrize("label", sorted(DESCRIPTOR_BUILDS))
def test_wgmma_descriptors_stay_in_uniform_registers(cache, label):
    """The consumers' wgmma descriptors are formed in uniform registers: the warpgroup index comes through a shuffle
    (ptxas then knows the Q rows' address warp-uniform) and each wgmma's descriptor is a base one advanced by its
    byte offset. Built per wgmma from a per-thread index, the Q descriptors sat in ordinary registers and every HGMMA
    was preceded by two R2UR moves (36 R2URs between the first and the last HGMMA of the hdim-128 build, 68 at hdim
    256); now none is, the HGMMAs (same count) issue back to back and the kernel lost 72-264 instructions, with 0
    spills as before. Pinned: no R2UR among the HGMMAs, the R2UR and instruction counts measured then (the rest are
    the producer's and the barrier waits' addresses), the HGMMA count."""
    defines = {row[0]: row[1] for row in ca.build_check_builds()}[label]
    text = _clean_build_sass(defines, perf_warnings=False)
    ops = _sass_kernels(text)["tw_attn_fwd_sm90"]
    hgmma, r2ur, instructions = DESCRIPTOR_BUILDS[label]
    mma = [i for i, op in enumerate(ops) if re.match(r"(@!?U?P\w+\s+)?HGMMA", op)]
    assert len(mma) == hgmma
    assert not [op for op in ops[mma[0]:mma[-1]] if "R2UR" in op]
    assert sum(op.startswith("R2UR") for op in ops) <= r2ur
    assert len(ops) <= instructions


def test_build_check_lists_the_attention_builds():
    builds = ca.build_check_builds()
    assert len(builds) == len(ca.BUILD_CHECK_BUILDS)
    assert build_check.KERNELS["attention_sm90.cu"][0] == ("sm_90a",)
    for label, defines, smem in builds:
        assert smem <= ca.SMEM_LIMIT, label
        assert defines["TW_CONSUMERS"] in (2, 3)  # every build-check row must have USETMAXREG


THREE_CONSUMER_BUILDS = sorted(row[0] for row in ca.build_check_builds() if row[1]["TW_CONSUMERS"] == 3)


@needs_compiler
@pytest.mark.parametrize("label", THREE_CONSUMER_BUILDS)
def test_three_consumer_builds(cache, label):
    """b3 / c3 (three consumer warpgroups, 160 registers each): the build-check rows compile without spills or a
    ptxas performance warning, with wgmma and setmaxnreg in the SASS; c3 builds without the pinned PV wait (pinned,
    it spilled in 160 registers)."""
    defines = {row[0]: row[1] for row in ca.build_check_builds()}[label]
    assert defines["TW_HDIM"] == 64 and defines["TW_PIN_WAIT"] == 0
    text = _clean_build_sass(defines)
    for marker in ("HGMMA", "USETMAXREG"):
        assert marker in text


def test_three_consumer_variants_refuse_other_head_dims(fake_driver, monkeypatch):
    """c3 / b3 build at head dim 64 only: asked for elsewhere (by name or through TILEWRIGHT_CUDA_ATTN_VARIANT) the
    launch raises, naming the variable and the head dim, and nothing is built or launched in its place."""
    assert [n for n, v in ca.VARIANTS.items() if v.consumers == 3] == ["b3", "c3"]
    assert ca.VARIANTS["c3"].head_dims == (64,) and ca.VARIANTS["c"].head_dims == ca.HEAD_DIMS
    q, k, v = _qkv(D=128)
    out, lse = torch.empty_like(q), torch.empty(2, 4, 100)
    with pytest.raises(ValueError, match=r"TILEWRIGHT_CUDA_ATTN_VARIANT.*head dim 128"):
        ca.launch_attention(q, k, v, out, lse, variant="c3")
    monkeypatch.setenv("TILEWRIGHT_CUDA_ATTN_VARIANT", "b3")
    q96, k96, v96 = _qkv(D=96)  # a padded head dim on the 128 build
    with pytest.raises(ValueError, match=r"TILEWRIGHT_CUDA_ATTN_VARIANT.*head dim 96 \(build 128\)"):
        ca.launch_attention(q96, k96, v96, torch.empty_like(q96), lse)
    assert not fake_driver.builds and not fake_driver.launches
    # at head dim 64: 192-row Q tiles, 512 threads
    q, k, v = _qkv(Sq=300, D=64)
    ca.launch_attention(q, k, v, torch.empty_like(q), torch.empty(2, 4, 300), variant="c3")
    (_, _, defines), = fake_driver.builds
    assert defines["TW_CONSUMERS"] == 3 and defines["TW_PIN_WAIT"] == 0
    assert fake_driver.maps[0][4] == (64, 192, 1, 1)
    (fn, grid, block, smem, args), = fake_driver.launches
    assert grid == (2, 4, 2) and block == (512, 1, 1) and smem == ca.VARIANTS["c3"].smem_bytes(64) <= ca.SMEM_LIMIT


WIDE_KEY_BLOCK_BUILDS = sorted(row[0] for row in ca.build_check_builds() if row[1]["TW_BN"] > 128)


@needs_compiler
@pytest.mark.parametrize("label", WIDE_KEY_BLOCK_BUILDS)
def test_wide_key_block_builds(cache, label):
    """c176 / c192 (176- / 192-key blocks at head dim 128, the A/B candidates for the non-causal forward): the
    build-check rows compile without spills or a ptxas performance warning, their S = Q K^T as m64n176k16 /
    m64n192k16 wgmmas (8 k-steps over head dim 128, in the prologue and the loop) beside P V's m64n128k16, inside the
    shared memory a CTA may have."""
    (defines, smem), = [(row[1], row[2]) for row in ca.build_check_builds() if row[0] == label]
    bn = defines["TW_BN"]
    assert defines["TW_HDIM"] == 128 and bn in (176, 192) and smem <= ca.SMEM_LIMIT
    text = _clean_build_sass(defines)
    widths = re.findall(r"HGMMA\.64x(\d+)x16", text)
    assert widths.count(str(bn)) == 16 and set(widths) == {str(bn), "128"}, sorted(set(widths))
    assert "USETMAXREG" in text


def test_wide_key_block_variants_build_at_head_dim_128_only(fake_driver):
    """c176 / c192 asked for at head dim 64 (their pinned overlap spilled there) or 256 (a 64-key block there) raise,
    naming the head dim, and nothing is built; at 128 the K / V maps' boxes are the key block's rows."""
    for name, bn in (("c176", 176), ("c192", 192)):
        assert ca.VARIANTS[name].head_dims == (128,) and ca.VARIANTS[name].bn(128) == bn
        for D in (64, 256):
            q, k, v = _qkv(D=D)
            with pytest.raises(ValueError, match=rf"variant '{name}'.*head dim {D}"):
                ca.launch_attention(q, k, v, torch.empty_like(q), torch.empty(2, 4, 100), variant=name)
    assert not fake_driver.builds and not fake_driver.launches
    q, k, v = _qkv(Sq=300, D=128)
    ca.launch_attention(q, k, v, torch.empty_like(q), torch.empty(2, 4, 300), variant="c176")
    (_, _, defines), = fake_driver.builds
    assert defines["TW_BN"] == 176 and defines["TW_PIN_WAIT"] == 0
    assert [m[4] for m in fake_driver.maps] == [(64, 128, 1, 1), (64, 176, 1, 1), (64, 176, 1, 1), (64, 64, 1, 1)]


# ------------------------------------------------------------------------------------------------ persistent CTAs
PERSISTENT_TWINS = {"cp": "c", "c176p": "c176"}  # persistent variant -> the one-CTA-per-tile variant it loops
PERSISTENT_BUILDS = sorted(row[0] for row in ca.build_check_builds() if row[1].get("TW_PERSISTENT"))


def _sass_with_addresses(text: str) -> list:
    """(address, instruction) of every instruction of the forward kernel's SASS listing."""
    return [(int(a, 16), op.strip()) for a, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", text)]


def _key_block_loop(ins: list, per_block: int) -> list:
    """The instructions of the consumers' key-block loop: the shortest backward branch's span that holds exactly the
    HGMMAs of one block (QK^T's and P V's k-steps). Longer spans with HGMMAs are the tile loop, or the spin-wait
    retries placed after the kernel's body."""
    where = {a: i for i, (a, _) in enumerate(ins)}
    spans = []
    for i, (a, op) in enumerate(ins):
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", op)
        if m and int(m.group(1), 16) <= a:
            body = ins[where[int(m.group(1), 16)]:i + 1]
            if sum(bool(re.match(r"(@!?U?P\w+\s+)?HGMMA", o)) for _, o in body) == per_block:
                spans.append(body)
    assert spans, f"no loop with {per_block} HGMMAs"
    return [op for _, op in min(spans, key=len)]


@needs_compiler
@pytest.mark.parametrize("label", PERSISTENT_BUILDS)
def test_persistent_builds_keep_their_twins_key_block_loop(cache, label):
    """cp / c176p (TW_PERSISTENT): the build-check rows compile without spills, stack or a ptxas performance
    warning; their key-block loop issues the twin's HGMMAs (c / c176: D/16 QK^T + BN/16 P V k-steps a block, the same
    total), with no R2UR and no local memory in it (carried across the tile loop, the warpgroup index lost its
    uniformity to ptxas once and the Q descriptors came back with 16 R2URs a block), and at most 16 more instructions
    than the twin's loop (measured, nvcc 13.0: 10-11 more, the ring position from a running block count)."""
    defines = {row[0]: row[1] for row in ca.build_check_builds()}[label]
    twin = dict(defines)
    del twin["TW_PERSISTENT"]
    per_block = defines["TW_HDIM"] // 16 + defines["TW_BN"] // 16
    loops = []
    for d in (defines, twin):
        ins = _sass_with_addresses(_clean_build_sass(d))
        assert sum(bool(re.match(r"(@!?U?P\w+\s+)?HGMMA", op)) for _, op in ins) == 2 * per_block
        loops.append(_key_block_loop(ins, per_block))
    mine, theirs = loops
    assert not [op for op in mine if "R2UR" in op or re.match(r"(@!?U?P\w+\s+)?(LDL|STL)", op)]
    assert len(mine) <= len(theirs) + 16, (len(mine), len(theirs))


def test_persistent_variants(monkeypatch):
    """cp / c176p are c / c176 with TW_PERSISTENT (8 more bytes of shared memory: the q_empty barrier), at the same
    head dims; no other variant defines TW_PERSISTENT (their builds keep their cache keys); neither is a default,
    cp is picked on short plain causal rows at head dim 128 (PERSISTENT_BY_HEAD_DIM) and nowhere else, c176p only
    when named (the variable or the variant argument)."""
    for name, twin in PERSISTENT_TWINS.items():
        v, t = ca.VARIANTS[name], ca.VARIANTS[twin]
        assert v.persistent and not t.persistent and v.head_dims == t.head_dims
        for D in v.head_dims:
            for causal in (False, True):
                assert v.defines(D, causal, False) == {**t.defines(D, causal, False), "TW_PERSISTENT": 1}
            assert v.smem_bytes(D) == t.smem_bytes(D) + 8 <= ca.SMEM_LIMIT
    assert not any(v.persistent or "TW_PERSISTENT" in v.defines(D, True, False, True, True, True)
                   for n, v in ca.VARIANTS.items() if n not in PERSISTENT_TWINS for D in v.head_dims)
    picked = {(D, causal, s, plain): ca.pick_variant(D, causal, s, s, plain).name for D in (64, 96, 128, 256)
              for causal in (None, False, True) for s in (128, 1023, 1024, 2048, 2049, 4096, 16384)
              for plain in (False, True)}
    assert {k for k, name in picked.items() if name in PERSISTENT_TWINS} == {
        (D, True, s, True) for D in (96, 128) for s in (1024, 2048)}
    assert set(ca.PERSISTENT_BY_HEAD_DIM.values()) == {"cp"} and ca.DEFAULT_VARIANT not in PERSISTENT_TWINS
    assert ca.pick_variant(128, True, 1024, 4096).name != "cp" and ca.pick_variant(128, True, 2048, 1000).name != "cp"
    assert not set(ca.DEFAULT_BY_HEAD_DIM.values()) & set(PERSISTENT_TWINS)
    monkeypatch.setenv("TILEWRIGHT_CUDA_ATTN_VARIANT", "c176p")
    assert ca.pick_variant(128).name == "c176p"


@pytest.mark.parametrize("B,Hq,Sq,variant", [(2, 4, 300, "cp"), (2, 8, 2048, "cp"), (1, 2, 1, "c176p"),
                                             (3, 16, 4000, "c176p")])
def test_persistent_launch_grid(fake_driver, B, Hq, Sq, variant):
    """A persistent launch: min(tiles, SMs) CTAs in x (the CPU stand-in's 132 SMs: _env.sm_count), the tiles
    ceil(Sq / 128) x Hq x B counted in the kernel from the batch, its one extra (last) argument; the twin's build,
    maps and other arguments otherwise."""
    q, k, v = _qkv(B=B, Hq=Hq, Hkv=Hq // 2, Sq=Sq, Skv=Sq + 7)
    out, lse = torch.empty_like(q), torch.empty(B, Hq, Sq)
    for name in (variant, PERSISTENT_TWINS[variant]):
        ca.launch_attention(q, k, v, out, lse, causal=True, variant=name)
    (_, _, mine), (_, _, twin) = fake_driver.builds
    assert mine == {**twin, "TW_PERSISTENT": 1}
    (_, grid, block, smem, args), (_, twin_grid, twin_block, twin_smem, twin_args) = fake_driver.launches
    tiles = -(-Sq // 128) * Hq * B
    assert twin_grid == (-(-Sq // 128), Hq, B)
    assert grid == (min(tiles, ca.sm_count(q.device)), 1, 1) and (grid[0] == 132) == (tiles > 132)
    assert block == twin_block == (384, 1, 1) and smem == twin_smem + 8
    assert len(args) == len(twin_args) + 1 and args[-1].value == B
    assert [a.value for a in args[4:-1]] == [a.value for a in twin_args[4:]]
    assert fake_driver.maps[:4] == fake_driver.maps[4:]


def test_persistent_grid_limits(fake_driver):
    """persistent_grid: one CTA per tile up to the SM count, never 0; 2^30 tiles or more raise (the kernel counts
    them in 32-bit ints). A packed batch has no persistent build: asked for one, the launch preparation raises before
    compiling."""
    assert ca.persistent_grid((3, 4, 2), 132) == (24, 1, 1)
    assert ca.persistent_grid((64, 16, 2), 132) == (132, 1, 1) and ca.persistent_grid((1, 1, 1), 78) == (1, 1, 1)
    assert ca.persistent_grid(((1 << 30) - 1, 1, 1), 132) == (132, 1, 1)
    with pytest.raises(ValueError, match="2\\^30"):
        ca.persistent_grid((1 << 15, 1 << 14, 2), 132)
    q, k, v, cu_q, cu_k = _packed((20, 30), (20, 30))
    views = [ca._packed_as_bhsd(t) for t in (q, k, v, torch.empty_like(q))]
    with pytest.raises(ValueError, match="'cp' .*no packed-batch build"):
        ca._prepare(*views, torch.empty(4, 50), False, 0.1, ca.VARIANTS["cp"], (0, -31), 0.0, False,
                    ca.Varlen(cu_q, cu_k, 30, 30))
    assert not fake_driver.builds


# ------------------------------------------------------------------------------------------------ variants
def test_variants_and_defines():
    assert list(ca.VARIANTS)[:2] == ["a", "b"] and ca.DEFAULT_VARIANT in ca.VARIANTS
    c = ca.VARIANTS["c"]
    assert (c.bm, c.threads) == (128, 384) and (ca.VARIANTS["a"].bm, ca.VARIANTS["a"].threads) == (64, 256)
    d = c.defines(256, True, True)
    assert d == {"TW_HDIM": 256, "TW_BN": 64, "TW_STAGES": 2, "TW_CONSUMERS": 2, "TW_PINGPONG": 1, "TW_OVERLAP": 1,
                 "TW_CAUSAL": 1, "TW_FP16": 1, "TW_PIN_WAIT": 0}
    # the pinned PV wait only where ptxas has the registers (C7512 otherwise), and only in overlap schedules
    assert [c.pin_wait(D) for D in ca.HEAD_DIMS] == [True, False, False]
    c64 = ca.VARIANTS["c64"]
    assert [c64.bn(D) for D in ca.HEAD_DIMS] == [64, 64, 64] and c64.pin_wait(128)
    assert not any(ca.VARIANTS[n].pin_wait(D) for n in ("a", "b", "b_free") for D in ca.HEAD_DIMS)
    # smem: Q 128x128 + 2 stages x (K + V) 128x128, bf16, + barriers + slack
    assert c.smem_bytes(128) == 1024 + 128 * 128 * 2 + 4 * 128 * 128 * 2 + 9 * 8
    for D in ca.HEAD_DIMS:
        assert c.smem_bytes(D) <= ca.SMEM_LIMIT


def test_pick_variant_env(monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CUDA_ATTN_VARIANT", "a")
    assert ca.pick_variant().name == "a"
    assert ca.pick_variant(64).name == "a" and ca.pick_variant(128).name == "a"  # the override wins everywhere
    monkeypatch.delenv("TILEWRIGHT_CUDA_ATTN_VARIANT")
    assert ca.pick_variant().name == ca.DEFAULT_VARIANT
    # per build head dim: three consumer warpgroups at 64, the default elsewhere (96 and 200 on the 128 / 256 builds)
    assert ca.pick_variant(64).name == "c3" and ca.pick_variant(64).consumers == 3
    assert all(ca.pick_variant(d).name == ca.DEFAULT_VARIANT for d in (96, 128, 200, 256))


def test_launch_takes_the_head_dims_default_variant(monkeypatch):
    """A launch without a variant runs its head dim's default: c3 (512 threads) at 64, c (384) at 128."""
    seen = []
    monkeypatch.setattr(ca.launch, "launch_cached", lambda cache, key, prepare, device, threads, smem, roles:
                        seen.append((key[2].name, threads)))
    for D in (64, 128):
        q, k, v = _qkv(D=D)
        ca.launch_attention(q, k, v, torch.empty_like(q), torch.empty(q.shape[:3]), False)
    assert seen == [("c3", 512), ("c", 384)]


def test_wide_key_blocks_where_measured_faster():
    """Head dim 128 (and the dims its build pads: 96) runs 176-key blocks without a mask from 4096 keys or 2048 of
    both, and with the causal mask from 4096 of both; anything else, a window or a soft cap keeps its default."""
    wide = ca.WIDE_KEYS_BY_HEAD_DIM[128]
    for D in (96, 128):
        assert ca.pick_variant(D, False, 128, 4096).name == wide
        assert ca.pick_variant(D, False, 2048, 2048).name == wide
        assert ca.pick_variant(D, False, 256, 2048).name == ca.DEFAULT_VARIANT  # (measured 0.98x c)
        assert ca.pick_variant(D, False, 16384, 2047).name == ca.DEFAULT_VARIANT
        assert ca.pick_variant(D, True, 4096, 4096).name == wide
        assert ca.pick_variant(D, True, 2048, 16384).name == ca.DEFAULT_VARIANT  # (bottom-right: few rows)
        assert ca.pick_variant(D, True, 8192, 8192, plain_mask=False).name == ca.DEFAULT_VARIANT
        assert ca.pick_variant(D, None, 8192, 8192).name == ca.DEFAULT_VARIANT  # mask unknown: the default
    assert ca.pick_variant(64, False, 8192, 8192).name == "c3"
    assert ca.pick_variant(256, False, 8192, 8192).name == ca.DEFAULT_VARIANT


@pytest.mark.parametrize("check_passes", [True, False])
def test_launch_self_checks_a_wide_pick_before_running_it(monkeypatch, check_passes):
    """A launch that picks the wide-key variant runs its self-check first (the router checked the default only); a
    failed check runs the default variant instead. A window or a soft cap never asks."""
    seen, checked = [], []
    monkeypatch.setattr(ca.launch, "launch_cached", lambda cache, key, prepare, device, threads, smem, roles:
                        seen.append(key[2].name))

    def check(device, variant, key, run, fallback="Triton"):
        checked.append((variant, fallback))
        return check_passes, "fake"

    monkeypatch.setattr(ca.GUARD, "check", check)
    q, k, v = _qkv(B=1, Hq=1, Hkv=1, Sq=8, Skv=4096)
    out, lse = torch.empty_like(q), torch.empty(q.shape[:3])
    ca.launch_attention(q, k, v, out, lse, False)
    ca.launch_attention(q, k, v, out, lse, False, softcap=30.0)
    ca.launch_attention(q, k, v, out, lse, True, window_offset=-100)
    wide = ca.WIDE_KEYS_BY_HEAD_DIM[128]
    assert checked == [(wide, f"variant {ca.DEFAULT_VARIANT}")]  # (its warning names what serves instead)
    assert seen == [wide if check_passes else ca.DEFAULT_VARIANT, ca.DEFAULT_VARIANT, ca.DEFAULT_VARIANT]


# ------------------------------------------------------------------------------------------------ constraints
def test_constraints():
    q, k, v = _qkv()
    assert ca.constraints(q, k, v)[0]
    # (B, S, H, D) storage viewed as (B, H, S, D): strided, still TMA-able
    qt = torch.randn(2, 100, 4, 128, dtype=bf).transpose(1, 2)
    kt = torch.randn(2, 130, 2, 128, dtype=bf).transpose(1, 2)
    assert ca.constraints(qt, kt, kt)[0]
    ok, why = ca.constraints(q.float(), k.float(), v.float())
    assert not ok and "float32" in why
    assert ca.constraints(*_qkv(D=96))[0] and ca.constraints(*_qkv(D=200))[0]  # on the 128 / 256 builds
    for d in (40, 100, 264):
        ok, why = ca.constraints(*_qkv(D=d))
        assert not ok and f"head dim {d}" in why
    ok, why = ca.constraints(*_qkv(Hq=3, Hkv=2))
    assert not ok and "multiple of Hkv" in why
    ok, why = ca.constraints(*_qkv(Skv=0))
    assert not ok and "empty" in why
    q2 = torch.randn(2, 4, 100, 136, dtype=bf)[..., 4:132]  # base offset 8 bytes
    ok, why = ca.constraints(q2, k, v)
    assert not ok and "16-byte aligned" in why
    q3 = torch.randn(2, 4, 100, 130, dtype=bf)[..., :128]  # row stride 260 B
    ok, why = ca.constraints(q3, k, v)
    assert not ok and "multiple of 16 bytes" in why
    ok, why = ca.constraints(q, k.expand(2, 2, 130, 128).contiguous(), v[:, :, :64])
    assert not ok and "shapes" in why
    ok, why = ca.constraints(q, k, v[..., :64])  # MLA-style value head dim: Triton's
    assert not ok and "value head dim must equal" in why


def test_tma_dims_strides_size_one_dims():
    q = torch.randn(1, 1, 7, 64, dtype=bf)
    (dims, strides), _ = ca.tma_dims_strides(q)
    assert dims == (64, 7, 1, 1) and strides[0] == 128 and all(s % 16 == 0 and s > 0 for s in strides)


# ------------------------------------------------------------------------------------------------ launch (fake driver)
class _FakeDriver:
    def __init__(self):
        self.maps, self.launches = [], []

    def function(self, bld, name, smem):
        assert name == ca.KERNEL
        return ("fn", smem)

    def encode_tiled(self, dtype, ptr, dims, strides, box, swizzle):
        self.maps.append((dtype, ptr, tuple(dims), tuple(strides), tuple(box), swizzle))
        return types.SimpleNamespace(index=len(self.maps))  # the launcher tags it with its role

    def launch(self, fn, grid, block, smem, stream, args):
        self.launches.append((fn, grid, block, smem, args))


@pytest.fixture
def fake_driver(monkeypatch):
    drv = _FakeDriver()
    builds = []

    def compile_source(src, arch, defines):
        builds.append((src, arch, dict(defines)))
        return types.SimpleNamespace(key="k")

    monkeypatch.setattr(build, "compile_source", compile_source)
    monkeypatch.setattr(launch, "driver", lambda: drv)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: types.SimpleNamespace(cuda_stream=0))
    monkeypatch.setattr(ca, "_prepared", {})
    drv.builds = builds
    return drv


def test_launch_arguments(fake_driver):
    q, k, v = _qkv(B=2, Hq=4, Hkv=2, Sq=300, Skv=130, D=128)
    out = torch.empty_like(q)
    lse = torch.empty(2, 4, 300)
    ca.launch_attention(q, k, v, out, lse, causal=True, scale=0.5, variant="c")
    (src, arch, defines), = fake_driver.builds
    assert src == ca.SOURCE and arch == "sm_90a" and defines["TW_CAUSAL"] == 1 and defines["TW_HDIM"] == 128
    mq, mk, mv, mo = fake_driver.maps
    assert mq[2:5] == ((128, 300, 4, 2), (256, 300 * 256, 4 * 300 * 256), (64, 128, 1, 1)) and mq[5] == 128
    assert mk[2] == (128, 130, 2, 2) and mk[4] == (64, 128, 1, 1) and mv[4] == (64, 128, 1, 1)
    assert mo[1] == out.data_ptr() and mo[4] == (64, 64, 1, 1)
    (fn, grid, block, smem, args), = fake_driver.launches
    assert grid == (3, 4, 2) and block == (384, 1, 1) and smem == ca.VARIANTS["c"].smem_bytes(128)
    assert args[4].value == lse.data_ptr()
    assert [a.value for a in args[5:9]] == [300, 130, 4, 2]
    assert args[9].value == pytest.approx(0.5 * ca.LOG2E)
    assert [a.value for a in args[10:12]] == [0, -301]  # top-left causal, no lower edge
    ca.launch_attention(q, k, v, out, lse, causal=True, scale=0.5, variant="c")  # prepared: no new build / maps
    assert len(fake_driver.builds) == 1 and len(fake_driver.maps) == 4 and len(fake_driver.launches) == 2
    # a band and a soft cap: the same build's offsets (clamped), and a build of its own for the cap
    ca.launch_attention(q, k, v, out, lse, causal=True, scale=0.5, variant="c", causal_offset=-170,
                        window_offset=-10 ** 9)
    # a window's lower edge and an upper edge off 0 are builds of their own (the dense builds keep their code)
    assert fake_driver.builds[-1][2] == {**fake_driver.builds[0][2], "TW_WINDOW": 1, "TW_UPPER_OFFSET": 1}
    assert [a.value for a in fake_driver.launches[-1][4][10:12]] == [-170, -301]
    ca.launch_attention(q, k, v, out, lse, causal=False, scale=0.5, variant="c", window_offset=-64, softcap=20.0)
    assert fake_driver.builds[-1][2]["TW_SOFTCAP"] == 1 and fake_driver.builds[-1][2]["TW_CAUSAL"] == 0
    args = fake_driver.launches[-1][4]
    assert args[9].value == 1.0 and [a.value for a in args[10:12]] == [0, -64]
    assert args[12].value == pytest.approx(0.5 / 20.0) and args[13].value == pytest.approx(20.0 * ca.LOG2E)
    with pytest.raises(ValueError, match="softcap"):
        ca.launch_attention(q, k, v, out, lse, softcap=float("inf"))
    ca.launch_attention(q, k, v, out, lse, causal=False, variant="a")
    assert fake_driver.launches[-1][1] == (5, 4, 2) and fake_driver.launches[-1][2] == (256, 1, 1)
    assert fake_driver.maps[-4][4] == (64, 64, 1, 1)  # variant a: 64-row Q tile


def _packed(q_lens, k_lens, Hq=4, Hkv=2, D=128, dtype=bf):
    cu = lambda lens: torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)  # noqa: E731
    return (torch.randn(sum(q_lens), Hq, D, dtype=dtype), torch.randn(sum(k_lens), Hkv, D, dtype=dtype),
            torch.randn(sum(k_lens), Hkv, D, dtype=dtype), cu(q_lens), cu(k_lens))


def test_packed_launch_arguments(fake_driver):
    """Packed sequences: the TW_VARLEN build (with the runtime upper edge when causal: each sequence has its own
    bottom-right offset), maps over the packed tensors as one (D, total, H, 1) sequence, a grid of the longest
    sequence's tiles x heads x sequences, and the trailing arguments the kernel reads per sequence."""
    q, k, v, cu_q, cu_k = _packed((200, 0, 65, 300), (250, 10, 65, 300), Hq=4, Hkv=2, D=96)
    out, lse = torch.empty_like(q), torch.empty(4, 565)
    ca.launch_attention_varlen(q, k, v, out, lse, cu_q, cu_k, 300, 300, causal=True, scale=0.5)
    (src, arch, defines), = fake_driver.builds
    assert defines["TW_VARLEN"] == 1 and defines["TW_UPPER_OFFSET"] == 1 and defines["TW_CAUSAL"] == 1
    assert defines["TW_HDIM"] == 128 and "TW_WINDOW" not in defines
    mq, mk, mv, mo = fake_driver.maps
    assert mq[2] == (96, 565, 4, 1) and mq[3][:2] == (4 * 96 * 2, 96 * 2) and mq[4] == (64, 128, 1, 1)
    assert mk[2] == (96, 625, 2, 1) and mk[3][:2] == (2 * 96 * 2, 96 * 2) and mo[1] == out.data_ptr()
    (fn, grid, block, smem, args), = fake_driver.launches
    assert grid == (3, 4, 4) and block == (384, 1, 1)
    assert [a.value for a in args[5:9]] == [565, 625, 4, 2]  # Sq / Skv: the totals (lse's row length)
    assert [a.value for a in args[10:12]] == [0, -602]  # offsets from each sequence's corner; no lower edge
    assert [a.value for a in args[14:17]] == [cu_q.data_ptr(), cu_k.data_ptr(), out.data_ptr()]
    assert [a.value for a in args[17:20]] == [4 * 96, 96, 96]  # out's row / head strides, the true head dim
    # the dense build passes the same trailing arguments, unread
    dq, dk, dv = _qkv()
    ca.launch_attention(dq, dk, dv, torch.empty_like(dq), torch.empty(2, 4, 100), causal=False, variant="c")
    assert "TW_VARLEN" not in fake_driver.builds[-1][2]
    assert [a.value for a in fake_driver.launches[-1][4][14:20]] == [0, 0, 0, 0, 0, 128]
    # a window: offsets relative to the corner, clamped to the longest spans
    ca.launch_attention_varlen(q, k, v, out, lse, cu_q, cu_k, 300, 300, causal=True, causal_offset=30,
                               window_offset=-10 ** 9)
    assert fake_driver.builds[-1][2]["TW_WINDOW"] == 1
    assert [a.value for a in fake_driver.launches[-1][4][10:12]] == [30, -602]


def test_packed_launch_validation(fake_driver):
    q, k, v, cu_q, cu_k = _packed((20, 30), (20, 30))
    out, lse = torch.empty_like(q), torch.empty(4, 50)
    with pytest.raises(ValueError, match="lse"):
        ca.launch_attention_varlen(q, k, v, out, torch.empty(50, 4), cu_q, cu_k, 30, 30)
    with pytest.raises(ValueError, match="int32"):
        ca.launch_attention_varlen(q, k, v, out, lse, cu_q.long(), cu_k, 30, 30)
    with pytest.raises(ValueError, match="cu_k has 2 offsets where cu_q has 3"):
        ca.launch_attention_varlen(q, k, v, out, lse, cu_q, cu_k[:2], 30, 30)
    with pytest.raises(ValueError, match="cu_k must be a contiguous 1-D int32 tensor on q's device"):
        ca.launch_attention_varlen(q, k, v, out, lse, cu_q, cu_k.to("meta"), 30, 30)
    with pytest.raises(ValueError, match="cu_q must be a contiguous"):
        ca.launch_attention_varlen(q, k, v, out, lse, torch.stack([cu_q, cu_q], 1)[:, 0], cu_k, 30, 30)
    with pytest.raises(ValueError, match="head dim"):
        ca.launch_attention_varlen(*_packed((20,), (20,), D=32)[:3], torch.empty(20, 4, 32, dtype=bf),
                                   torch.empty(4, 20), cu_q[:2], cu_k[:2], 20, 20)
    with pytest.raises(ValueError, match="scale"):
        ca.launch_attention_varlen(q, k, v, out, lse, cu_q, cu_k, 30, 30, scale=-1.0)
    assert not fake_driver.launches
    ok, why = ca.varlen_constraints(q.float(), k.float(), v.float(), cu_q, 30, 30)
    assert not ok and "dtype" in why
    ok, why = ca.varlen_constraints(q, k, v, cu_q, 0, 30)
    assert not ok and "max_seqlen_q" in why


def test_packed_route_off_the_gpu():
    q, k, v, cu_q, _ = _packed((20, 30), (20, 30))
    assert ca.varlen_route(q, k, v, cu_q, 30, 30) == (False, "not an sm_90 device")


@pytest.mark.parametrize("sq,skv,causal_offset,window_offset,expect", [
    (300, 130, 0, None, (0, -301)),            # top-left causal
    (300, 130, -170, None, (-170, -301)),      # bottom-right causal, Sq > Skv: rows 0-169 see no key
    (100, 4096, 3996, 3996 - 256, (3996, 3740)),  # bottom-right with a left window of 256
    (100, 200, 10 ** 9, -10 ** 9, (201, -101)),   # past either end: clamped, meaning unchanged
    (100, 200, -10 ** 9, 10 ** 9, (-101, 201)),   # nothing visible either way
])
def test_band_offsets(sq, skv, causal_offset, window_offset, expect):
    assert ca.band_offsets(sq, skv, causal_offset, window_offset) == expect


@pytest.mark.parametrize("d,build", [(64, 64), (72, 128), (96, 128), (128, 128), (136, 256), (192, 256), (256, 256)])
def test_build_head_dim(d, build):
    assert ca.build_head_dim(d) == build


@pytest.mark.parametrize("d", [8, 32, 48, 56, 60, 100, 130, 264, 0])
def test_head_dims_outside_the_builds_are_refused(d):
    assert ca.build_head_dim(d) is None


def test_a_padded_head_dim_runs_the_wider_build_on_maps_of_its_own_width(fake_driver):
    """D = 96 on the 128 build: the maps describe 96 columns (TMA zero-fills the rest on load, clips it on store), the
    build and its shared memory are the 128 ones; no tensor is copied or padded in global memory."""
    q, k, v = _qkv(B=1, Hq=2, Hkv=1, Sq=200, Skv=300, D=96)
    out = torch.empty_like(q)
    lse = torch.empty(1, 2, 200)
    ca.launch_attention(q, k, v, out, lse, causal=False, variant="c")
    (_, _, defines), = fake_driver.builds
    assert defines["TW_HDIM"] == 128 and defines["TW_BN"] == ca.VARIANTS["c"].bn(128)
    assert [m[2][0] for m in fake_driver.maps] == [96, 96, 96, 96]
    assert [m[1] for m in fake_driver.maps] == [t.data_ptr() for t in (q, k, v, out)]
    (fn, grid, block, smem, args), = fake_driver.launches
    assert smem == ca.VARIANTS["c"].smem_bytes(128)


def test_padded_head_dims_take_their_builds_measurements():
    q, k = torch.empty(1, 4, 2048, 96), torch.empty(1, 4, 2048, 96)
    ok, why = ca.preferred(q, k)
    assert ok and "head dim 128" in why


def test_launch_validation(fake_driver):
    q, k, v = _qkv()
    out = torch.empty_like(q)
    with pytest.raises(ValueError, match="lse"):
        ca.launch_attention(q, k, v, out, torch.empty(2, 4, 100, dtype=torch.float16))
    with pytest.raises(ValueError, match="out"):
        ca.launch_attention(q, k, v, out[:, :2], torch.empty(2, 4, 100))
    with pytest.raises(ValueError, match="head dim"):
        ca.launch_attention(*_qkv(D=32), torch.empty(2, 4, 100, 32, dtype=bf), torch.empty(2, 4, 100))
    with pytest.raises(ValueError, match="scale"):
        ca.launch_attention(q, k, v, out, torch.empty(2, 4, 100), scale=-0.1)
    assert not fake_driver.launches


def test_try_launch_never_raises(fresh_guard, failing_compiler):
    fresh_guard(ca.GUARD)
    q, k, v = _qkv()
    out, lse = torch.empty_like(q), torch.empty(2, 4, 100)
    # a call the kernel does not fit declines without disabling it
    assert ca.try_launch(q.float(), k.float(), v.float(), out.float(), lse, False, 0.1) is False
    assert ca.GUARD.disabled is None
    with pytest.warns(RuntimeWarning, match="Triton serves"):
        assert ca.try_launch(q, k, v, out, lse, False, 0.1) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ca.try_launch(q, k, v, out, lse, False, 0.1) is False  # disabled: one warning in total


# ------------------------------------------------------------------------------------------------ router
@pytest.fixture
def fake_sm90(monkeypatch, swap_record, fake_compiler):
    state = {"cap": (9, 0), "calls": 0, "self_check": (True, "self-check passed")}

    def ready(q, k, v):
        state["calls"] += 1
        return state["self_check"]

    monkeypatch.setattr(router, "_capability", lambda device: state["cap"])
    swap_record("attention", "attention_sm90", ready=ready)
    monkeypatch.delenv("TILEWRIGHT_BACKEND", raising=False)
    monkeypatch.delenv("TILEWRIGHT_CUDA", raising=False)
    monkeypatch.delenv("TILEWRIGHT_CUDA_ATTN", raising=False)
    return state


def test_router_attention_cuda_is_preferred_by_the_measured_table(fake_sm90, monkeypatch):
    q, k, v = _qkv()
    assert router.PREFERENCE["attention"][0] == "cuda"
    tiny = [t.new_empty(2, 4, 128, 128) for t in (q, k, v)]  # 128 x 128 MHA at hdim 128: Triton measured faster
    d = router.decide("attention", *tiny)
    assert d.backend == "triton" and "Triton forward was faster" in d.reasons[0], str(d)
    assert fake_sm90["calls"] == 0  # never self-checked unless it would serve
    big = [t.new_empty(1, t.shape[1], 512, 64) for t in (q, k, v)]  # 512 rows at hdim 64, GQA 4/2: CUDA (1.58x)
    d = router.decide("attention", *big)
    assert d.backend == "cuda" and fake_sm90["calls"] == 1 and "1.58x" in d.reasons[0], str(d)
    monkeypatch.setenv("TILEWRIGHT_CUDA_ATTN", "0")
    d = router.decide("attention", *big)
    assert d.backend == "triton" and "opted out" in d.reasons[0], str(d)
    monkeypatch.setenv("TILEWRIGHT_CUDA_ATTN", "1")
    assert router.decide("attention", *tiny).backend == "cuda"
    monkeypatch.delenv("TILEWRIGHT_CUDA_ATTN")
    fake_sm90["self_check"] = (False, "self-check failed for c hdim 64")
    d = router.decide("attention", *big)
    assert d.backend == "triton" and "self-check failed" in d.reasons[0], str(d)


@pytest.mark.parametrize("d,gqa,sq,skv,expect", [
    (128, False, 512, 4096, (1.35, (128, 512, 4096))),   # the case: Sq 512 / Skv 4096 goes to CUDA
    (128, True, 2048, 2048, (1.51, (128, 2048, 2048))),
    (96, False, 300, 300, (1.50, (64, 512, 512))),       # equidistant head dims: the smaller one's table
    (200, True, 100, 9000, (1.40, (256, 128, 4096))),
    (64, False, 16, 16, (0.33, (64, 128, 128))),
])
def test_measured_ratio_takes_the_nearest_table_point(d, gqa, sq, skv, expect):
    assert ca.measured_ratio(d, gqa, sq, skv) == expect


def test_forward_table_is_complete():
    assert set(ca.FORWARD_TABLE) == {(d, g) for d in (64, 128, 256) for g in (False, True)}
    assert all(len(points) == 8 and all(r > 0 for _, _, r in points) for points in ca.FORWARD_TABLE.values())


def test_router_attention_forced_and_constraints(fake_sm90):
    q, k, v = _qkv()
    d = router.decide("attention", q, k, v, backend="cuda")
    assert d.backend == "cuda" and d.forced and "self-check passed" in d.reasons[1], str(d)
    with pytest.raises(ValueError, match="head dim 40"):
        router.decide("attention", *_qkv(D=40), backend="cuda")
    fake_sm90["self_check"] = (False, "self-check failed for c hdim 128")
    with pytest.raises(ValueError, match="self-check failed"):
        router.decide("attention", q, k, v, backend="cuda")
    fake_sm90["cap"] = (10, 0)
    with pytest.raises(ValueError, match="sm_100"):
        router.decide("attention", q, k, v, backend="cuda")


def test_router_attention_no_gpu():
    d = router.decide("attention", *_qkv())  # real capability: CPU tensors
    assert d.backend != "cuda" and "needs an NVIDIA GPU" in d.reasons[0]
