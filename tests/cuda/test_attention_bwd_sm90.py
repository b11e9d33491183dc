"""CPU tier for the sm_90a attention backward's kernels (cuda_fallback/attention_bwd_sm90.py + .cu): every build
compiles spill-free with wgmma and TMA, the constraints, the switches, and the op layer's choice (Triton's kernels
where the CUDA ones do not take the call, did not measure faster, or the caller asked for Triton). The GPU tier is
tests/cuda/test_attention_bwd_sm90_gpu.py."""
from __future__ import annotations

import contextlib
import importlib
import re
import types

import pytest
import torch

from tilewright.cuda_fallback import attention_bwd_sm90 as cb
from tilewright.cuda_fallback import build_check
from tilewright.cuda_fallback.runtime import build

needs_compiler = pytest.mark.skipif(build.toolchain() is None, reason="no CUDA compiler (nvcc or NVRTC)")
ops_attention = importlib.import_module("tilewright.ops.attention")


@needs_compiler
@pytest.mark.parametrize("variant", sorted(cb.VARIANTS))
@pytest.mark.parametrize("head_dim", cb.HEAD_DIMS)
@pytest.mark.parametrize("causal", (False, True))
def test_builds_are_spill_free_with_wgmma_and_tma(cache, variant, head_dim, causal):
    """Both variants, head dims and masks (bf16; fp16 is the same code with other wgmma wrappers): no spills or stack
    frame, no serialisation warning, HGMMA and TMA loads in the SASS, setmaxnreg with two consumers. Variant "a"'s
    hdim-128 build sits at 250 registers; "b"'s consumers get 240."""
    b = build.compile_source(cb.SOURCE, "sm_90a", cb.defines(head_dim, causal, False, variant))
    info = build_check.parse_ptxas(b.log)
    assert info["spills"] == 0 and info["stack"] == 0, b.log
    assert not build_check.PERF_WARNINGS.search(b.log), b.log
    text = build_check.sass(b.cubin)
    assert text is not None, "the SASS check needs cuobjdump (shipped in the triton wheel)"
    for marker in cb.BUILD_CHECK_MARKERS + (("USETMAXREG",) if cb.VARIANTS[variant] == 2 else ()):
        assert marker in text


def test_ptxas_report_of_a_module_with_two_kernels_counts_both():
    """The backward's module holds the dK / dV and the dQ kernel: a spill in either fails the build."""
    log = ("ptxas info    : Compiling entry function 'tw_attn_bwd_dq_sm90' for 'sm_90a'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 168 registers, used 1 barriers\n"
           "ptxas info    : Compiling entry function 'tw_attn_bwd_dkdv_sm90' for 'sm_90a'\n"
           "    16 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads\n"
           "ptxas info    : Used 255 registers, used 1 barriers\n")
    assert build_check.parse_ptxas(log) == {"regs": 255, "spills": 20, "stack": 16, "static_smem": 0}


@needs_compiler
def test_the_dq_kernel_is_in_every_build(cache):
    """The dQ kernel (query-block half) compiles in the same module: present in the SASS, spill-free (counted with
    the dK / dV kernel's by parse_ptxas), both under the limits of one CTA per SM."""
    b = build.compile_source(cb.SOURCE, "sm_90a", cb.defines(128, True, False))
    assert "Compiling entry function 'tw_attn_bwd_dq_sm90'" in b.log
    assert build_check.parse_ptxas(b.log)["spills"] == 0, b.log
    assert cb.dq_smem_bytes(128) == 1024 + 2 * 64 * 128 * 2 + 4 * 64 * 128 * 2 + 5 * 8 <= 227 * 1024
    text = build_check.sass(b.cubin)
    assert text is not None, "the SASS check needs cuobjdump (shipped in the triton wheel)"
    assert "tw_attn_bwd_dq_sm90" in text


def test_build_check_lists_the_backward_builds():
    assert build_check.KERNELS[cb.SOURCE][0] == ("sm_90a",)
    rows = cb.build_check_builds()
    assert len(rows) == len(cb.BUILD_CHECK_BUILDS) and all(row[2] <= 227 * 1024 for row in rows)
    # K + V 64 x 128, two stages of Q + dO 64 x 128, bf16; the statistics (a 512-byte block a stage, each consumer's
    # two-step buffer); barriers; slack
    assert cb.smem_bytes(128, "a") == 1024 + 2 * 64 * 128 * 2 + 4 * 64 * 128 * 2 + 2 * 512 + 1024 + 5 * 8
    # two consumers: 128-key K / V blocks, a statistics buffer each
    assert cb.smem_bytes(128, "b") == 1024 + 2 * 128 * 128 * 2 + 4 * 64 * 128 * 2 + 2 * 512 + 2 * 1024 + 5 * 8
    # packed batches: no stage copies (rounded to 1024 bytes: the dS^T tile's alignment)
    assert cb.smem_bytes(128, "b", packed=True) == cb.smem_bytes(128, "b") - 1024
    assert [cb.block_n(v) for v in ("a", "b")] == [64, 128] and [cb.threads(v) for v in ("a", "b")] == [256, 384]
    assert rows[3][0].startswith("dkdv b ") and rows[3][3] == ("USETMAXREG",)
    # dQ in the pass: two dS^T tiles (128 keys x 64 queries, 16-bit) and two fp32 64 x 64 dQ staging tiles more
    assert cb.smem_bytes(128, "b", True) == cb.smem_bytes(128, "b") + 2 * 128 * 64 * 2 + 2 * 64 * 64 * 4
    assert rows[5][0].startswith("dkdv b+dq") and rows[5][3] == ("USETMAXREG", "UTMAREDG")
    assert rows[6][0].endswith(" window offset") and rows[6][1]["TW_UPPER_OFFSET"] == 1
    assert rows[7][0].endswith(" window") and rows[7][1]["TW_WINDOW"] == 1 and "TW_WINDOW" not in rows[3][1]
    assert rows[9][0].endswith(" window softcap") and rows[9][1]["TW_SOFTCAP"] == 1
    # packed batches: the TW_VARLEN builds, dQ in the pass (with its K-row zeroing) and without
    assert rows[10][0].endswith(" offset varlen") and rows[10][1]["TW_VARLEN"] == 1 and rows[10][3][-1] == "UTMAREDG"
    assert rows[11][0].endswith(" varlen") and "TW_VARLEN" not in rows[9][1]
    # dQ staged by 64-bit stores (the A/B switch's builds): head dim 64 full and 128 causal, without the split macro;
    # every other dQ-in-the-pass row has it (the default staging), no row without dQ in the pass does
    assert [r[0] for r in rows[12:14]] == ["dkdv b+dq hdim64 full bf16 dq-b64",
                                           "dkdv b+dq hdim128 causal bf16 dq-b64"]
    assert all("TW_DQ_STAGE_SPLIT" not in r[1] and r[3][-1] == "UTMAREDG" for r in rows[12:14])
    others = rows[:12] + rows[14:]
    assert all(("TW_DQ_STAGE_SPLIT" in r[1]) == (r[1]["TW_DQ_ATOMIC"] == 1) for r in others)
    assert any(r[1]["TW_DQ_ATOMIC"] == 1 for r in others)
    # the step's opt-in changes (TILEWRIGHT_CUDA_ATTN_BWD_STEP's builds): each at head dim 64, all three at 64 and at
    # 128 causal, on the default staging; no other row has any
    assert [r[0] for r in rows[14:]] == ["dkdv b+dq hdim64 full bf16 defer", "dkdv b+dq hdim64 full bf16 stsm",
                                         "dkdv b+dq hdim64 full bf16 lds64",
                                         "dkdv b+dq hdim64 full bf16 defer stsm lds64",
                                         "dkdv b+dq hdim128 causal bf16 defer stsm lds64"]
    macros = set(cb.STEP_OPTIONS.values())
    assert [sorted(macros & set(r[1])) for r in rows[14:]] == [
        ["TW_DQ_DEFER"], ["TW_DS_STMATRIX"], ["TW_STATS_LDS64"], sorted(macros), sorted(macros)]
    assert not any(macros & set(r[1]) for r in rows[:14])


@needs_compiler
@pytest.mark.parametrize("head_dim", cb.HEAD_DIMS)
def test_the_dq_in_the_pass_builds_are_spill_free_with_vector_reductions(cache, head_dim):
    """Variant b with dQ in the dK / dV pass: no spills, the wgmma products (HGMMA), setmaxnreg, and dQ's adds as TMA
    reduce-adds of staged tiles (UTMAREDG), not per-element atomics or reductions from registers."""
    b = build.compile_source(cb.SOURCE, "sm_90a", cb.defines(head_dim, True, False, "b", True))
    info = build_check.parse_ptxas(b.log)
    assert info["spills"] == 0 and info["stack"] == 0, b.log
    text = build_check.sass(b.cubin)
    assert text is not None, "the SASS check needs cuobjdump (shipped in the triton wheel)"
    for marker in cb.BUILD_CHECK_MARKERS + ("USETMAXREG", "UTMAREDG"):
        assert marker in text
    assert not re.search(r"\b(ATOMG|REDG)\b", text)


def _sass_kernels(text: str) -> dict:
    """Per kernel function of a SASS listing: its instructions (the predicate kept, as the disassembler prints it)."""
    return {part.split("\n", 1)[0].strip(): re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", part)
            for part in re.split(r"\n\s*Function : ", text)[1:]}


# build-check row -> per kernel (HGMMAs, R2URs at most, R2URs among its HGMMAs at most, instructions at most): nvcc
# 13.0, measured when the wgmma descriptors moved to uniform registers. R2URs (all / among the HGMMAs) and
# instructions, before -> after: dK / dV b hdim128 causal 55 / 34 / 2096 -> 24 / 4 / 1968, b+dq hdim128 causal
# 69 / 46 / 2456 -> 26 / 4 / 2264, b+dq hdim64 full fp16 41 / 30 / 1536 -> 10 / 0 / 1440, a hdim128 causal 17 / 1 /
# 2280 -> 17 / 1 / 2176 (one consumer: its index was a constant already); dQ hdim128 causal 70 / 15 / 1640 ->
# 52 / 0 / 1512, hdim64 50 / 6 / 992 -> 40 / 0 / 920. Unpredicated R2URs (the predicated ones are the epilogue's
# global stores); the four left among the dK / dV HGMMAs of hdim 128 move the step's query-block division. The
# dQ-in-the-pass builds' counts are the split staging's (the default since session 31: 72 instructions more than the
# 64-bit stores' 2264 / 1440 - twice the stores and a select each).
DKDV, DQ = "tw_attn_bwd_dkdv_sm90", "tw_attn_bwd_dq_sm90"
DESCRIPTOR_BUILDS = {"dkdv b hdim128 causal bf16": {DKDV: (24, 24, 4, 1968), DQ: (20, 52, 0, 1512)},
                     "dkdv b+dq hdim128 causal bf16": {DKDV: (32, 26, 4, 2336)},
                     "dkdv b+dq hdim64 full fp16": {DKDV: (20, 10, 0, 1512), DQ: (12, 40, 0, 920)},
                     "dkdv a hdim128 causal bf16": {DKDV: (24, 17, 1, 2176)}}


@needs_compiler
@pytest.mark.parametrize("label", sorted(DESCRIPTOR_BUILDS))
def test_wgmma_descriptors_stay_in_uniform_registers(cache, label):
    """Both kernels form their wgmma descriptors in uniform registers: one base descriptor per operand and step
    (block), each wgmma's that one advanced by its byte offset; the dK / dV consumers' warpgroup index comes through
    a shuffle (ptxas then knows their K / V rows' address warp-uniform), and the dQ kernel's Q / dO descriptors are
    formed each block from an opaque copy of the base address (hoisted ahead of the loop, they sat in ordinary
    registers). Before, the S^T / dP^T wgmmas of two consumers each took their A descriptor from ordinary registers
    (two R2UR per HGMMA), and the dQ kernel's Q / dO descriptors one R2UR each; the kernels lost 56-192 instructions
    with the same HGMMAs, 0 spills and no more registers (the hdim-128 consumers run at 240 registers, setmaxnreg).
    Pinned: per kernel the HGMMA count, the R2UR counts (all, and among the HGMMAs) and the instructions measured
    then."""
    row = {r[0]: r for r in cb.build_check_builds()}[label]
    b = build.compile_source(cb.SOURCE, "sm_90a", row[1])
    info = build_check.parse_ptxas(b.log)
    assert info["spills"] == 0 and info["stack"] == 0, b.log
    text = build_check.sass(b.cubin)
    assert text is not None, "the SASS check needs cuobjdump (shipped in the triton wheel), as the FP8 k-block tests"
    kernels = _sass_kernels(text)
    for name, (hgmma, r2ur, r2ur_among, instructions) in DESCRIPTOR_BUILDS[label].items():
        ops = kernels[name]
        mma = [i for i, op in enumerate(ops) if re.match(r"(@!?U?P\w+\s+)?HGMMA", op)]
        assert len(mma) == hgmma, name
        assert sum("R2UR" in op for op in ops[mma[0]:mma[-1]]) <= r2ur_among, name
        assert sum(op.startswith("R2UR") for op in ops) <= r2ur, name
        assert len(ops) <= instructions, name


class _FakeCuda(torch.Tensor):
    @property
    def is_cuda(self):
        return True


def _t(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype).as_subclass(_FakeCuda)


def test_constraints_name_what_they_refuse():
    q, do = _t(2, 8, 100, 128), _t(2, 8, 100, 128)
    k, v, dk, dv = (_t(2, 2, 130, 128) for _ in range(4))
    assert cb.constraints(do, q, k, v, dk, dv) == (True, "bf16/fp16, head dim 128, TMA-aligned")
    # head dims padded onto the 128 build: multiples of 8 from 72 to 120; not 56, 100, 136 or 256
    assert cb.constraints(_t(2, 8, 100, 96), _t(2, 8, 100, 96), *(_t(2, 2, 130, 96) for _ in range(4))) == \
        (True, "bf16/fp16, head dim 96 on the 128 build, TMA-aligned")
    for d in (56, 100, 136, 256):
        assert f"head dim {d}" in cb.constraints(_t(2, 8, 100, d), _t(2, 8, 100, d),
                                                 *(_t(2, 2, 130, d) for _ in range(4)))[1]
    assert [cb.kernel_head_dim(d) for d in (64, 72, 120, 128, 136, 48)] == [64, 128, 128, 128, None, None]

    assert "dtype" in cb.constraints(*(_t(2, 8, 100, 128, dtype=torch.float32) for _ in range(2)),
                                     *(_t(2, 2, 130, 128, dtype=torch.float32) for _ in range(4)))[1]
    assert "Hq not a multiple" in cb.constraints(_t(2, 3, 100, 128), _t(2, 3, 100, 128), k, v, dk, dv)[1]
    assert not cb.constraints(do, q, k, v, dk, dv[..., :64])[0]
    assert "CUDA tensors only" in cb.constraints(torch.empty(1), q, k, v, dk, dv)[1]


def test_the_switches(monkeypatch):
    """Unset, the kernels run where they measured faster than Triton's backward (head dims 72-128, causal 64);
    TILEWRIGHT_CUDA_ATTN_BWD=1 / 0 force them on / off; a bad value raises naming the variable."""
    monkeypatch.delenv(cb.ENV, raising=False)
    llama = dict(batch=8, kv_heads=4, sq=2048, skv=2048)  # 16 x 4 x 8 = 512 CTAs of 128 keys
    assert cb.enabled(128, False, **llama) and cb.enabled(128, True, **llama) and cb.enabled(64, True, **llama)
    assert not cb.enabled(64, False, **llama)
    assert cb.enabled(96, True, **llama) and cb.enabled(112, False, **llama)  # padded onto the 128 build
    assert cb.enabled(96, True, batch=1, kv_heads=4, sq=3000, skv=3000)  # 24 key blocks x 4 heads: 96 CTAs
    assert not cb.enabled(128, True, batch=1, kv_heads=4, sq=512, skv=512)  # 16 CTAs: most SMs idle
    assert not cb.enabled(128, False, batch=2, kv_heads=16, sq=512, skv=4096)  # 8 keys a query: dQ adds contend
    assert cb.enabled(128, False, batch=2, kv_heads=16, sq=2048, skv=4096)
    monkeypatch.setenv(cb.ENV, "1")
    assert cb.enabled(64, False) and cb.enabled(128, True, batch=1, kv_heads=1, sq=7, skv=7)
    monkeypatch.setenv(cb.ENV, "0")
    assert not cb.enabled(128, True, **llama)
    monkeypatch.setenv(cb.ENV, "yes")
    with pytest.raises(ValueError, match="TILEWRIGHT_CUDA_ATTN_BWD: 'yes' is not 0 or 1"):
        cb.enabled(128, True)
    monkeypatch.delenv(cb.VARIANT_ENV, raising=False)
    assert cb.pick_variant() == cb.DEFAULT_VARIANT == "b"
    monkeypatch.setenv(cb.VARIANT_ENV, "a")
    assert cb.pick_variant() == "a"
    monkeypatch.delenv(cb.DQ_ENV, raising=False)
    assert cb.dq_mode() == cb.DEFAULT_DQ_MODE
    for mode in cb.DQ_MODES:
        monkeypatch.setenv(cb.DQ_ENV, mode)
        assert cb.dq_mode() == mode
    monkeypatch.setenv(cb.DQ_ENV, "atomic")
    torch.use_deterministic_algorithms(True)
    try:
        assert cb.dq_mode() == "kernel"  # reductions in a varying order are not deterministic
    finally:
        torch.use_deterministic_algorithms(False)
    monkeypatch.setenv(cb.DQ_ENV, "1")
    with pytest.raises(ValueError, match="TILEWRIGHT_CUDA_ATTN_BWD_DQ: unknown mode '1'"):
        cb.dq_mode()
    monkeypatch.setenv(cb.VARIANT_ENV, "z")
    with pytest.raises(ValueError, match="TILEWRIGHT_CUDA_ATTN_BWD_VARIANT: unknown variant 'z'"):
        cb.pick_variant()


def test_the_dq_staging_switch_names_the_split_build_of_dq_in_the_pass_only(monkeypatch):
    """The default staging ("split") and TILEWRIGHT_CUDA_ATTN_BWD_DQ_STAGE=split add TW_DQ_STAGE_SPLIT=1 to the
    dQ-in-the-pass builds' macros and to no other build; b64 leaves it out (another build: its cache key differs);
    an explicit ``dq_stage`` (build-check's rows) wins over the variable; a bad value raises naming the variable."""
    monkeypatch.delenv(cb.DQ_STAGE_ENV, raising=False)
    assert cb.pick_dq_stage() == cb.DEFAULT_DQ_STAGE == "split"
    default = {d: cb.defines(d, True, False, "b", True) for d in cb.HEAD_DIMS}
    assert all(defs["TW_DQ_STAGE_SPLIT"] == 1 for defs in default.values())
    monkeypatch.setenv(cb.DQ_STAGE_ENV, "split")
    assert {d: cb.defines(d, True, False, "b", True) for d in cb.HEAD_DIMS} == default
    monkeypatch.setenv(cb.DQ_STAGE_ENV, "b64")
    assert cb.pick_dq_stage() == "b64"
    for d in cb.HEAD_DIMS:
        b64 = dict(default[d])
        del b64["TW_DQ_STAGE_SPLIT"]
        assert cb.defines(d, True, False, "b", True) == b64
        assert "TW_DQ_STAGE_SPLIT" not in cb.defines(d, True, False, "b", True, packed=True)
        assert cb.defines(d, True, False, "b", True, dq_stage="split") == default[d]
        for variant in cb.VARIANTS:  # without dQ in the pass: nothing to stage
            assert "TW_DQ_STAGE_SPLIT" not in cb.defines(d, False, True, variant)
    monkeypatch.delenv(cb.DQ_STAGE_ENV)
    assert "TW_DQ_STAGE_SPLIT" not in cb.defines(64, False, False, "b", True, dq_stage="b64")
    with pytest.raises(ValueError, match="unknown dQ staging 'v2'"):
        cb.defines(64, False, False, "b", True, dq_stage="v2")
    monkeypatch.setenv(cb.DQ_STAGE_ENV, "32")
    with pytest.raises(ValueError, match="TILEWRIGHT_CUDA_ATTN_BWD_DQ_STAGE: unknown staging '32'"):
        cb.pick_dq_stage()
    with pytest.raises(ValueError, match="TILEWRIGHT_CUDA_ATTN_BWD_DQ_STAGE: unknown staging '32'"):
        cb.defines(64, False, False, "b", True)
    assert "TW_DQ_STAGE_SPLIT" not in cb.defines(64, False, False, "b")  # read only for dQ in the pass


def test_the_step_switch_names_its_builds(monkeypatch):
    """TILEWRIGHT_CUDA_ATTN_BWD_STEP: comma-separated names of STEP_OPTIONS (any order, spaces), "none" or empty
    none (the plain builds, their macros and cache keys as before the options); unset, the build head dim's default
    (DEFAULT_STEP_BY_HEAD_DIM: "defer" at 128 and the dims its build takes, none at 64). "defer" / "stsm" add their
    macros to dQ-in-the-pass builds only, "lds64" to every dK / dV build; the soft-cap builds of two consumers at head
    dim 128 take none (they spilled); an explicit ``step`` wins over the variable; an unknown name raises naming it."""
    macros = set(cb.STEP_OPTIONS.values())
    monkeypatch.setenv(cb.STEP_ENV, "none")
    default = {(d, dq): cb.defines(d, True, False, "b", dq) for d in cb.HEAD_DIMS for dq in (False, True)}
    assert not any(macros & set(defs) for defs in default.values())
    monkeypatch.delenv(cb.STEP_ENV, raising=False)
    assert cb.pick_step() == cb.DEFAULT_STEP == () and cb.pick_step(64) == ()
    assert cb.pick_step(128) == cb.pick_step(96) == cb.DEFAULT_STEP_BY_HEAD_DIM[128] == ("defer",)
    assert cb.defines(64, True, False, "b", True) == default[64, True]
    assert cb.defines(128, True, False, "b", True) == {**default[128, True], "TW_DQ_DEFER": 1}
    assert cb.defines(128, True, False, "b", False) == default[128, False]  # (no dQ in the pass: nothing to defer)
    for value in ("", "none", " , "):
        monkeypatch.setenv(cb.STEP_ENV, value)
        assert cb.pick_step() == () == cb.pick_step(128) and cb.defines(64, True, False, "b", True) == default[64, True]
        assert cb.defines(128, True, False, "b", True) == default[128, True]
    monkeypatch.setenv(cb.STEP_ENV, "lds64, defer")
    assert cb.pick_step() == ("defer", "lds64")  # STEP_OPTIONS' order
    for d in cb.HEAD_DIMS:
        assert cb.defines(d, True, False, "b", True) == {**default[d, True], "TW_DQ_DEFER": 1, "TW_STATS_LDS64": 1}
        assert cb.defines(d, True, False, "b", False) == {**default[d, False], "TW_STATS_LDS64": 1}
        assert cb.defines(d, True, False, "b", True, step=()) == default[d, True]
    monkeypatch.setenv(cb.STEP_ENV, "defer,stsm")
    assert cb.defines(64, False, False, "a") == cb.defines(64, False, False, "a", step=())  # no dQ: nothing to do
    assert macros & set(cb.defines(64, True, False, "b", True, softcap=True)) == {"TW_DQ_DEFER", "TW_DS_STMATRIX"}
    assert not macros & set(cb.defines(128, True, False, "b", True, softcap=True))  # spilled there
    assert not macros & set(cb.defines(128, True, False, "b", False, softcap=True, step=("lds64",)))
    assert "TW_STATS_LDS64" in cb.defines(128, True, False, "a", False, softcap=True, step=("lds64",))
    monkeypatch.setenv(cb.STEP_ENV, "defer,ldg")
    with pytest.raises(ValueError, match="TILEWRIGHT_CUDA_ATTN_BWD_STEP: unknown 'ldg'"):
        cb.pick_step()
    with pytest.raises(ValueError, match="TILEWRIGHT_CUDA_ATTN_BWD_STEP: unknown 'ldg'"):
        cb.defines(64, False, False, "b", True)
    with pytest.raises(ValueError, match="step option: unknown 'x'"):
        cb.defines(64, False, False, "b", True, step=("x",))


def _fragment_bytes_sts(warp: int, lane: int, c: int) -> dict:
    """The dS^T bytes (offset in the step's buffer -> (lane, register, byte)) one thread writes with the 32-bit
    stores of attention_bwd_sm90.cu: ds[2j + h] at row 64c + 16 warp + lane / 4 + 8h, unit j ^ (row % 8), byte
    4 (lane % 4) of the unit."""
    out = {}
    for j in range(cb.BLOCK_M // 8):
        for h in range(2):
            row = 64 * c + 16 * warp + lane // 4 + 8 * h
            at = row * 128 + (j ^ (row % 8)) * 16 + 4 * (lane % 4)
            out.update({at + b: (lane, 2 * j + h, b) for b in range(4)})
    return out


def _fragment_bytes_stmatrix(warp: int, c: int) -> dict:
    """The same for a warp's four stmatrix.x4 (TW_DS_STMATRIX), from the instruction's definition: call i, matrix m
    gets register ds[4i + m]; lane l supplies the address of row l % 8 of matrix l / 8; lane l's register holds row
    l / 4, columns 2 (l % 4) and + 1 (bytes 4 (l % 4) .. + 3 of the 16-byte row)."""
    addr = {}
    for i in range(cb.BLOCK_M // 16):
        for lane in range(32):
            mat, rr = lane >> 3, lane & 7
            row = 64 * c + 16 * warp + 8 * (mat & 1) + rr
            addr[i, mat, rr] = row * 128 + (((2 * i + (mat >> 1)) ^ rr) * 16)
    out = {}
    for (i, mat, rr), row_at in addr.items():
        for lane in range(32):
            if lane // 4 == rr:
                out.update({row_at + 4 * (lane % 4) + b: (lane, 4 * i + mat, b) for b in range(4)})
    return out


def test_dst_by_stmatrix_writes_the_bytes_of_the_32_bit_stores():
    """TW_DS_STMATRIX's address map (the kernel's formula, restated) puts every register byte of every lane where the
    16 32-bit stores put it, under the 128B swizzle that the dQ wgmma's descriptor reads: the same 2 KB of each
    warp, no byte twice; and each 8 x 8 matrix's 8 rows fall in 8 distinct 16-byte units (one wavefront)."""
    for c in range(2):
        for warp in range(4):
            sts = {}
            for lane in range(32):
                sts.update(_fragment_bytes_sts(warp, lane, c))
            stsm = _fragment_bytes_stmatrix(warp, c)
            assert len(sts) == len(stsm) == 16 * 32 * 4
            assert sts == stsm
    for i in range(4):
        for mat in range(4):
            rows = [((8 * (mat & 1) + rr) * 128 + (((2 * i + (mat >> 1)) ^ rr) * 16)) for rr in range(8)]
            assert len({(at % 128) // 16 for at in rows}) == 8


def _step_loop(text: str, kernel: str = "tw_attn_bwd_dkdv_sm90") -> list:
    """The dK / dV consumers' step loop of a SASS listing: the shortest span from a backward branch's target to the
    branch that encloses every HGMMA of ``kernel`` (instruction strings, predicates kept)."""
    part = next(p for p in re.split(r"\n\s*Function : ", text)[1:] if p.startswith(kernel))
    ops = re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", part)
    at = {int(a, 16): i for i, (a, _) in enumerate(ops)}
    mma = [i for i, (_, op) in enumerate(ops) if "HGMMA" in op]
    spans = [(at[int(t, 16)], i) for i, (_, op) in enumerate(ops) if "BRA" in op
             for t in re.findall(r"0x([0-9a-f]+)", op)[:1] if int(t, 16) in at]
    first, last = min((s for s in spans if s[0] <= mma[0] and s[1] >= mma[-1]), key=lambda s: s[1] - s[0])
    return [op for _, op in ops[first:last + 1]]


def _count(ops: list, pattern: str) -> int:
    return sum(bool(re.match(r"(@!?U?P\w+\s+)?" + pattern, op)) for op in ops)


@needs_compiler
@pytest.mark.parametrize("label", ["dkdv b+dq hdim64 full bf16 defer", "dkdv b+dq hdim64 full bf16 stsm",
                                   "dkdv b+dq hdim64 full bf16 lds64", "dkdv b+dq hdim64 full bf16 defer stsm lds64",
                                   "dkdv b+dq hdim128 causal bf16 defer stsm lds64"])
def test_the_step_options_move_data_as_intended(cache, label):
    """Each step option's build against the default one (the same head dim, mask and staging), in the step loop
    (nvcc 13.0): no spills or local memory, the same HGMMAs; stsm: 4 STSM.16.M88.4 for 16 of the 32-bit STS (dS^T),
    the other stores as they were; lds64: 16 LDS.64 for 32 LDS (the statistics; the one left is the stage's copy);
    defer: the staging's fence (MEMBAR + FENCE.VIEW.ASYNC) + READY arrive now follow the step's first eight HGMMAs
    (S^T, dP^T) and come before dV's, and the kernel holds one more of each (after the loop)."""
    rows = {r[0]: r for r in cb.build_check_builds()}
    base_label = label.split(" bf16")[0] + " bf16"
    if base_label not in rows:  # the default build of that shape (no row of its own)
        d, causal = (64, False) if "hdim64" in label else (128, True)
        base_defines = cb.defines(d, causal, False, "b", True, dq_stage=cb.DEFAULT_DQ_STAGE, step=())
    else:
        base_defines = rows[base_label][1]
    new = build.compile_source(cb.SOURCE, "sm_90a", rows[label][1])
    old = build.compile_source(cb.SOURCE, "sm_90a", base_defines)
    info = build_check.parse_ptxas(new.log)
    assert info["spills"] == 0 and info["stack"] == 0, new.log
    text, base = build_check.sass(new.cubin), build_check.sass(old.cubin)
    assert text is not None and base is not None, "the SASS check needs cuobjdump (shipped in the triton wheel)"
    assert not re.search(r"\b(LDL|STL)\b", text)
    loop, loop0 = _step_loop(text), _step_loop(base)
    assert [op.split()[0] for op in loop if "HGMMA" in op] == [op.split()[0] for op in loop0 if "HGMMA" in op]
    stsm, lds64, defer = ("stsm" in label, "lds64" in label, "defer" in label)
    assert _count(loop0, r"STSM") == 0 and _count(loop, r"STSM\.16\.M88\.4 ") == (4 if stsm else 0)
    assert _count(loop, r"STS ") == _count(loop0, r"STS ") - (16 if stsm else 0)
    assert _count(loop0, r"LDS\.64") == 0 and _count(loop, r"LDS\.64 ") == (16 if lds64 else 0)
    assert _count(loop, r"LDS ") == _count(loop0, r"LDS ") - (32 if lds64 else 0)
    for pattern in (r"FENCE\.VIEW\.ASYNC\.S", r"MEMBAR", r"BAR\.ARV", r"BAR\.SYNC"):
        assert _count(loop, pattern) == _count(loop0, pattern), pattern
        whole, whole0 = _sass_kernels(text)[DKDV], _sass_kernels(base)[DKDV]
        extra = 1 if defer and pattern != r"BAR\.SYNC" else 0
        assert _count(whole, pattern) == _count(whole0, pattern) + extra, pattern
    mma = [i for i, op in enumerate(loop) if "HGMMA" in op]
    first = 2 * rows[label][1]["TW_HDIM"] // 16  # S^T's and dP^T's k-steps; dV's product is next
    first_fence = next(i for i, op in enumerate(loop) if "FENCE.VIEW.ASYNC" in op)
    first_arrive = next(i for i, op in enumerate(loop) if "BAR.ARV" in op)
    if defer:
        assert mma[first - 1] < first_fence < first_arrive < mma[first]
    else:
        assert first_fence > mma[first] and first_arrive > mma[first]


@needs_compiler
@pytest.mark.parametrize("build_args", [(128, True, False, "a", False, {}), (64, True, True, "b", True,
                                                                             {"packed": True}),
                                        (128, True, False, "b", True, {"packed": True, "upper_offset": True}),
                                        (64, True, True, "b", True, {"window": True, "softcap": True}),
                                        (128, True, False, "a", False, {"window": True, "softcap": True})])
def test_the_step_options_compile_spill_free_in_the_other_builds(cache, build_args):
    """All three options in builds outside the build-check rows: variant a at head dim 128 (one consumer, 250
    registers without them), packed batches with dQ in the pass (their zeroing and the foreign rows' zero partials),
    the soft cap and a window at head dim 64, and at 128 with one consumer (two consumers' soft-cap builds at 128 take
    none: they spilled). No spills, stack or local memory."""
    d, causal, fp16, variant, dq, extra = build_args
    defs = cb.defines(d, causal, fp16, variant, dq, step=tuple(cb.STEP_OPTIONS), **extra)
    assert "TW_STATS_LDS64" in defs and ("TW_DS_STMATRIX" in defs) == dq
    b = build.compile_source(cb.SOURCE, "sm_90a", defs)
    info = build_check.parse_ptxas(b.log)
    assert info["spills"] == 0 and info["stack"] == 0, b.log
    assert not build_check.PERF_WARNINGS.search(b.log), b.log
    assert not re.search(r"\b(LDL|STL)\b", build_check.sass(b.cubin))


def test_the_op_layer_keeps_triton_off_the_gpu_and_for_a_non_positive_scale(monkeypatch):
    """With the switch on, CPU tensors (the interpreter) or a non-positive scale still never reach the CUDA kernel."""
    monkeypatch.setenv(cb.ENV, "1")
    q = torch.randn(1, 2, 16, 64)
    args = (q, q, q, q, torch.empty(1, 2, 16), q, q, q, True, 0.125, 0, None, 0.0)
    assert ops_attention._cuda_backward(*args, "triton") == (None, None, None)
    assert ops_attention._cuda_backward(*args[:9], 0.0, *args[10:], "triton") == (None, None, None)
    assert ops_attention._cuda_backward(*args, "cuda", "triton") == (None, None, None)  # the caller asked for Triton


def test_the_op_layer_plans_each_signature_once(monkeypatch):
    """The op layer's decision on (fake) sm_90 CUDA tensors: dQ in the dK / dV pass by default, the dQ kernel under
    torch.use_deterministic_algorithms or with one consumer, Triton's dQ for a dq the kernel cannot write, Triton's
    whole backward for backend="triton" or a grid of too few CTAs; the constraints run once per signature."""
    monkeypatch.setattr(ops_attention, "capability", lambda device: (9, 0))
    monkeypatch.setattr(ops_attention, "_cuda_plans", {})
    for name in (cb.ENV, cb.VARIANT_ENV, cb.DQ_ENV):
        monkeypatch.delenv(name, raising=False)
    checks = []
    real = cb.constraints
    monkeypatch.setattr(cb, "constraints", lambda *a, **kw: checks.append(1) or real(*a, **kw))
    B, Hq, Hkv, S, D = 8, 16, 4, 2048, 128  # 16 x 4 x 8 = 512 CTAs
    q, do, dq = (_t(B, Hq, S, D) for _ in range(3))
    k, v, dk, dv = (_t(B, Hkv, S, D) for _ in range(4))
    lse = torch.empty(B, Hq, S)

    def plan(q=q, do=do, dq=dq, k=k, v=v, dk=dk, dv=dv, lse=lse, backend=None):
        return ops_attention._cuda_backward(do, q, k, v, lse, dq, dk, dv, True, D ** -0.5, 0, None, 0.0, "cuda",
                                            backend)

    dkdv, dq_launch, stats = plan()
    assert callable(dkdv) and dq_launch is ops_attention._dq_done  # dQ written by the dK / dV pass
    # a fresh buffer a call for the preprocess to fill with the kernel's packed statistics
    assert stats.shape == (B, Hq, S // 64, 2, 64) and stats.dtype == torch.float32 and stats.is_contiguous()
    assert plan()[2].data_ptr() != stats.data_ptr() or stats.numel() == 0
    assert len(checks) == 1  # the same signature again: no second check
    assert plan(backend="triton") == (None, None, None)
    torch.use_deterministic_algorithms(True)
    try:
        assert plan()[1] not in (None, ops_attention._dq_done)  # the deterministic dQ kernel
    finally:
        torch.use_deterministic_algorithms(False)
    monkeypatch.setenv(cb.VARIANT_ENV, "a")  # one consumer warpgroup: no dQ in the pass
    assert plan()[1] not in (None, ops_attention._dq_done)
    monkeypatch.setenv(cb.DQ_ENV, "kernel")
    assert plan(dq=_t(B, Hq, S, 2 * D)[..., ::2])[1] is None  # a dq the dQ kernel cannot write: Triton's dQ
    small = dict(q=_t(1, Hq, 512, D), do=_t(1, Hq, 512, D), dq=_t(1, Hq, 512, D), lse=torch.empty(1, Hq, 512),
                 **{n: _t(1, Hkv, 512, D) for n in ("k", "v", "dk", "dv")})
    monkeypatch.delenv(cb.VARIANT_ENV)
    assert plan(**small) == (None, None, None)  # 4 x 4 x 1 = 16 CTAs: Triton's backward


def test_the_op_layer_replans_when_a_switch_changes(monkeypatch):
    """Every switch a plan reads is in its key (attention_bwd_sm90.PLAN_SWITCHES): setting the GQA split's
    override after a first call takes effect at the next call without clearing the plans, and unsetting it brings
    the rule's plan back."""
    assert cb.PLAN_SWITCHES == (cb.ENV, cb.VARIANT_ENV, cb.DQ_ENV, cb.SPLIT_ENV, cb.DQ_STAGE_ENV, cb.STEP_ENV)
    monkeypatch.setattr(ops_attention, "capability", lambda device: (9, 0))
    monkeypatch.setattr(ops_attention, "sm_count", lambda device: 132)
    monkeypatch.setattr(ops_attention, "_cuda_plans", {})
    for name in cb.PLAN_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    B, Hq, Hkv, S, D = 1, 28, 4, 3000, 128  # 24 key blocks x 4 KV heads = 96 CTAs: the rule splits the 7-head group
    q, do, dq = (_t(B, Hq, S, D) for _ in range(3))
    k, v, dk, dv = (_t(B, Hkv, S, D) for _ in range(4))
    lse = torch.empty(B, Hq, S)

    def heads():
        ops_attention._cuda_backward(do, q, k, v, lse, dq, dk, dv, True, D ** -0.5, 0, None, 0.0, "cuda")
        env = ops_attention._cuda_bwd_switches()
        plan, = [p for key, p in ops_attention._cuda_plans.items() if key[0] == env]
        return plan.heads

    assert heads() == 4
    monkeypatch.setenv(cb.SPLIT_ENV, "7")
    assert heads() is None  # the whole group: no split
    monkeypatch.setenv(cb.SPLIT_ENV, "2")
    assert heads() == 2
    monkeypatch.delenv(cb.SPLIT_ENV)
    assert heads() == 4 and len(ops_attention._cuda_plans) == 3


def test_the_backward_replay_key_leaves_out_what_the_full_path_changes(monkeypatch):
    """The backward replay keys only calls its launches serve as given: an LSE gradient, a non-positive or non-float
    scale, a copy the full path would make (a non-unit last stride, a non-contiguous lse) or an ineligible call
    (traced, not plain CUDA tensors: ``_fast.eligible``) have no key; the key follows the options, the deterministic
    flag and the CUDA backward's switches."""
    monkeypatch.setattr(ops_attention._fast, "eligible", lambda *t: True)  # (CPU tensors stand in for CUDA ones)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    for name in cb.PLAN_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    q, do, out = (_t(1, 4, 64, 64) for _ in range(3))
    k, v = _t(1, 2, 64, 64), _t(1, 2, 64, 64)
    lse = torch.empty(1, 4, 64)

    def key(**kw):
        a = dict(grad_out=do, grad_lse=None, q=q, k=k, v=v, out=out, lse=lse, causal=True, bottom_right=False,
                 scale=0.125, softcap=0.0, backend=None, window_left=-1, window_right=-1)
        a.update(kw)
        return ops_attention._bwd_replay_key(*a.values())

    base = key()
    assert base is not None and key() == base
    assert key(grad_lse=torch.zeros(1, 4, 64)) is None
    assert key(scale=-0.125) is None and key(scale=0.0) is None and key(scale=1) is None
    assert key(q=_t(1, 4, 64, 128)[..., ::2]) is None and key(lse=torch.empty(1, 64, 4).transpose(1, 2)) is None
    assert key(causal=False) != base and key(window_left=32) != base and key(softcap=5.0) != base
    monkeypatch.setenv(cb.SPLIT_ENV, "1")
    assert key() != base
    monkeypatch.delenv(cb.SPLIT_ENV)
    monkeypatch.setenv(cb.DQ_STAGE_ENV, "split")  # another dK / dV build for the plan's bound launch
    assert key() != base
    monkeypatch.delenv(cb.DQ_STAGE_ENV)
    monkeypatch.setenv(cb.STEP_ENV, "stsm")  # so is a step option
    assert key() != base
    monkeypatch.delenv(cb.STEP_ENV)
    torch.use_deterministic_algorithms(True)
    try:
        assert key() != base
    finally:
        torch.use_deterministic_algorithms(False)
    monkeypatch.setattr(ops_attention._fast, "eligible", lambda *t: False)
    assert key() is None


def test_the_backward_replay_launches_as_the_bound_path(monkeypatch):
    """A replayed backward allocates fresh dq / dk / dv, delta and statistics, then launches the bound preprocess
    on (out, dO, delta, delta, lse, stats), then the plan's dK / dV launch with dQ's fp32 workspace in dq's dim order
    (zeroed), then converts the workspace into dq - the order attention_backward's bound path takes."""
    events = []

    class Plan:
        mode = "atomic"

        def stats_shape(self, lse):
            return (*lse.shape[:2], 1, 2, 64)

        def dkdv(self, tensors, causal, scale, acc, packed, stats):
            events.append(("dkdv", [t.data_ptr() for t in tensors], causal, scale, acc.shape, acc.stride(),
                           bool((acc == 0).all()), stats.data_ptr()))
            acc.fill_(3.0)

    q, do, out = (_t(1, 4, 64, 32) for _ in range(3))
    k, v = _t(1, 2, 64, 32), _t(1, 2, 64, 32)
    lse = torch.empty(1, 4, 64)
    dq_like = torch.empty_like(q)
    replay = ops_attention._BackwardReplay(Plan(), lambda *ptrs: events.append(("pre", ptrs)), True, 0.125, lse,
                                           dq_like)
    dq, dk, dv = replay(do, q, k, v, out, lse)
    (pre, ptrs), (name, tensors, causal, scale, acc_shape, acc_stride, zeroed, stats_ptr) = events
    assert pre == "pre" and name == "dkdv" and causal is True and scale == 0.125 and zeroed
    delta_ptr = ptrs[2]
    assert ptrs == (out.data_ptr(), do.data_ptr(), delta_ptr, delta_ptr, lse.data_ptr(), stats_ptr)
    assert tensors[:5] == [do.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), lse.data_ptr()]
    assert tensors[5] == delta_ptr and tensors[6:] == [dk.data_ptr(), dv.data_ptr()]
    assert acc_shape == q.shape and acc_stride == dq.stride() and torch.equal(dq, torch.full_like(dq, 3.0))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


class _RecordingDriver:
    """Records the backward's builds, maps and launches (no GPU)."""

    def __init__(self):
        self.maps, self.launches = [], []

    def function(self, bld, name, smem):
        return (name, smem)

    def encode_tiled(self, dtype, ptr, dims, strides, box, swizzle):
        self.maps.append((dtype, ptr, tuple(dims), tuple(strides), tuple(box)))
        return types.SimpleNamespace(index=len(self.maps))

    def launch(self, fn, grid, block, smem, stream, args):
        self.launches.append((fn, grid, block, smem, args))


def test_packed_launches_take_the_varlen_builds_and_offsets(monkeypatch):
    """Packed sequences through both backward kernels: the TW_VARLEN builds (runtime upper edge under causal), maps
    over the (1, H, total, D) views, grids of the longest sequence's blocks x heads x sequences, the band relative to
    each sequence's corner and cu_q / cu_k as the last arguments; dense launches pass null pointers there."""
    from tilewright._codes import Varlen
    from tilewright.cuda_fallback.runtime import launch

    drv, builds = _RecordingDriver(), []
    monkeypatch.setattr(build, "compile_source", lambda src, arch, defines: builds.append(dict(defines)) or
                        types.SimpleNamespace(key="k"))
    monkeypatch.setattr(launch, "driver", lambda: drv)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: types.SimpleNamespace(cuda_stream=0))
    monkeypatch.setattr(cb, "_prepared", {})
    monkeypatch.setattr(cb, "_prepared_dq", {})
    lens_q, lens_k = (300, 5, 700), (300, 260, 700)
    cu = lambda lens: torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)  # noqa: E731
    packed = Varlen(cu(lens_q), cu(lens_k), 700, 700)
    view = lambda t: t.unsqueeze(0).transpose(1, 2)  # noqa: E731
    q, do, dq = (view(torch.randn(1005, 8, 128, dtype=torch.bfloat16)) for _ in range(3))
    k, v, dk, dv = (view(torch.randn(1260, 2, 128, dtype=torch.bfloat16)) for _ in range(4))
    lse, delta = torch.empty(1, 8, 1005), torch.empty(1, 8, 1005)
    acc = torch.zeros(1, 8, 1005, 128)
    # (validate=False: the constraints ask for CUDA tensors)
    cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, True, 0.1, "b", dq_accum=acc, validate=False, packed=packed)
    cb.launch_dq(do, q, k, v, lse, delta, dq, True, 0.1, validate=False, packed=packed)
    assert all(b["TW_VARLEN"] == 1 and b["TW_UPPER_OFFSET"] == 1 and b["TW_CAUSAL"] == 1 for b in builds)
    (fn, grid, block, _, args), (fn_dq, grid_dq, _, _, args_dq) = drv.launches
    assert fn[0] == cb.KERNEL and grid == (6, 2, 3) and block == (384, 1, 1)  # ceil(700 / 128) key blocks
    assert fn_dq[0] == cb.KERNEL_DQ and grid_dq == (11, 8, 3)  # ceil(700 / 64) query blocks
    assert drv.maps[0][2] == (128, 1005, 8, 1) and drv.maps[1][2] == (128, 1260, 2, 1)
    assert args[7].value == 0  # no packed statistics: the packed build reads lse / delta itself
    assert [a.value for a in args[16:19]] == [1005, 1260, 8]  # Sq / Skv: the totals; Hq
    assert [a.value for a in args[23:25]] == [0, -(700 + 700 + 2)]  # corner-relative; no lower edge
    assert [a.value for a in args[-2:]] == [packed.cu_q.data_ptr(), packed.cu_k.data_ptr()]
    assert [a.value for a in args_dq[-2:]] == [packed.cu_q.data_ptr(), packed.cu_k.data_ptr()]
    # dense: the same kernels with null trailing pointers and no TW_VARLEN
    dq4, dk4, dv4 = (torch.randn(2, h, 100, 128, dtype=torch.bfloat16) for h in (8, 2, 2))
    cb.launch_dq(dq4, dq4, dk4, dv4, torch.empty(2, 8, 100), torch.empty(2, 8, 100), dq4.clone(), False, 0.1,
                 validate=False)
    assert "TW_VARLEN" not in builds[-1] and [a.value for a in drv.launches[-1][4][-2:]] == [0, 0]
    # the dense dK / dV launch reads the packed statistics (made from lse / delta when the caller gives none)
    lse4, delta4 = torch.randn(2, 8, 100), torch.randn(2, 8, 100)
    stats = cb.pack_statistics(lse4, delta4)
    cb.launch_dkdv(dq4, dq4, dk4, dv4, lse4, delta4, dk4.clone(), dv4.clone(), False, 0.1, "b", validate=False,
                   stats=stats)
    assert "TW_VARLEN" not in builds[-1]
    assert drv.launches[-1][4][7].value == stats.data_ptr() and drv.launches[-1][3] == cb.smem_bytes(128, "b")
    with pytest.raises(ValueError, match="stats are for dense calls"):
        cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, True, 0.1, "b", validate=False, packed=packed, stats=stats)
    with pytest.raises(ValueError, match="binds with its packed statistics"):
        cb.bind_dkdv(dq4, dq4, dk4, dv4, lse4, delta4, dk4.clone(), dv4.clone(), False, 0.1, "b")


def test_packed_statistics_layout():
    """pack_statistics: per 64-row block of each (b, h), the base-2 LSEs then the deltas; +inf for an LSE of -inf (a
    row that sees no key) and on the padding rows past Sq, whose deltas are 0; the shape check names the argument."""
    lse, delta = torch.randn(2, 3, 130) * 4, torch.randn(2, 3, 130)
    lse[1, 2, 7] = float("-inf")
    stats = cb.pack_statistics(lse, delta)
    assert stats.shape == cb.statistics_shape(2, 3, 130) == (2, 3, 3, 2, 64) and stats.is_contiguous()
    flat = stats.transpose(3, 4)  # (2, 3, 3, 64, 2): row-major rows
    rows = flat.reshape(2, 3, 192, 2)
    expect = torch.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    torch.testing.assert_close(rows[..., :130, 0], expect)
    torch.testing.assert_close(rows[..., :130, 1], delta)
    assert rows[1, 2, 7, 0] == float("inf") and torch.isinf(rows[..., 130:, 0]).all() and (rows[..., 130:, 0] > 0).all()
    assert (rows[..., 130:, 1] == 0).all()
    with pytest.raises(ValueError, match="stats must be a contiguous float32"):
        cb.check_statistics_pack(stats[:, :, :2], torch.empty(2, 3, 130, 64))


def test_the_preprocess_writes_the_packed_statistics():
    """The Triton backward's preprocess (interpreter) fills the buffer exactly as pack_statistics lays it out, dLSE
    folded into delta, from a tail block of 36 rows; the rest of the backward is unchanged by it."""
    from tilewright.triton_kernels import attention as tk

    torch.manual_seed(0)
    B, H, S, D = 1, 2, 100, 64
    q, k, v = (torch.randn(B, H, S, D) for _ in range(3))
    do, dlse = torch.randn(B, H, S, D), torch.randn(B, H, S)
    out, lse = torch.randn(B, H, S, D), torch.randn(B, H, S)
    lse[0, 1, 5] = float("-inf")
    grads = [[torch.empty_like(t) for t in (q, k, v)] for _ in range(2)]
    stats = torch.full(cb.statistics_shape(B, H, S), float("nan"))
    for g, st in zip(grads, (None, stats)):
        tk.attention_backward(do, q, k, v, out, lse, *g, False, 0.125, dlse=dlse, stats=st)
    delta = (do * out).sum(-1) - dlse
    torch.testing.assert_close(stats, cb.pack_statistics(lse, delta), rtol=1e-5, atol=1e-5)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_gqa_group_splits_only_where_the_grid_leaves_sms_idle(monkeypatch):
    """heads_per_cta: the whole group for a grid of >= one CTA an SM, a group under 4 heads or fewer than 2560 keys;
    else two slices (96 CTAs of a 7-head group at 3000 keys on 132 SMs: 4 heads a CTA); the environment overrides it,
    a bad value names the variable. new_partials / add_partials: slices summed into dk / dv's own head-dim
    columns."""
    monkeypatch.delenv(cb.SPLIT_ENV, raising=False)
    assert cb.heads_per_cta(512, 4, 132, 8192) == 4 and cb.heads_per_cta(20, 1, 132, 8192) == 1
    assert cb.heads_per_cta(96, 7, 132, 3000) == 4 and cb.heads_per_cta(128, 8, 132, 4096) == 4
    assert cb.heads_per_cta(128, 4, 132, 2048) == 4 and cb.heads_per_cta(64, 2, 132, 8192) == 2
    monkeypatch.setenv(cb.SPLIT_ENV, "2")
    assert cb.heads_per_cta(512, 4, 132, 8192) == 2 and cb.heads_per_cta(96, 1, 132, 8192) == 1
    monkeypatch.setenv(cb.SPLIT_ENV, "0")
    with pytest.raises(ValueError, match=cb.SPLIT_ENV):
        cb.heads_per_cta(96, 7, 132, 3000)
    dk, dv = torch.empty(2, 3, 10, 96, dtype=torch.bfloat16), torch.empty(2, 3, 10, 96, dtype=torch.bfloat16)
    q, k = torch.empty(2, 21, 10, 96), torch.empty(2, 3, 10, 96)  # a 7-head group at head dim 96 (the 128 build)
    assert cb.new_partials(q, k, dk, None) is None and cb.new_partials(q, k, dk, 7) is None
    partial = cb.new_partials(q, k, dk, 3)
    assert partial.shape == (2, 3, 2, 3, 10, 128) and partial.dtype == torch.float32
    partial.normal_()
    cb.add_partials(partial, dk, dv)
    torch.testing.assert_close(dk.float(), partial[0].sum(0)[..., :96], rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(dv.float(), partial[1].sum(0)[..., :96], rtol=1e-2, atol=1e-2)
    dk_bshd = torch.empty(2, 10, 3, 96, dtype=torch.bfloat16).transpose(1, 2)  # k's (B, S, H, D) memory order
    cb.add_partials(partial, dk_bshd, dv)
    assert torch.equal(dk_bshd, dk)


def test_a_split_launch_widens_the_grid_and_passes_the_partials(monkeypatch):
    """launch_dkdv with heads_per_cta below the group: grid y = Hkv x slices, the heads and the partials' address as
    the arguments before cu_q / cu_k, then the partials added into dk / dv; bind_dkdv refuses a split without its
    partials and heads_per_cta outside [1, group] raises."""
    from tilewright.cuda_fallback.runtime import launch

    drv = _RecordingDriver()
    monkeypatch.setattr(build, "compile_source", lambda src, arch, defines: types.SimpleNamespace(key="k"))
    monkeypatch.setattr(launch, "driver", lambda: drv)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: types.SimpleNamespace(cuda_stream=0))
    monkeypatch.setattr(cb, "_prepared", {})
    added = []
    monkeypatch.setattr(cb, "add_partials", lambda p, dk, dv: added.append(p.shape))
    q, do = torch.randn(1, 7, 300, 128, dtype=torch.bfloat16), torch.randn(1, 7, 300, 128, dtype=torch.bfloat16)
    k, v = torch.randn(1, 1, 300, 128, dtype=torch.bfloat16), torch.randn(1, 1, 300, 128, dtype=torch.bfloat16)
    lse, delta = torch.randn(1, 7, 300), torch.randn(1, 7, 300)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, True, 0.1, "b", validate=False, heads_per_cta=3)
    fn, grid, block, smem, args = drv.launches[-1]
    assert grid == (3, 3, 1)  # ceil(300 / 128) key blocks, 1 KV head x 3 slices of the 7-head group
    assert args[-4].value == 3 and args[-3].value != 0 and [a.value for a in args[-2:]] == [0, 0]
    assert added == [(2, 3, 1, 1, 300, 128)]
    cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, True, 0.1, "b", validate=False)  # the whole group
    whole = drv.launches[-1]
    assert whole[1] == (3, 1, 1) and whole[4][-4].value == 7 and whole[4][-3].value == 0
    with pytest.raises(ValueError, match="heads_per_cta 8 must be in"):
        cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, True, 0.1, "b", validate=False, heads_per_cta=8)
    with pytest.raises(ValueError, match="heads_per_cta 0 must be in"):
        cb.bind_dkdv(do, q, k, v, lse, delta, dk, dv, True, 0.1, "b", None, (0, None), 0.0, None,
                     cb.pack_statistics(lse, delta), 0)
    with pytest.raises(ValueError, match="binds with its partials"):
        cb.bind_dkdv(do, q, k, v, lse, delta, dk, dv, True, 0.1, "b", None, (0, None), 0.0, None,
                     cb.pack_statistics(lse, delta), 3)
