"""flash_attention_with_kvcache (ops/kvcache.py, triton_kernels/kvcache_attention.py): contiguous and paged caches,
GQA packing, several new tokens, appended k / v, windows, soft cap, rows without keys, split counts - against the
reference formula in fp64 (CPU tier: the Triton kernels under the interpreter, fp16 / fp32); cache slots past each
sequence's length and unused page-table entries are poisoned (NaN, out-of-range pages), so a kernel that reads them
fails; bad inputs raise naming the argument. The GPU tier (bf16, the bench rows) is tests/test_kvcache_gpu.py."""
from __future__ import annotations

import functools
import re

import pytest
import torch

import tilewright
from tilewright.reference import kvcache_attention_reference

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _cache(B, S, Hkv, D, dtype, lengths, page=None, seed=0):
    """A cache holding ``lengths[b]`` tokens per sequence and NaN everywhere else: contiguous (B, S, Hkv, D), or
    paged (pages, page, Hkv, D) with a shuffled block table whose unused entries point far outside the cache."""
    g = torch.Generator().manual_seed(seed)
    if page is None:
        k = torch.full((B, S, Hkv, D), float("nan"), dtype=dtype)
        v = torch.full_like(k, float("nan"))
        for b, n in enumerate(lengths):
            k[b, :n] = torch.randn(n, Hkv, D, generator=g).to(dtype)
            v[b, :n] = torch.randn(n, Hkv, D, generator=g).to(dtype)
        return k.to(DEV), v.to(DEV), None
    max_pages = -(-S // page)
    num_pages = B * max_pages + 3  # spare pages, never referenced
    k = torch.full((num_pages, page, Hkv, D), float("nan"), dtype=dtype)
    v = torch.full_like(k, float("nan"))
    order = torch.randperm(num_pages, generator=g)[:B * max_pages].reshape(B, max_pages).to(torch.int32)
    table = order.clone()
    for b, n in enumerate(lengths):
        used = -(-n // page)
        table[b, used:] = 10 ** 6  # unused entries: far out of range (must never be read)
        for t in range(n):
            p, o = int(order[b, t // page]), t % page
            k[p, o] = torch.randn(Hkv, D, generator=g).to(dtype)
            v[p, o] = torch.randn(Hkv, D, generator=g).to(dtype)
    return k.to(DEV), v.to(DEV), table.to(DEV)


def _ref(q, kc, vc, seqlens, table, causal=True, scale=None, softcap=0.0, window=None):
    kcd, vcd = kc.double().nan_to_num(0.0), vc.double().nan_to_num(0.0)  # unread slots: any value
    return kvcache_attention_reference(q.double(), kcd, vcd, seqlens, table, causal, scale, softcap, window)


def _assert_close(out, lse, ref, tol):
    ro, rl = ref
    assert torch.isfinite(out).all()
    assert (out.double() - ro).abs().max().item() <= tol
    assert torch.equal(torch.isinf(lse), torch.isinf(rl))
    finite = torch.isfinite(rl)
    if finite.any():  # (every row may see no key: empty sequences)
        assert (lse.double() - rl)[finite].abs().max().item() <= 1e-3


CASES = [  # (B, Sq, Hq, Hkv, D, S_cache, lengths, page, dtype)
    (2, 1, 4, 2, 64, 70, (50, 13), None, torch.float16),    # decode, GQA 2
    (2, 1, 8, 2, 32, 48, (47, 1), 16, torch.float16),       # paged, page 16, GQA 4
    (1, 3, 4, 4, 64, 40, (33,), 4, torch.float32),          # three new tokens, pages of 4, fp32
    (3, 2, 2, 1, 16, 24, (0, 5, 24), None, torch.float16),  # an empty sequence, a full one, MQA
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}-Sq{c[1]}-{c[2]}/{c[3]}-D{c[4]}-page{c[7]}")
def test_matches_the_reference(case):
    B, Sq, Hq, Hkv, D, S, lengths, page, dtype = case
    kc, vc, table = _cache(B, S, Hkv, D, dtype, lengths, page)
    q = torch.randn(B, Sq, Hq, D, dtype=dtype, device=DEV)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    out, lse = tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, block_table=table, return_lse=True)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (B, Hq, Sq)
    _assert_close(out, lse, _ref(q, kc, vc, seqlens, table), 2e-3 if dtype == torch.float16 else 1e-5)


@pytest.mark.parametrize("splits", [1, 3, 8])
def test_split_count_does_not_change_the_result(splits):
    kc, vc, table = _cache(1, 90, 2, 32, torch.float32, (90,), 8)
    q = torch.randn(1, 1, 4, 32, device=DEV)
    seqlens = torch.tensor([90], dtype=torch.int32, device=DEV)
    out, lse = tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, block_table=table, return_lse=True,
                                                       num_splits=splits)
    _assert_close(out, lse, _ref(q, kc, vc, seqlens, table), 1e-5)


@pytest.mark.parametrize("case", [(2, 1, 8, 2, 64, 100, (100, 37), None, 3, None),
                                  (1, 3, 4, 1, 40, 70, (70,), 8, 2, None),
                                  (3, 2, 6, 3, 32, 60, (60, 0, 9), None, 4, (7, 0)),
                                  (1, 1, 8, 2, 32, 200, (200,), None, 7, None)],
                         ids=["gqa4-3splits", "paged-Sq3-2splits", "empty-seq-window-4splits",
                              "7splits-two-chunks"])
def test_combine_fused_into_the_split_kernel(case):
    """The combine run by the last split to arrive (config fused_combine): the same answer as the second launch's
    combine (fp32 partials merged in split order: equal up to the output dtype's rounding), against the reference
    too - including a sequence with no keys (out 0, LSE -inf) and a window whose rows see keys in only some splits -
    and every arrival counter back at zero after the call (the next launch on the stream counts from zero)."""
    from tilewright.triton_kernels import kvcache_attention as ka
    from tilewright.triton_kernels.gemm import split_k_workspace

    B, Sq, Hq, Hkv, D, S, lengths, page, splits, window = case
    kc, vc, table = _cache(B, S, Hkv, D, torch.float16, lengths, page)
    q = torch.randn(B, Sq, Hq, D, dtype=torch.float16, device=DEV)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    win = window if window is not None else (None, None)
    two_launch = ka.kvcache_attention(q, kc, vc, seqlens, table, num_splits=splits, window=win)
    fused = ka.kvcache_attention(q, kc, vc, seqlens, table, num_splits=splits, window=win,
                                 config={"fused_combine": True})
    torch.testing.assert_close(fused[0].float(), two_launch[0].float(), rtol=0, atol=2e-3)
    torch.testing.assert_close(fused[1], two_launch[1], rtol=0, atol=1e-5)
    assert torch.equal(torch.isinf(fused[1]), torch.isinf(two_launch[1]))
    _assert_close(*fused, _ref(q, kc, vc, seqlens, table, window=window), 2e-3)
    assert not split_k_workspace(q.device)[1].any()


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("page", [None, 4])
def test_appends_the_new_tokens_in_place_then_attends(page, strided):
    """k / v are written at cache_seqlens ... + Sq_new - 1 (nothing else in the cache changes) and attended to;
    ``strided``: the lengths and the block table are non-contiguous views (every other element / column), which the
    append and attention launches must read through their strides or a dense copy."""
    lengths = (9, 0)
    kc, vc, table = _cache(2, 20, 2, 16, torch.float32, lengths, page)
    if page is not None:  # the new tokens' pages must be mapped: give each sequence all its pages
        table = torch.arange(10, device=DEV, dtype=torch.int32).reshape(2, 5)
        kc, vc = kc[:10].clone(), vc[:10].clone()
        kc[table[0].long()] = torch.randn(5, 4, 2, 16, device=DEV)  # sequence 0's 9 tokens (and slack) are real
        vc[table[0].long()] = torch.randn(5, 4, 2, 16, device=DEV)
    before_k, before_v = kc.clone(), vc.clone()
    q = torch.randn(2, 3, 4, 16, device=DEV)
    k_new, v_new = torch.randn(2, 3, 2, 16, device=DEV), torch.randn(2, 3, 2, 16, device=DEV)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    if strided:
        seqlens = torch.stack([seqlens, seqlens + 50], 1).flatten()[::2]  # the odd slots hold wrong lengths
        if table is not None:
            table = torch.stack([table, table.flip(1)], 2).flatten(1)[:, ::2]  # the odd columns hold other pages
        assert not seqlens.is_contiguous() and (table is None or not table.is_contiguous())
    out, lse = tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, k=k_new, v=v_new, block_table=table,
                                                       return_lse=True)
    changed = ((kc != before_k) & ~(torch.isnan(kc) & torch.isnan(before_k))) | \
        ((vc != before_v) & ~(torch.isnan(vc) & torch.isnan(before_v)))
    for b, n in enumerate(lengths):
        for t in range(3):
            if page is None:
                assert torch.equal(kc[b, n + t], k_new[b, t]) and torch.equal(vc[b, n + t], v_new[b, t])
                changed[b, n + t] = False
            else:
                p, o = int(table[b, (n + t) // page]), (n + t) % page
                assert torch.equal(kc[p, o], k_new[b, t]) and torch.equal(vc[p, o], v_new[b, t])
                changed[p, o] = False
    assert not changed.any(), "the append wrote outside the new tokens' slots"
    assert torch.equal(seqlens.cpu(), torch.tensor(lengths, dtype=torch.int32))  # cache_seqlens is not advanced
    _assert_close(out, lse, _ref(q, kc, vc, seqlens + 3, table), 1e-5)


@pytest.mark.parametrize("causal,window,softcap", [(True, (5, 0), 0.0), (False, (4, 2), 0.0), (False, None, 0.0),
                                                   (True, None, 3.0), (True, (7, None), 2.0)])
def test_masks_and_soft_cap(causal, window, softcap):
    lengths = (30, 11)
    kc, vc, table = _cache(2, 32, 2, 32, torch.float32, lengths, 8)
    q = torch.randn(2, 4, 4, 32, device=DEV)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    out, lse = tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, block_table=table, causal=causal,
                                                       window=window, softcap=softcap or None, return_lse=True)
    _assert_close(out, lse, _ref(q, kc, vc, seqlens, table, causal, None, softcap, window), 1e-5)


@pytest.mark.parametrize("scale", [-0.4, 0.0, 2.0])
def test_any_real_scale(scale):
    """As flash_attention: a negative or zero scale is a valid softmax (the kernel takes the row max after scaling)."""
    kc, vc, table = _cache(2, 24, 2, 16, torch.float32, (24, 7), 8)
    q = torch.randn(2, 2, 4, 16, device=DEV)
    seqlens = torch.tensor([24, 7], dtype=torch.int32, device=DEV)
    out, lse = tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, block_table=table, scale=scale,
                                                       return_lse=True)
    _assert_close(out, lse, _ref(q, kc, vc, seqlens, table, True, scale), 1e-5)


def test_rows_without_a_key_give_zero_and_minus_inf():
    """More new tokens than keys (bottom-right causal): the first rows see nothing."""
    kc, vc, table = _cache(1, 8, 1, 16, torch.float32, (2,))
    q = torch.randn(1, 4, 2, 16, device=DEV)
    out, lse = tilewright.flash_attention_with_kvcache(q, kc, vc, 2, return_lse=True)
    assert torch.equal(out[0, :2], torch.zeros_like(out[0, :2])) and torch.isinf(lse[0, :, :2]).all()
    _assert_close(out, lse, _ref(q, kc, vc, torch.tensor([2], dtype=torch.int32, device=DEV), table), 1e-5)


def _args(**over):
    kc, vc, table = _cache(2, 16, 2, 16, torch.float16, (5, 7), 4)
    base = dict(q=torch.randn(2, 1, 4, 16, dtype=torch.float16, device=DEV), k_cache=kc, v_cache=vc,
                cache_seqlens=torch.tensor([5, 7], dtype=torch.int32, device=DEV), block_table=table)
    base.update(over)
    return base


@pytest.mark.parametrize("over,error,match", [
    (dict(cache_seqlens=torch.tensor([5, 7])), TypeError, "cache_seqlens.*int32"),
    (dict(cache_seqlens=torch.tensor([5, 70], dtype=torch.int32)), ValueError, "cache_seqlens.*capacity"),
    (dict(cache_seqlens=torch.tensor([-1, 7], dtype=torch.int32)), ValueError, "cache_seqlens.*>= 0"),
    (dict(cache_seqlens=torch.tensor([5], dtype=torch.int32)), ValueError, "cache_seqlens: expected shape"),
    (dict(block_table=torch.tensor([[0, 1, 2, 3], [99, 5, 6, 7]], dtype=torch.int32)), ValueError,
     "block_table.*0, 11"),  # a page in use out of range (unused entries are 10**6 in every case: never read)
    (dict(block_table=torch.zeros(2, 4, dtype=torch.int64)), TypeError, "block_table.*int32"),
    (dict(q=torch.randn(2, 1, 3, 16, dtype=torch.float16)), ValueError, "k_cache: 2 kv heads"),
    (dict(q=torch.randn(2, 1, 4, 12, dtype=torch.float16)), ValueError, "q: head dim 12"),
    (dict(q=torch.randn(2, 1, 4, 16)), TypeError, "k_cache: dtype"),
    (dict(window=(3, 1)), ValueError, "window: with causal=True"),
    (dict(window=(-1, 0)), ValueError, "window: the left side"),
    (dict(softcap=-1.0), ValueError, "softcap"),
    (dict(scale="0.1"), TypeError, "scale"),
    (dict(k=torch.randn(2, 1, 2, 16, dtype=torch.float16)), ValueError, "k / v: pass both"),
    (dict(num_splits=0), ValueError, "num_splits"),
])
def test_bad_inputs_name_the_argument(over, error, match):
    args = _args()
    args.update({k: (t.to(DEV) if isinstance(t, torch.Tensor) else t) for k, t in over.items()})
    with pytest.raises(error, match=match):
        tilewright.flash_attention_with_kvcache(**args)


def test_forward_only():
    args = _args(q=torch.randn(2, 1, 4, 16, dtype=torch.float16, device=DEV, requires_grad=True))
    with pytest.raises(ValueError, match="forward only"):
        tilewright.flash_attention_with_kvcache(**args)
    with torch.no_grad():  # the same call without a graph to record runs
        assert torch.isfinite(tilewright.flash_attention_with_kvcache(**args)).all()


def test_key_steps_per_card_and_regime():
    """64-key steps in the split regime, 128 when B * Hkv fills the SMs; on the cards measured faster with them
    (H200) 128 in the split regime too, where each split holds >= 128 keys, and 64 with a 2-deep ring for whole
    waves of short sequences; never 128 for paged caches or head dims past 128 (shared memory); 16 under the
    interpreter. A CPU device is no such card."""
    from tilewright.triton_kernels import kvcache_attention as ka

    def bn(**kw):
        return ka.block_n(interpret=False, **kw)

    assert bn(head_dim_pad=128) == 64 and bn(head_dim_pad=128, whole_waves=True) == 128
    assert bn(head_dim_pad=128, wide_splits=True, split_keys=128) == 128
    assert bn(head_dim_pad=128, wide_splits=True, split_keys=64) == 64  # (B 1 x S 1k: 16 splits of 64 keys)
    assert bn(head_dim_pad=128, wide_splits=True, split_keys=4096, paged=True) == 64
    assert bn(head_dim_pad=256, wide_splits=True, split_keys=4096) == 64
    assert bn(head_dim_pad=256, whole_waves=True) == 64
    assert ka.block_n(128, wide_splits=True, split_keys=4096, interpret=True) == 16
    assert ka.wide_split_steps(torch.device("cpu")) is False
    # on the H200's tuning, launches of >= 2 programs an SM streaming short sequences take 64-key steps and a 2-deep
    # ring; longer sequences, fewer programs (B 17 x 8 heads on 132 SMs: one wave and four) or another card do not
    keys = ka.SHORT_WAVE_KEYS
    assert ka.short_waves(265, 132, True, keys) and ka.num_stages(128, short=True) == 2
    assert bn(head_dim_pad=128, whole_waves=True, wide_splits=True, split_keys=keys, narrow=True) == 64
    assert not ka.short_waves(265, 132, True, keys + 1) and not ka.short_waves(264, 132, True, keys)
    assert not ka.short_waves(512, 132, False, 1024) and ka.num_stages(128) == 3
    assert bn(head_dim_pad=128, whole_waves=True, wide_splits=True, split_keys=keys) == 128


_KV_MODULE = "tilewright.triton_kernels.kvcache_attention"


def _split_job(name, head_dim, block_n, stages, page_size=16, **constexprs):
    """An AOT sm_90 job (triton_kernels/aot.compile_reports) of the split kernel as a bf16 GQA-8 decode launches it:
    ``constexprs`` over a causal, unwindowed, uncapped build (PAGED, FUSED_COMBINE, PAGE_PREFETCH ...)."""
    from tilewright.triton_kernels import kvcache_attention as ka

    sig = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "SEQLENS": "*i32", "TABLE": "*i32", "O_PART": "*fp32",
           "LSE_PART": "*fp32", "OUT": "*bf16", "LSE": "*fp32", "ARRIVALS": "*i32", **{a: "i32" for a in (
               "stride_qb", "stride_qs", "stride_qh", "stride_kp", "stride_ks", "stride_kh", "stride_vp", "stride_vs",
               "stride_vh", "stride_tb", "stride_os", "stride_ob", "stride_oh", "stride_om", "stride_ob2",
               "stride_os2", "stride_oh2", "B", "Hkv", "Sq", "num_pages", "capacity", "num_splits", "new_tokens")},
           "scale_log2": "fp32", "softcap": "fp32", "window_left": "i32", "window_right": "i32"}
    const = dict(GROUP=8, HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim, BLOCK_M=16, PAGE_SIZE=page_size, BLOCK_N=block_n,
                 PAGED=False, CAUSAL=True, WINDOW_LEFT=False, WINDOW_RIGHT=False, SOFTCAP=False, UPCAST=False,
                 DOT_PRECISION="tf32")
    return {"kernel": f"{_KV_MODULE}:_split_kernel", "signature": sig, "constexprs": {**const, **constexprs},
            "num_warps": ka.NUM_WARPS, "num_stages": stages, "name": name,
            # what a launch specializes: 16-byte aligned buffers and strides that are multiples of 16 elements
            "divisible_by_16": ["Q", "K", "V", "SEQLENS", "TABLE", "O_PART", "LSE_PART", "stride_qb", "stride_qs",
                                "stride_qh", "stride_kp", "stride_ks", "stride_kh", "stride_vp", "stride_vs",
                                "stride_vh", "stride_os", "stride_ob", "stride_oh", "stride_om", "OUT", "LSE",
                                "ARRIVALS", "stride_ob2", "stride_os2", "stride_oh2"]}


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("paged, whole_waves", [(False, False), (False, True), (False, "short"), (True, False),
                                                (True, True)])  # (paged caches never take the short ring)
def test_the_kernels_compile_for_sm90_without_spills(paged, head_dim, whole_waves):
    """AOT sm_90 builds (no GPU needed) of the split and combine kernels as a bf16 GQA-8 decode launches them (the
    launcher's key block, warps and stages, in both regimes: split, and B * Hkv filling the SMs, the latter also with
    the H200's short ring): tensor core MMAs and async copies (LDGSTS: the K / V rows gathered in 16-byte vectors) in
    the split kernel, no spills in either."""
    from tilewright.triton_kernels import kvcache_attention as ka
    from tilewright.triton_kernels.aot import compile_reports

    short = whole_waves == "short"
    whole_waves = bool(whole_waves)
    wide = dict(wide_splits=True, split_keys=1024, narrow=True) if short else {}

    # the split regime's build also with the combine fused in (arrival counters: an atomic, no spills either)
    fused = not whole_waves and head_dim == 128
    combine_sig = {"O_PART": "*fp32", "LSE_PART": "*fp32", "OUT": "*bf16", "LSE": "*fp32", **{a: "i32" for a in (
        "stride_os", "stride_ob", "stride_oh", "stride_om", "stride_ob2", "stride_os2", "stride_oh2", "B", "H", "Sq")}}
    reports = compile_reports([
        _split_job("split", head_dim, ka.block_n(head_dim, whole_waves, paged, interpret=False, **wide),
                   ka.num_stages(head_dim, paged, short), PAGED=paged, FUSED_COMBINE=fused),
        {"kernel": f"{_KV_MODULE}:_combine_kernel", "signature": combine_sig, "num_warps": 1, "name": "combine",
         "constexprs": dict(HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim, NUM_SPLITS=8, SPLITS_PAD=8)}])
    for rep in reports:
        assert rep.spill_bytes == 0, (rep.name, rep.spill_bytes)
    assert (reports[0].has("HMMA") or reports[0].has("HGMMA")) and reports[0].has("LDGSTS")
    if fused:  # the arrival count (ATOMG / RED) and the reloads past L1 (LDG.E.STRONG.GPU: .cg)
        assert reports[0].has("ATOM") and reports[0].has("STRONG.GPU"), reports[0].name


def test_the_short_split_rows_build_compiles_for_sm90_without_spills():
    """The short split rows' launch (SHORT_SPLIT_SHAPE: 32-key steps, the 3-deep ring, 2 warps; a 16-row query tile,
    head dim 128, contiguous, the PDL combine's signal) as an AOT sm_90 build: tensor core MMAs, the K / V rows by
    async copies, no spills."""
    from tilewright.triton_kernels import kvcache_attention as ka
    from tilewright.triton_kernels.aot import compile_reports

    block, stages, warps = ka.SHORT_SPLIT_SHAPE
    job = {**_split_job("short_split", 128, block, stages, LAUNCH_DEPENDENTS=True), "num_warps": warps}
    (rep,) = compile_reports([job])
    assert rep.spill_bytes == 0 and (rep.has("HMMA") or rep.has("HGMMA")) and rep.has("LDGSTS"), rep.name


def test_the_pdl_combine_builds_carry_the_grid_dependency_instructions():
    """PDL_COMBINE's AOT sm_90 builds: the split kernel signals its dependents (griddepcontrol.launch_dependents) and
    the combine waits for the split grid (griddepcontrol.wait) before its first load - in the PTX, and in SASS as the
    ACQBULK / PREEXIT pair's instructions - without spills; the default builds have neither."""
    from tilewright.triton_kernels import kvcache_attention as ka
    from tilewright.triton_kernels.aot import compile_reports

    combine_sig = {"O_PART": "*fp32", "LSE_PART": "*fp32", "OUT": "*bf16", "LSE": "*fp32", **{a: "i32" for a in (
        "stride_os", "stride_ob", "stride_oh", "stride_om", "stride_ob2", "stride_os2", "stride_oh2", "B", "H", "Sq")}}
    combine = dict(HEAD_DIM=128, HEAD_DIM_PAD=128, NUM_SPLITS=8, SPLITS_PAD=8)
    reports = compile_reports([
        _split_job("split_pdl", 128, 128, ka.num_stages(128), LAUNCH_DEPENDENTS=True),
        _split_job("split", 128, 128, ka.num_stages(128)),
        {"kernel": f"{_KV_MODULE}:_combine_kernel", "signature": combine_sig, "num_warps": 1, "name": "combine_pdl",
         "constexprs": {**combine, "WAIT_PRIOR": True}},
        {"kernel": f"{_KV_MODULE}:_combine_kernel", "signature": combine_sig, "num_warps": 1, "name": "combine",
         "constexprs": combine}])
    by_name = {r.name: r for r in reports}
    assert all(r.spill_bytes == 0 for r in reports)
    sass_pdl = {name: set(re.findall(r"\b(ACQBULK|PREEXIT)\b", by_name[name].sass)) for name in by_name}
    assert sass_pdl["split_pdl"] == {"PREEXIT"} and sass_pdl["combine_pdl"] == {"ACQBULK"}, sass_pdl
    assert not sass_pdl["split"] and not sass_pdl["combine"]


@pytest.mark.parametrize("paged", [False, True])
def test_every_decode_launch_passes_every_kernel_argument(monkeypatch, paged):
    """The bound replay of a GPU launch (triton_kernels/_runtime.bind) rebuilds the argument list by name from the
    launch's keyword arguments, so the launches pass every kernel argument explicitly - the PDL switch of the combine
    (WAIT_PRIOR) was first written left to its default on the ordinary path, which would have stopped the first
    split decode on a GPU at binding (found in review; bind now also takes a defaulted constexpr's default)."""
    from tilewright.triton_kernels import kvcache_attention as ka

    class Checked:
        def __init__(self, fn):
            self.fn, self.launched = fn, 0

        def __getitem__(self, grid):
            launch = self.fn[grid]

            def call(**kwargs):
                missing = set(self.fn.arg_names) - set(kwargs)
                assert not missing, missing
                self.launched += 1
                return launch(**kwargs)
            return call

    split, combine = Checked(ka._split_kernel), Checked(ka._combine_kernel)
    monkeypatch.setattr(ka, "_split_kernel", split)
    monkeypatch.setattr(ka, "_combine_kernel", combine)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 1, 4, 64, generator=g, dtype=torch.float16)
    kc = torch.randn(2, 96, 2, 64, generator=g, dtype=torch.float16)
    vc = torch.randn(2, 96, 2, 64, generator=g, dtype=torch.float16)
    seqlens = torch.tensor([96, 33], dtype=torch.int32)
    table = None
    if paged:
        from tilewright.bench.decode import _paged

        kc, vc, table = _paged(kc, vc, 16)
    for config in (None, {"pdl_combine": False}):
        ka.kvcache_attention(q, kc, vc, seqlens, table, num_splits=2, config=config)
    assert split.launched == 2 and combine.launched == 2


def test_pdl_is_on_by_default_and_never_on_the_interpreter():
    from tilewright.triton_kernels import kvcache_attention as ka

    assert ka.PDL_COMBINE is True  # the device A/B (perf/LOG.md session 32)
    assert not ka.pdl_supported(torch.device("cpu"))


def test_the_page_prefetch_variant_compiles_for_sm90_with_a_k_v_ring():
    """PAGE_PREFETCH's AOT sm_90 builds at the contiguous launch's key blocks (64; 128 at head dim 128) and ring
    (num_stages(paged=False)) - pages of 16 and 32 (the step's entries spread to its rows with tl.gather), 256 (one
    entry a step): no spills, tensor core MMAs, LDGSTS, and shared memory for num_stages - 1 K / V buffers; the
    in-step lookup's build at its 4 stages holds one (Triton's pipeliner gives the in-step table load a stage of its
    own), which is what the prefetch is for."""
    from tilewright.triton_kernels import kvcache_attention as ka
    from tilewright.triton_kernels.aot import compile_reports

    jobs, rings = [], {}
    for head_dim, pages, bn in ((64, (16,), 64), (128, (16, 32, 256), 64), (128, (16, 256), 128), (256, (16,), 64)):
        tile = 2 * bn * head_dim * 2  # one step's K and V, bf16
        for page in pages:
            stages = ka.num_stages(head_dim)
            jobs.append(_split_job(f"prefetch-d{head_dim}-n{bn}-p{page}", head_dim, bn, stages, page, PAGED=True,
                                   PAGE_PREFETCH=True))
            rings[jobs[-1]["name"]] = (stages - 1) * tile
        if head_dim <= 128 and bn == ka.block_n(head_dim, paged=True, interpret=False):
            jobs.append(_split_job(f"default-d{head_dim}", head_dim, bn, ka.num_stages(head_dim, True), PAGED=True))
            rings[jobs[-1]["name"]] = -tile  # at most one buffer
    for rep in compile_reports(jobs):
        assert rep.spill_bytes == 0, (rep.name, rep.spill_bytes)
        assert (rep.has("HMMA") or rep.has("HGMMA")) and rep.has("LDGSTS"), rep.name
        ring = rings[rep.name]
        assert rep.shared_bytes >= ring if ring > 0 else rep.shared_bytes < -2 * ring, (rep.name, rep.shared_bytes)


def _split_launches(monkeypatch, fields=("PAGE_PREFETCH", "num_stages")):
    """(PAGE_PREFETCH, num_stages) - or other ``fields`` of its arguments - of each split-kernel launch from here on:
    a variant that fell back to the in-step lookup would pass an equality test unseen."""
    from tilewright.triton_kernels import kvcache_attention as ka

    kernel, seen = ka._split_kernel, []

    class Spy:
        def __getitem__(self, grid):
            def launch(**kw):
                seen.append(tuple(kw[f] for f in fields))
                return kernel[grid](**kw)
            return launch
    monkeypatch.setattr(ka, "_split_kernel", Spy())
    return seen


@pytest.mark.parametrize("page,block_n,window", [(4, None, None), (8, None, (9, 0)), (16, 64, None), (32, 64, (3, 0)),
                                                 (16, None, (9, 0)), (64, None, None)],
                         ids=["page4", "page8-window", "page16-64key-steps", "page32-64key-steps-window",
                              "page16-one-entry-a-step", "page64-one-entry-a-step"])
def test_page_prefetch_equals_the_in_step_lookup(page, block_n, window, monkeypatch):
    """PAGE_PREFETCH (the default; config page_prefetch False: the in-step lookup): each step's page-table entries
    loaded a step ahead - a step's BLOCK_N // PAGE_SIZE entries for pages smaller than a step (16-key steps here, as
    the GPU's 64 / 128 with pages of 16 and 32), one for pages a multiple of it - changes only addressing at the same
    split count and key step: out and LSE equal the in-step lookup's bit for bit,
    and the reference. Lengths past whole pages and steps, an empty sequence, two new tokens (bottom-right causal),
    GQA 3, two splits (one empty under the 3-key window), a shuffled table, unused entries 10**6 and -1."""
    from tilewright.triton_kernels import kvcache_attention as ka

    lengths = (45, 0, 70)
    kc, vc, table = _cache(3, 72, 2, 16, torch.float16, lengths, page)
    table[1] = -1  # the empty sequence's entries: none in use
    q = torch.randn(3, 2, 6, 16, dtype=torch.float16, device=DEV)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    cfg = {} if block_n is None else {"block_n": block_n}
    win = window if window is not None else (None, None)
    launches = _split_launches(monkeypatch)
    want = ka.kvcache_attention(q, kc, vc, seqlens, table, window=win, num_splits=2,
                                config={**cfg, "page_prefetch": False})
    got = ka.kvcache_attention(q, kc, vc, seqlens, table, window=win, num_splits=2, config=cfg)
    assert [p for p, _ in launches] == [False, True]
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    _assert_close(*got, _ref(q, kc, vc, seqlens, table, window=window), 2e-3)


@pytest.mark.parametrize("page,window", [(4, None), (8, (9, 0)), (16, None), (32, (3, 0)), (64, None)],
                         ids=["page4", "page8-window", "page16", "page32-window", "page64"])
def test_table_row_prefetch_equals_the_step_prefetch(page, window, monkeypatch):
    """TABLE_ROW_PREFETCH (opt-in, config table_row_prefetch): the sequence's whole table row loaded at the start and
    each step's entries picked from it - several entries a step (pages smaller than the interpreter's 16-key steps)
    or one - gives out and LSE bit for bit the step prefetch's, on two lengths, three splits, with and without a
    window; the launch takes the row (TABLE_ROW_PAGES = the row's pages, padded to a power of two)."""
    from tilewright.triton_kernels import kvcache_attention as ka

    lengths = (1000, 333)
    kc, vc, table = _cache(2, 1024, 2, 16, torch.float32, lengths, page)
    q = torch.randn(2, 1, 4, 16, device=DEV)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    win = (None, None) if window is None else window
    launches = _split_launches(monkeypatch, ("PAGE_PREFETCH", "TABLE_ROW_PAGES"))
    want = ka.kvcache_attention(q, kc, vc, seqlens, table, window=win, num_splits=3)
    got = ka.kvcache_attention(q, kc, vc, seqlens, table, window=win, num_splits=3,
                               config={"table_row_prefetch": True})
    assert launches == [(True, 0), (True, max(2, 1024 // page))]
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    _assert_close(*got, _ref(q, kc, vc, seqlens, table, window=window), 2e-3)


def test_table_row_prefetch_is_taken_where_it_measured_faster(monkeypatch):
    """Without a config choice the paged launch preloads the table row on the short split rows of 128 to 256 pages of
    16 tokens (kvcache_attention.table_row_pays: measured faster on all six such rows, slower on two of three 64-page
    rows) and nowhere else - another page size, a shorter or longer row, a row outside the band, a caller's split
    count; config table_row_prefetch still decides either way. The launch's answer is the step prefetch's."""
    from tilewright.triton_kernels import kvcache_attention as ka

    assert ka.table_row_pays(True, 16, 128) and ka.table_row_pays(True, 16, 256)
    assert not ka.table_row_pays(True, 16, 64) and not ka.table_row_pays(True, 16, 512)
    assert not ka.table_row_pays(True, 32, 128) and not ka.table_row_pays(False, 16, 128)
    monkeypatch.setattr(ka, "short_split_band", lambda programs, sms, measured, capacity, rows: True)
    lengths = (2048, 1500)
    q = torch.randn(2, 1, 2, 16, device=DEV)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    launches = _split_launches(monkeypatch, ("PAGE_PREFETCH", "TABLE_ROW_PAGES"))
    kc, vc, table = _cache(2, 2048, 1, 16, torch.float32, lengths, 16)
    got = ka.kvcache_attention(q, kc, vc, seqlens, table)
    want = ka.kvcache_attention(q, kc, vc, seqlens, table, config={"table_row_prefetch": False})
    assert launches == [(True, 128), (True, 0)]
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    launches.clear()
    ka.kvcache_attention(q, kc, vc, seqlens, table, num_splits=4)  # the caller's split count: outside the band
    kc32, vc32, table32 = _cache(2, 2048, 1, 16, torch.float32, lengths, 32)
    ka.kvcache_attention(q, kc32, vc32, seqlens, table32)  # pages of 32: unmeasured
    kc1k, vc1k, table1k = _cache(2, 1024, 1, 16, torch.float32, (1024, 700), 16)
    ka.kvcache_attention(q, kc1k, vc1k, torch.tensor((1024, 700), dtype=torch.int32, device=DEV), table1k)
    ka.kvcache_attention(q, kc1k, vc1k, torch.tensor((1024, 700), dtype=torch.int32, device=DEV), table1k,
                         config={"table_row_prefetch": True})  # asked for: taken
    assert launches == [(True, 0), (True, 0), (True, 0), (True, 64)]


def test_table_row_prefetch_builds_for_sm90_without_spills():
    """The short split rows' paged launch with the table row preloaded (32-key steps, pages of 16, a 64-page row,
    2 warps, the 3-deep ring) as an AOT sm_90 build: MMAs, K / V by async copies, no spills."""
    from tilewright.triton_kernels import kvcache_attention as ka
    from tilewright.triton_kernels.aot import compile_reports

    block, stages, warps = ka.SHORT_SPLIT_SHAPE
    job = {**_split_job("row_prefetch", 128, block, stages, PAGED=True, PAGE_PREFETCH=True, TABLE_ROW_PAGES=64),
           "num_warps": warps}
    (rep,) = compile_reports([job])
    assert rep.spill_bytes == 0 and (rep.has("HMMA") or rep.has("HGMMA")) and rep.has("LDGSTS"), rep.name


@pytest.mark.parametrize("page,block_n", [(8, None), (16, 64), (32, None)])
def test_page_prefetch_clamps_entries_in_use_as_the_in_step_lookup_does(page, block_n, monkeypatch):
    """Entries in use outside [0, num_pages) (the op layer reports them; the kernels clamp them to the cache, so
    nothing outside it is ever read): the variant reads the same clamped pages as the default lookup, bit for bit."""
    from tilewright.triton_kernels import kvcache_attention as ka

    kc, vc, table = _cache(2, 96, 1, 16, torch.float32, (96, 41), page)
    kc, vc = kc.nan_to_num(0.0), vc.nan_to_num(0.0)  # the pages clamped to hold values too
    table[0, 0], table[0, -1], table[1, 1] = -5, 10 ** 9, 2 ** 31 - 1
    q = torch.randn(2, 1, 2, 16, device=DEV)
    seqlens = torch.tensor([96, 41], dtype=torch.int32, device=DEV)
    cfg = {} if block_n is None else {"block_n": block_n}
    launches = _split_launches(monkeypatch)
    want = ka.kvcache_attention(q, kc, vc, seqlens, table, num_splits=3, config={**cfg, "page_prefetch": False})
    got = ka.kvcache_attention(q, kc, vc, seqlens, table, num_splits=3, config=cfg)
    assert [p for p, _ in launches] == [False, True]
    assert torch.isfinite(got[0]).all() and torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_page_prefetch_module_switch_and_where_it_does_not_apply(monkeypatch):
    """kvcache_attention.PAGE_PREFETCH (the default) runs every paged call with the entries a step ahead, at the
    contiguous launch's shape: the contiguous ring depth (num_stages(paged=False): 3 where the paged default takes 4);
    page sizes that neither divide a step nor are multiples of it (3, 24 with 16-key steps) keep the in-step lookup, as
    do contiguous caches; each against the reference."""
    from tilewright.triton_kernels import kvcache_attention as ka

    monkeypatch.setattr(ka, "PAGE_PREFETCH", True)
    launches = _split_launches(monkeypatch)
    lengths = (30, 7)
    for page in (8, 3, 24, None):
        kc, vc, table = _cache(2, 48, 2, 16, torch.float32, lengths, page)
        q = torch.randn(2, 1, 4, 16, device=DEV)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
        out, lse = tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, block_table=table, return_lse=True)
        _assert_close(out, lse, _ref(q, kc, vc, seqlens, table), 1e-5)
    assert launches == [(True, ka.num_stages(16)), (False, ka.num_stages(16, True)), (False, ka.num_stages(16, True)),
                        (False, ka.num_stages(16))]
    assert ka.num_stages(16) == 3 and ka.num_stages(16, True) == 4


def test_paged_launches_take_the_contiguous_shape_with_the_prefetch(monkeypatch):
    """With the entries a step ahead (the default), a paged cache launches as a contiguous one of its capacity would:
    the same split count, key step and ring (4 SMs under the interpreter: 4 splits of a 1024-key cache, where the
    in-step lookup's rule takes three programs an SM, 12); both against the reference."""
    from tilewright.triton_kernels import kvcache_attention as ka

    launches = _split_launches(monkeypatch, ("PAGE_PREFETCH", "num_splits", "BLOCK_N", "num_stages", "num_warps"))
    lengths = (1000,)
    kc, vc, table = _cache(1, 1024, 1, 16, torch.float32, lengths, 16)
    q = torch.randn(1, 1, 2, 16, device=DEV)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    want = _ref(q, kc, vc, seqlens, table)
    for cfg in (None, {"page_prefetch": False}):
        _assert_close(*ka.kvcache_attention(q, kc, vc, seqlens, table, config=cfg), want, 1e-5)
    contiguous, paged = (ka.launch_shape(1, 1, 1024, 16, q.device, paged=p) for p in (False, True))
    assert contiguous[0] == 4 and paged[0] == 12
    assert launches == [(True, *contiguous), (False, *paged)]


def test_the_decode_bench_tiny_suite_runs_and_agrees():
    """`tilewright bench --op decode` on CPU: the tiny suite under the interpreter, against the reference formula."""
    pytest.importorskip("pandas")
    if torch.cuda.is_available():
        pytest.skip("the tiny suite's CPU path")
    from tilewright.bench import decode

    lines = []
    df = decode.run("tiny", progress=lines.append)
    assert set(df.provider) == {"tilewright", "torch-math"} and len(df) == 2 * len(decode.SUITES["tiny"])
    assert not any("(!)" in line for line in lines), lines  # the providers' outputs agreed
    assert (df.peer == "torch-math").all() and {"gbps", "bw_frac"} <= set(df.columns)


@pytest.mark.parametrize("seed", range(12))  # 40 seeds passed when written
def test_fuzz_against_the_reference(seed):
    """Random shapes, lengths, page sizes, masks, soft cap, splits and dtypes (fp16 / fp32), a random strided q."""
    g = torch.Generator().manual_seed(1000 + seed)
    pick = lambda xs: xs[int(torch.randint(len(xs), (1,), generator=g))]  # noqa: E731
    B, Sq, Hkv, group, D = pick([1, 2, 3]), pick([1, 2, 5]), pick([1, 2]), pick([1, 3, 4]), pick([8, 16, 24, 40])
    S = pick([1, 17, 50])
    lengths = tuple(int(torch.randint(0, S + 1, (1,), generator=g)) for _ in range(B))
    dtype = pick([torch.float16, torch.float32])
    page = pick([None, 1, 4, 16])
    causal = pick([True, False])
    window = pick([None, (3, 0), (0, None), (5, None)] + ([] if causal else [(None, 2), (2, 6)]))
    softcap = pick([0.0, 0.0, 4.0])
    kc, vc, table = _cache(B, S, Hkv, D, dtype, lengths, page, seed)
    q = torch.randn(B, Hkv * group, Sq, D, generator=g).to(dtype).to(DEV).transpose(1, 2)  # (B, Sq, Hq, D), strided
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    out, lse = tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, block_table=table, causal=causal,
                                                       window=window, softcap=softcap or None, return_lse=True,
                                                       num_splits=pick([None, 1, 2, 5]))
    _assert_close(out, lse, _ref(q, kc, vc, seqlens, table, causal, None, softcap, window),
                  3e-3 if dtype == torch.float16 else 1e-5)


def test_the_custom_op_passes_opcheck_and_compiles_without_graph_breaks():
    """tilewright::flash_attn_kvcache: schema (the caches mutated), fake and real impls agree (opcheck, one split and
    two), and a decode step with an append traces in one graph (fullgraph) and writes the cache like the eager
    call."""
    from tilewright.ops.kvcache import flash_attn_kvcache_op

    kc, vc, table = _cache(2, 16, 2, 16, torch.float32, (5, 9), 4)
    kc, vc = kc.nan_to_num(0.0), vc.nan_to_num(0.0)
    q = torch.randn(2, 1, 4, 16, device=DEV)
    k_new, v_new = torch.randn(2, 1, 2, 16, device=DEV), torch.randn(2, 1, 2, 16, device=DEV)
    seqlens = torch.tensor([5, 9], dtype=torch.int32, device=DEV)
    for splits in (0, 2):  # (2: the LSE is the head of the partials' buffer - storage offset 0, as the fake's)
        torch.library.opcheck(flash_attn_kvcache_op, (q, kc.clone(), vc.clone(), seqlens, k_new, v_new, table, True,
                                                      0.25, -1, -1, 0.0, splits))

    def step(q, kc, vc, k_new, v_new):
        return tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, k=k_new, v=v_new, block_table=table)

    kc2, vc2 = kc.clone(), vc.clone()
    want = step(q, kc, vc, k_new, v_new)
    got = torch.compile(step, fullgraph=True, backend="aot_eager")(q, kc2, vc2, k_new, v_new)
    assert torch.allclose(got, want, atol=1e-6) and torch.equal(kc2, kc) and torch.equal(vc2, vc)


@pytest.mark.parametrize("sq", [1, 3])
def test_a_split_calls_lse_is_the_partials_head_only_at_one_token(sq):
    """A split launch's LSE output: at one token a sequence the head of the partials' buffer (one allocation less;
    storage offset 0), for a chunk of tokens a tensor of its own (a view would keep partials Sq x D times its size
    alive); both equal the reference's."""
    from tilewright.triton_kernels import kvcache_attention as ka

    kc, vc, _ = _cache(2, 40, 2, 16, torch.float32, (33, 21), None)
    q = torch.randn(2, sq, 4, 16, device=DEV)
    seqlens = torch.tensor([33, 21], dtype=torch.int32, device=DEV)
    out, lse = ka.kvcache_attention(q, kc.nan_to_num(0.0), vc.nan_to_num(0.0), seqlens, None, num_splits=2)
    assert lse.shape == (2, 4, sq) and lse.storage_offset() == 0 and lse.is_contiguous()
    own = lse.untyped_storage().nbytes() == lse.numel() * 4
    assert own == (sq > 1)
    _assert_close(out, lse, _ref(q, kc.nan_to_num(0.0), vc.nan_to_num(0.0), seqlens, None), 1e-5)


def test_an_in_place_change_of_checked_lengths_is_checked_again():
    """The value check runs once per unmodified tensors (ops/_checks.CheckedValues): writing into the lengths or the
    table in place (as a decode loop does) makes the next call check again - a bad value still raises."""
    args = _args()
    tilewright.flash_attention_with_kvcache(**args)
    tilewright.flash_attention_with_kvcache(**args)  # same tensors, unmodified: no read, same result
    args["cache_seqlens"][1] = 70
    with pytest.raises(ValueError, match="cache_seqlens.*capacity"):
        tilewright.flash_attention_with_kvcache(**args)
    args["cache_seqlens"][1] = 7
    tilewright.flash_attention_with_kvcache(**args)
    args["block_table"][1, 0] = 99
    with pytest.raises(ValueError, match="block_table"):
        tilewright.flash_attention_with_kvcache(**args)


def test_an_int_length_is_checked_on_the_host():
    kc, vc, _ = _cache(2, 16, 2, 16, torch.float16, (5, 7))
    q = torch.randn(2, 1, 4, 16, dtype=torch.float16, device=DEV)
    with pytest.raises(ValueError, match="cache_seqlens: 17 cached tokens"):
        tilewright.flash_attention_with_kvcache(q, kc, vc, 17)
    with pytest.raises(ValueError, match="cache_seqlens: 16 cached tokens \\+ 1 new"):
        tilewright.flash_attention_with_kvcache(q, kc, vc, 16, k=torch.randn(2, 1, 2, 16, dtype=torch.float16,
                                                                          device=DEV), v=torch.zeros(2, 1, 2, 16,
                                                                          dtype=torch.float16, device=DEV))


@pytest.mark.parametrize("page", [None, 4])
def test_append_kernel_with_odd_heads_head_dim_and_strided_inputs(page):
    """The append launch (triton_kernels/kvcache_attention.append_to_cache): 3 kv heads, head dim 24 (padded tile),
    k / v new tokens as strided slices of one packed tensor; only the new slots change, to exactly the new values."""
    from tilewright.triton_kernels.kvcache_attention import append_to_cache

    B, S, Hkv, D, new = 2, 12, 3, 24, 2
    if page is None:
        kc, vc, table = torch.randn(B, S, Hkv, D, device=DEV), torch.randn(B, S, Hkv, D, device=DEV), None
    else:
        kc, vc = torch.randn(7, page, Hkv, D, device=DEV), torch.randn(7, page, Hkv, D, device=DEV)
        table = torch.tensor([[6, 2, 0], [1, 5, 3]], dtype=torch.int32, device=DEV)
    packed = torch.randn(B, new, 2, Hkv, D, device=DEV)
    k_new, v_new = packed[:, :, 0], packed[:, :, 1]  # strided: rows of 2 * Hkv * D
    seqlens = torch.tensor([3, 10], dtype=torch.int32, device=DEV)
    want_k, want_v = kc.clone(), vc.clone()
    for b in range(B):
        for t in range(new):
            pos = int(seqlens[b]) + t
            if page is None:
                want_k[b, pos], want_v[b, pos] = k_new[b, t], v_new[b, t]
            else:
                p = int(table[b, pos // page])
                want_k[p, pos % page], want_v[p, pos % page] = k_new[b, t], v_new[b, t]
    append_to_cache(kc, vc, k_new, v_new, seqlens, table)
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


def test_one_wave_and_a_few_programs_split_three_ways_on_the_h200(monkeypatch):
    """B x Hkv from one to 1.4 waves of 132 SMs (B 17-23 at 8 KV heads) ran 0.65-0.79x cuDNN unsplit on the H200:
    there the default cuts ~three programs per SM (chunks of >= 128 keys) and the launch takes the short ring; from
    1.4 waves on, below one wave, and on other cards, the split counts are as before."""
    from tilewright.triton_kernels import kvcache_attention as ka

    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(ka, "_card", lambda device: (132, True))
    assert ka.boundary_band(136, 132, True) and ka.boundary_band(132, 132, True)
    assert not ka.boundary_band(131, 132, True) and not ka.boundary_band(192, 132, True)
    assert not ka.boundary_band(136, 132, False)
    # from 1.4 waves to two: unsplit, 64-key steps (the mid band); past two, the short-wave rule's ground
    assert ka.mid_band(192, 132, True) and ka.mid_band(264, 132, True) and not ka.mid_band(265, 132, True)
    assert not ka.mid_band(184, 132, True) and not ka.mid_band(192, 132, False)
    assert ka.default_splits(17, 8, 8192, cuda) == 3 and ka.default_splits(20, 8, 1024, cuda) == 3
    assert ka.default_splits(24, 8, 1024, cuda) == 1 and ka.default_splits(33, 8, 1024, cuda) == 1
    assert ka.default_splits(17, 8, 256, cuda) == 2  # chunks of >= 128 keys
    assert ka.default_splits(17, 8, 8192, cuda, paged=True) == 2  # paged: as before (3 x 132 // 136)
    assert ka.default_splits(64, 8, 1024, cuda) == 1 and ka.default_splits(1, 8, 8192, cuda) == 16
    monkeypatch.setattr(ka, "_card", lambda device: (132, False))  # another card: unsplit as before
    assert ka.default_splits(17, 8, 8192, cuda) == 1


def test_launch_shapes_by_regime_on_the_h200_and_elsewhere(monkeypatch):
    """kvcache_attention's (splits, keys a step, ring depth, warps) per regime: the split regime and long whole waves as
    before, the boundary band split ~3 ways with the short ring, the mid band unsplit with 64-key steps, more than two
    programs an SM on short sequences the short ring - at head dim 128 on the H200 only; head dim 64, paged caches,
    a caller's split count and other cards keep the earlier shapes. The short split rows: twice the split count in
    32-key steps on 2 warps."""
    from tilewright.triton_kernels import kvcache_attention as ka

    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(ka, "_card", lambda device: (132, True))
    shape = functools.partial(ka.launch_shape, device=cuda, interpret=False)
    assert shape(1, 8, 8192, 128) == (16, 128, 3, 4)  # split regime, 512-key splits: 128-key steps (H200)
    assert shape(17, 8, 8192, 128) == (3, 64, 2, 4)  # boundary band
    assert shape(24, 8, 8192, 128) == (1, 64, 3, 4)  # mid band
    assert shape(64, 8, 1024, 128) == (1, 64, 2, 4)  # > 2 programs an SM, short sequences
    assert shape(64, 8, 8192, 128) == (1, 128, 3, 4)  # ... long ones
    assert shape(17, 8, 8192, 64) == (1, 128, 3, 4) == shape(64, 8, 1024, 64)  # head dim 64: as before
    assert shape(1, 8, 8192, 64) == (16, 128, 3, 4)  # (the split regime's H200 rule: every head dim <= 128)
    assert shape(17, 8, 8192, 128, paged=True) == (2, 64, 4, 4)  # paged: as before
    assert shape(17, 8, 8192, 128, num_splits=1) == (1, 128, 3, 4)  # the caller's count: no band
    monkeypatch.setattr(ka, "_card", lambda device: (132, False))
    assert shape(17, 8, 8192, 128) == (1, 128, 3, 4) and shape(64, 8, 1024, 128) == (1, 128, 3, 4)
    assert shape(1, 8, 8192, 128) == (16, 64, 3, 4)
    # the short split rows (H200, head dim 128, contiguous, B x Hkv <= half the SMs, <= 4096 keys, <= 16 query rows):
    # twice the default split count, 32-key steps, the 3-deep ring, 2 warps; the rule needs the row count
    monkeypatch.setattr(ka, "_card", lambda device: (132, True))
    assert shape(1, 8, 1024, 128, rows=4) == (32, 32, 3, 2) and shape(1, 8, 4096, 128, rows=16) == (32, 32, 3, 2)
    assert shape(2, 8, 2048, 128, rows=4) == (16, 32, 3, 2) and shape(8, 8, 1024, 128, rows=4) == (4, 32, 3, 2)
    assert shape(1, 8, 256, 128, rows=4) == (8, 32, 3, 2)  # (splits of 32 keys at least)
    assert shape(1, 4, 4096, 128, rows=8) == (ka.SHORT_SPLIT_MAX, 32, 3, 2)  # 2 x 33, capped at 64
    assert shape(1, 2, 4096, 128, rows=16) == (64, 32, 3, 2)  # (the default's 64 already: not doubled past it)
    assert shape(1, 8, 1024, 128) == (16, 64, 3, 4)  # rows unknown
    assert shape(1, 8, 1024, 128, rows=32) == (16, 64, 3, 4)  # a 32-row tile: not measured
    assert shape(1, 8, 8192, 128, rows=4) == (16, 128, 3, 4)  # a longer cache
    assert shape(9, 8, 1024, 128, rows=4) == (1, 128, 3, 4)  # more than half the SMs' programs
    assert shape(1, 8, 1024, 64, rows=4) == (16, 64, 3, 4)  # head dim 64
    assert shape(1, 8, 1024, 128, paged=True, rows=4) == shape(1, 8, 1024, 128, paged=True)  # in-step lookup
    assert shape(1, 8, 1024, 128, num_splits=8, rows=4) == (8, 128, 3, 4)  # the caller's count
    monkeypatch.setattr(ka, "_card", lambda device: (132, False))
    assert shape(1, 8, 1024, 128, rows=4) == (16, 64, 3, 4)  # another card
