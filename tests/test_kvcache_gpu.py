"""GPU tier of flash_attention_with_kvcache: bf16 decode and short-chunk rows (GQA 32/8 and 8/1, head dims 64 / 128,
contiguous and paged caches of 16- and 256-token pages, poisoned unused slots) against fp64 with the rule "error <=
2x torch's own bf16 computation", and agreement with SDPA's flash backend on a plain decode row."""
from __future__ import annotations

import importlib

import pytest
import torch

import tilewright
from tilewright.reference import kvcache_attention_reference

pytestmark = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py)
DEV = "cuda"


def _paged(kc, vc, page):
    B, S, Hkv, D = kc.shape
    per = -(-S // page)
    order = torch.randperm(B * per, device=DEV)
    table = order.reshape(B, per).to(torch.int32)

    def pages(c):
        c = torch.nn.functional.pad(c, (0, 0, 0, 0, 0, per * page - S)).reshape(B * per, page, Hkv, D)
        out = torch.full((B * per + 2, page, Hkv, D), float("nan"), device=DEV, dtype=c.dtype)  # 2 spare pages: NaN
        out[order] = c
        return out
    return pages(kc), pages(vc), table


def _poisoned(kc, vc, seqlens, page):
    """(k cache, v cache, block table or None): every slot past each sequence's length set to NaN (the op must never
    read one), then cut into shuffled pages of ``page`` tokens (None: contiguous)."""
    for b in range(kc.shape[0]):
        kc[b, int(seqlens[b]):] = float("nan")
        vc[b, int(seqlens[b]):] = float("nan")
    if page is None:
        return kc, vc, None
    return _paged(kc, vc, page)


def _assert_within_twice_torch(q, kc, vc, table, seqlens):
    """The op's bf16 output within 2x torch's own bf16 error of fp64 (relative norm), finite, and its LSE within 5e-3
    of fp64's; NaN-poisoned unused cache slots count as zeros in the references (the op never reads them)."""
    out, lse = tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, block_table=table, return_lse=True)
    kd, vd = kc.double().nan_to_num(0.0), vc.double().nan_to_num(0.0)
    ro, rl = kvcache_attention_reference(q.double(), kd, vd, seqlens, table)
    to, _ = kvcache_attention_reference(q, kc.nan_to_num(0.0), vc.nan_to_num(0.0), seqlens, table)  # torch, bf16
    rel = lambda x: ((x.double() - ro).norm() / ro.norm()).item()  # noqa: E731
    assert torch.isfinite(out).all() and rel(out) <= 2 * rel(to) + 1e-6
    assert (lse.double() - rl).abs().max().item() <= 5e-3


@pytest.mark.parametrize("page", [None, 16, 256])
@pytest.mark.parametrize("B,Sq,Hq,Hkv,D,S", [(4, 1, 32, 8, 128, 3000), (2, 4, 8, 1, 64, 777), (1, 1, 16, 16, 128, 9)])
def test_within_twice_torch_error(B, Sq, Hq, Hkv, D, S, page):
    g = torch.Generator(device=DEV).manual_seed(S + D)
    q = torch.randn(B, Sq, Hq, D, generator=g, device=DEV, dtype=torch.bfloat16)
    kc = torch.randn(B, S + 50, Hkv, D, generator=g, device=DEV, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    seqlens = torch.tensor([S - 3 * b for b in range(B)], dtype=torch.int32, device=DEV)
    _assert_within_twice_torch(q, *_poisoned(kc, vc, seqlens, page), seqlens)


def test_agrees_with_sdpa_flash_on_decode():
    q = torch.randn(8, 1, 32, 128, device=DEV, dtype=torch.bfloat16)
    kc = torch.randn(8, 4096, 8, 128, device=DEV, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    out = tilewright.flash_attention_with_kvcache(q, kc, vc, 4096)
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2),
                                                           enable_gqa=True).transpose(1, 2)
    assert (out.float() - ref.float()).abs().max().item() <= 2e-2


@pytest.mark.parametrize("page", [None, 16])
def test_a_repeated_signature_reads_the_new_lengths_and_pages(page):
    """From the second call of a signature the op goes straight to bound launches (ops/kvcache._replays): new
    lengths and a reshuffled block table in new tensors of the same shapes must be followed, and an in-place change
    to the lengths beyond the capacity must still raise."""
    B, Hq, Hkv, D, S = 3, 16, 4, 128, 600
    q = torch.randn(B, 1, Hq, D, device=DEV, dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device=DEV, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    for lengths in ((600, 10, 300), (1, 599, 77), (600, 10, 300)):
        seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
        kp, vp, table = (kc, vc, None) if page is None else _paged(kc, vc, page)
        out = tilewright.flash_attention_with_kvcache(q, kp, vp, seqlens, block_table=table)
        ref, _ = kvcache_attention_reference(q.double(), kc.double(), vc.double(), seqlens)
        assert ((out.double() - ref).norm() / ref.norm()).item() <= 1e-2, lengths
    seqlens[0] = 10 ** 6  # beyond any capacity (a paged cache's is its table's width x the page size)
    with pytest.raises(ValueError, match="capacity"):
        tilewright.flash_attention_with_kvcache(q, kp, vp, seqlens, block_table=table)


@pytest.mark.parametrize("splits", [None, 1, 3])
@pytest.mark.parametrize("sq", [1, 3])
def test_a_replay_returns_the_first_calls_lse_with_or_without_being_asked(splits, sq):
    """The bound replay of a signature writes a decode step's LSE into the partials' buffer and makes a tensor of it
    only when the caller asks (return_lse): out and LSE of replays asked either way equal the first call's bit for
    bit, the LSE a fresh-looking (B, Hq, Sq) tensor at storage offset 0; one split (no partials) and three; a chunk of
    3 tokens gets an LSE of its own (not a view keeping the partials alive)."""
    g = torch.Generator(device=DEV).manual_seed(5)
    q = torch.randn(2, sq, 16, 128, generator=g, device=DEV, dtype=torch.bfloat16)
    kc = torch.randn(2, 700, 4, 128, generator=g, device=DEV, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    seqlens = torch.tensor([700, 333], dtype=torch.int32, device=DEV)
    call = lambda lse: tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, num_splits=splits,  # noqa: E731
                                                               return_lse=lse)
    out0, lse0 = call(True)
    for want_lse in (False, True, False, True):
        got = call(want_lse)
        out, lse = got if want_lse else (got, None)
        assert torch.equal(out, out0)
        if want_lse:
            assert torch.equal(lse, lse0) and lse.shape == (2, 16, sq) and lse.storage_offset() == 0
            assert lse.is_contiguous()
            if sq > 1:
                assert lse.untyped_storage().nbytes() == lse.numel() * 4


@pytest.mark.parametrize("page", [None, 16])
def test_append_then_attend_matches_the_reference(page):
    """A decode step with k / v appended (the append launch, then the split kernels) against appending by hand and
    the fp64 reference."""
    B, Hq, Hkv, D, S = 4, 32, 8, 128, 1000
    g = torch.Generator(device=DEV).manual_seed(7)
    q = torch.randn(B, 2, Hq, D, generator=g, device=DEV, dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, generator=g, device=DEV, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    k_new = torch.randn(B, 2, Hkv, D, generator=g, device=DEV, dtype=torch.bfloat16)
    v_new = torch.randn_like(k_new)
    seqlens = torch.tensor([0, 17, 500, 998], dtype=torch.int32, device=DEV)
    want_k, want_v = kc.clone(), vc.clone()
    for b in range(B):
        n = int(seqlens[b])
        want_k[b, n:n + 2], want_v[b, n:n + 2] = k_new[b], v_new[b]
    kp, vp, table = (kc, vc, None) if page is None else _paged(kc, vc, page)
    out = tilewright.flash_attention_with_kvcache(q, kp, vp, seqlens, k=k_new, v=v_new, block_table=table)
    if page is None:
        assert torch.equal(kp, want_k) and torch.equal(vp, want_v)
    ref, _ = kvcache_attention_reference(q.double(), want_k.double(), want_v.double(), seqlens + 2)
    assert ((out.double() - ref).norm() / ref.norm()).item() <= 1e-2


@pytest.mark.parametrize("page", [None, 16])
def test_a_decode_loop_with_appends(page):
    """Five decode steps as an eager loop runs them - append one token, attend, advance the lengths in place - from
    the second step on through the op's replay (bound append + attention launches); every step against the fp64
    reference on a cache appended by hand."""
    B, Hq, Hkv, D, S = 2, 16, 4, 64, 300
    g = torch.Generator(device=DEV).manual_seed(11)
    kc = torch.zeros(B, S, Hkv, D, device=DEV, dtype=torch.bfloat16)
    vc = torch.zeros_like(kc)
    kc[:, :100] = torch.randn(B, 100, Hkv, D, generator=g, device=DEV, dtype=torch.bfloat16)
    vc[:, :100] = torch.randn(B, 100, Hkv, D, generator=g, device=DEV, dtype=torch.bfloat16)
    want_k, want_v = kc.clone(), vc.clone()
    kp, vp, table = (kc, vc, None) if page is None else _paged(kc, vc, page)
    seqlens = torch.tensor([100, 37], dtype=torch.int32, device=DEV)
    for step in range(5):
        q = torch.randn(B, 1, Hq, D, generator=g, device=DEV, dtype=torch.bfloat16)
        k_new = torch.randn(B, 1, Hkv, D, generator=g, device=DEV, dtype=torch.bfloat16)
        v_new = torch.randn_like(k_new)
        for b in range(B):
            n = int(seqlens[b])
            want_k[b, n], want_v[b, n] = k_new[b, 0], v_new[b, 0]
        out = tilewright.flash_attention_with_kvcache(q, kp, vp, seqlens, k=k_new, v=v_new, block_table=table)
        seqlens += 1
        ref, _ = kvcache_attention_reference(q.double(), want_k.double(), want_v.double(), seqlens)
        assert ((out.double() - ref).norm() / ref.norm()).item() <= 1e-2, step


def _variant_matches_the_default(page, config):
    """kvcache_attention with ``config`` against the default launch on a bf16 GQA 32/8 decode (lengths past whole
    pages and steps, one of a single key), on the first (compiling) call, the bound replay of the signature, and a
    CUDA-graph replay - where the fused combine's arrival counters must come back to zero after every launch."""
    from tilewright.triton_kernels import kvcache_attention as ka

    g = torch.Generator(device=DEV).manual_seed(11)
    q = torch.randn(4, 1, 32, 128, generator=g, device=DEV, dtype=torch.bfloat16)
    kc = torch.randn(4, 3000, 8, 128, generator=g, device=DEV, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    seqlens = torch.tensor([3000, 2047, 1, 129], dtype=torch.int32, device=DEV)
    table = None
    if page is not None:
        kc, vc, table = _paged(kc, vc, page)
    want = ka.kvcache_attention(q, kc, vc, seqlens, table)
    variant = lambda: ka.kvcache_attention(q, kc, vc, seqlens, table, config=config)  # noqa: E731
    for _ in range(3):  # compile + record, then the bound replay twice
        out, lse = variant()
        assert (out.float() - want[0].float()).abs().max().item() <= 1e-2
        assert (lse - want[1]).abs().max().item() <= 1e-4
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out, g_lse = variant()
    for _ in range(3):
        g_out.zero_()
        graph.replay()
        assert (g_out.float() - want[0].float()).abs().max().item() <= 1e-2


@pytest.mark.parametrize("page", [None, 16])
def test_combine_fused_into_the_split_kernel(page):
    """The split kernel's own combine (config fused_combine; off by default until measured): the same answer as the
    second launch's combine (_variant_matches_the_default)."""
    _variant_matches_the_default(page, {"fused_combine": True})


@pytest.mark.parametrize("page", [None, 16])
def test_combine_as_a_programmatic_dependent_launch(page):
    """The combine launched as a programmatic dependent of the split kernel (PDL_COMBINE, the default): the same
    answer as the ordinary second launch (config pdl_combine False) on the first call, the bound replays and a
    CUDA-graph replay (_variant_matches_the_default) - the combine must not read a partial before the split grid is
    done."""
    from tilewright.triton_kernels import kvcache_attention as ka

    assert ka.PDL_COMBINE
    _variant_matches_the_default(page, {"pdl_combine": False})


@pytest.mark.parametrize("page", [8, 16, 32, 256])
def test_page_prefetch_matches_the_in_step_lookup(page):
    """PAGE_PREFETCH (the default: each step's page-table entries loaded a step ahead, K / V in the contiguous ring,
    at the contiguous launch's shape) and the in-step lookup at the paged shape (config page_prefetch False) give the
    same answer (_variant_matches_the_default)."""
    _variant_matches_the_default(page, {"page_prefetch": False})


@pytest.mark.parametrize("page", [None, 16])
@pytest.mark.parametrize("B,S", [(1, 1024), (2, 2100), (8, 4096), (1, 333)])
def test_short_split_rows_within_twice_torch_error(B, S, page, monkeypatch):
    """The short split rows (kvcache_attention.SHORT_SPLIT_KEYS: on the H200, twice the split count in 32-key steps
    on 2 warps; elsewhere the split regime's shape): GQA 32/8 decode over caches of <= 4096 keys, lengths off the step
    and split boundaries, unused slots poisoned, contiguous and pages of 16 (the prefetch takes the contiguous shape),
    against fp64 with the 2x-torch rule - and on an H200 the launch is the band's."""
    from tilewright.triton_kernels import kvcache_attention as ka

    seen, kernel = [], ka._split_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(**kw):
                seen.append((kw["BLOCK_N"], kw["num_warps"], kw["num_splits"]))
                return kernel[grid](**kw)
            return launch

        def __getattr__(self, name):  # the bound launch reads the kernel's own attributes (arg_names ...)
            return getattr(kernel, name)
    monkeypatch.setattr(ka, "_split_kernel", Spy())
    ka._bound.clear()  # bound replays from an earlier test would skip the spy: the kernel layer's and the op's
    importlib.import_module("tilewright.ops.kvcache")._replays.clear()
    g = torch.Generator(device=DEV).manual_seed(S + B)
    q = torch.randn(B, 1, 32, 128, generator=g, device=DEV, dtype=torch.bfloat16)
    kc = torch.randn(B, S, 8, 128, generator=g, device=DEV, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    seqlens = torch.tensor([S - 37 * b - (b > 0) for b in range(B)], dtype=torch.int32, device=DEV)
    _assert_within_twice_torch(q, *_poisoned(kc, vc, seqlens, page), seqlens)
    if ka.wide_split_steps(q.device):
        block, _, warps = ka.SHORT_SPLIT_SHAPE
        doubled = min(2 * ka.default_splits(B, 8, S, q.device), S // block, ka.SHORT_SPLIT_MAX)
        assert seen and seen[0] == (block, warps, max(doubled, 1)), seen
