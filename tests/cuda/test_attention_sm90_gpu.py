"""GPU tier for the sm_90a flash-attention forward (Hopper only): every variant from simplest to full on ragged /
GQA / causal problems against fp64 with the rule "error <= 2x torch SDPA's error in the same dtype", the op path with
backend="cuda" (CUDA forward + Triton backward) including gradients, repeated launches, every build free of spills;
10,000 randomized and 10,000 repeated launches with --stress, compute-sanitizer memcheck with --sanitizer.
Variants "a" -> "c" go from the simplest schedule to the full one, so the first failing variant localises a bug."""
from __future__ import annotations

import concurrent.futures as cf
import math
import os
import random

import pytest
import torch
import torch.nn.functional as F
from _cuda_gpu import cuda_family

import tilewright
from tilewright.reference import attention_reference

pytestmark = pytest.mark.gpu
DEV = "cuda"


def _ca():
    return cuda_family("attention_sm90", majors=(9,))


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _qkv(B, Hq, Hkv, Sq, Skv, D, dtype=torch.bfloat16, layout="bhsd"):
    """q, k, v; layout "bshd" stores (B, S, H, D) and returns the (B, H, S, D) transposed (strided) views."""
    def t(H, S):
        if layout == "bshd":
            return torch.randn(B, S, H, D, device=DEV, dtype=dtype).transpose(1, 2)
        return torch.randn(B, H, S, D, device=DEV, dtype=dtype)
    return t(Hq, Sq), t(Hkv, Skv), t(Hkv, Skv)


def _sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])


# cp: c with persistent CTAs (TW_PERSISTENT), last - the full schedule looped over tiles
VARIANTS = ["a", "b", "b_free", "c", "c64", "cp"]
# three consumer warpgroups (BM 192, a round-robin pingpong): head dim 64 only
VARIANTS_HD64 = ["b3", "c3"]
# 176- / 192-key blocks: the head dim 128 build only (head dims 72-128); c176p: c176 with persistent CTAs
VARIANTS_HD128 = ["c176", "c192", "c176p"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", [(1, 2, 2, 128, 128, 128), (2, 4, 2, 300, 300, 128), (1, 2, 1, 77, 333, 64),
                                   (1, 2, 1, 333, 77, 64), (1, 2, 2, 257, 190, 256), (1, 2, 2, 1500, 1500, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_variant_numerics(variant, shape, causal):
    _check_variant_numerics(variant, shape, causal)


# Rows at the one head dim a variant builds at: one tile and a partial one, tails of its Q rows and key blocks, one
# query row, a causal grid of many tiles (the ring - and for three consumers the round robin - over many key
# blocks), GQA. Head dim 64 for the three-consumer variants (192 Q rows, 128 keys), 128 for the wide key blocks
# (128 Q rows, 176 / 192 keys).
SHAPES_AT_HEAD_DIM = {
    64: [(1, 2, 1, 77, 333, 64), (1, 2, 1, 333, 77, 64), (2, 4, 2, 193, 200, 64), (1, 3, 3, 1, 129, 64),
         (1, 2, 2, 2000, 2000, 64), (2, 8, 2, 700, 1500, 64)],
    128: [(1, 2, 1, 77, 333, 128), (1, 2, 1, 333, 77, 128), (2, 4, 2, 300, 353, 128), (1, 3, 3, 1, 177, 128),
          (1, 2, 2, 2000, 2000, 128), (2, 8, 2, 700, 1500, 128)]}
ONE_HEAD_DIM_ROWS = [pytest.param(v, shape, id=f"{v}-{'x'.join(map(str, shape))}")
                     for variants, D in ((VARIANTS_HD64, 64), (VARIANTS_HD128, 128)) for v in variants
                     for shape in SHAPES_AT_HEAD_DIM[D]]


@pytest.mark.parametrize("variant,shape", ONE_HEAD_DIM_ROWS)
@pytest.mark.parametrize("causal", [False, True])
def test_variant_numerics_at_its_head_dim(variant, shape, causal):
    _check_variant_numerics(variant, shape, causal)


def _check_variant_numerics(variant, shape, causal):
    ca = _ca()
    q, k, v = _qkv(*shape)
    out, lse = ca.cuda_attention(q, k, v, causal, None, variant)
    ro, rl = attention_reference(q.double(), k.double(), v.double(), causal)
    assert _rel(out, ro) <= max(2 * _rel(_sdpa(q, k, v, causal), ro), 1e-5)
    assert (lse.double() - rl).abs().max().item() <= 5e-3


# (B, Hq, Hkv, Sq, Skv, D, causal, dtype, layout) beyond test_variant_numerics' grid: one query and one key, every head
# dim at other lengths, a GQA group of 4, fp16, strided (B, S, H, D) storage, many key blocks (ring wrap-around)
CASES = [
    (1, 2, 2, 1, 1, 128, False, torch.bfloat16, "bhsd"),
    (1, 4, 4, 1000, 1000, 64, True, torch.bfloat16, "bhsd"),
    (2, 6, 2, 450, 700, 64, False, torch.float16, "bshd"),  # head dim 64 (c3's): fp16, GQA, strided
    (1, 2, 2, 257, 257, 256, False, torch.bfloat16, "bhsd"),
    (2, 8, 2, 1024, 1024, 128, True, torch.bfloat16, "bhsd"),
    (1, 4, 2, 300, 300, 128, True, torch.float16, "bhsd"),
    (2, 4, 4, 200, 200, 128, False, torch.bfloat16, "bshd"),
    (1, 2, 2, 4096, 4096, 128, True, torch.bfloat16, "bhsd"),
    (1, 2, 2, 2048, 2048, 128, False, torch.bfloat16, "bhsd"),
    # head dims without a build of their own, on the next one up (build_head_dim: TMA zero-fills the padding on
    # load and clips it on the store; an overrun past D would land on elements of the next row, which are compared)
    (1, 4, 2, 700, 900, 96, True, torch.bfloat16, "bhsd"),
    (1, 2, 2, 333, 333, 72, False, torch.float16, "bhsd"),
    (2, 2, 1, 257, 513, 112, True, torch.bfloat16, "bshd"),
    (1, 2, 2, 300, 300, 160, True, torch.bfloat16, "bhsd"),
    (1, 2, 1, 190, 257, 200, False, torch.bfloat16, "bhsd"),
]


def _case_id(c):
    return "x".join(map(str, c[:6])) + f"-{'causal' if c[6] else 'full'}-{str(c[7])[6:]}-{c[8]}"


# every variant on every case; the three-consumer ones on the head dim 64 cases (elsewhere they raise:
# test_attention_sm90.py)
VARIANT_CASES = [pytest.param(n, c, id=f"{n}-{_case_id(c)}") for n in VARIANTS for c in CASES]
VARIANT_CASES += [pytest.param(n, c, id=f"{n}-{_case_id(c)}") for n in VARIANTS_HD64 for c in CASES if c[5] == 64]
VARIANT_CASES += [pytest.param(n, c, id=f"{n}-{_case_id(c)}") for n in VARIANTS_HD128 for c in CASES
                  if 64 < c[5] <= 128]


@pytest.mark.parametrize("variant,case", VARIANT_CASES)
def test_variant_numerics_cases(variant, case):
    """Into NaN-poisoned out / lse (every element must be written), in q's own layout, as the op calls it."""
    ca = _ca()
    B, Hq, Hkv, Sq, Skv, D, causal, dtype, layout = case
    q, k, v = _qkv(B, Hq, Hkv, Sq, Skv, D, dtype, layout)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((B, Hq, Sq), float("nan"), device=DEV)
    ca.launch_attention(q, k, v, out, lse, causal, None, ca.VARIANTS[variant])
    ro, rl = attention_reference(q.double(), k.double(), v.double(), causal)
    assert not (torch.isnan(out).any() or torch.isnan(lse).any())
    assert _rel(out, ro) <= max(2 * _rel(_sdpa(q, k, v, causal), ro), 1e-5)  # floor: SDPA is exact on one key
    assert (lse.double() - rl).abs().max().item() <= 5e-3


@pytest.mark.parametrize("with_lse", [False, True], ids=["out", "out+lse"])
@pytest.mark.parametrize("case", [(2, 4, 2, 300, 128, True), (1, 2, 1, 257, 64, False)],
                         ids=["gqa-300-d128-causal", "gqa-257-d64-full"])
@pytest.mark.parametrize("variant", ["a", "b", "c", "c64", "cp"])
def test_op_forward_and_backward_through_cuda(monkeypatch, variant, case, with_lse):
    """The op with backend="cuda" (this variant's forward, the Triton backward): dq / dk / dv against fp64 within 2x
    the peer's error: the Triton forward when the loss also weighs lse (SDPA returns none), SDPA otherwise."""
    _ca()
    monkeypatch.setenv("TILEWRIGHT_CUDA_ATTN_VARIANT", variant)
    B, Hq, Hkv, S, D, causal = case
    q, k, v = _qkv(B, Hq, Hkv, S, S, D)
    dout = torch.randn_like(q)
    dl = torch.randn(q.shape[:3], device=DEV)

    def grads(fn):
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        out, lse = fn(qq, kk, vv)
        loss = (out.double() * dout.double()).sum()
        if with_lse:
            loss = loss + (lse.double() * dl.double()).sum()
        return torch.autograd.grad(loss, (qq, kk, vv))

    def op(backend):
        return lambda a, b, c: tilewright.flash_attention(a, b, c, causal=causal, return_lse=True, backend=backend)

    ref = grads(lambda a, b, c: attention_reference(a.double(), b.double(), c.double(), causal))
    ours = grads(op("cuda"))
    peer = grads(op("triton")) if with_lse else grads(lambda a, b, c: (_sdpa(a, b, c, causal), None))
    for name, g, p, r in zip(("dq", "dk", "dv"), ours, peer, ref):
        assert math.isfinite(_rel(g, r)) and _rel(g, r) <= 2 * _rel(p, r) + 1e-6, \
            f"{name}: cuda forward {_rel(g, r):.2e} vs peer {_rel(p, r):.2e}"


@pytest.mark.parametrize("exp_fma", [2, 4, 8])
@pytest.mark.parametrize("case", [(1, 2, 1, 77, 333, 64, False, 0), (1, 4, 4, 1000, 1000, 64, True, 0),
                                  (2, 4, 2, 700, 500, 64, True, -200), (1, 2, 2, 300, 300, 128, True, 0)],
                         ids=["77x333-full", "1000-causal", "700x500-bottom-right", "d128-causal"])
def test_exponentials_on_the_fma_pipe(case, exp_fma):
    """Every exp_fma-th chunk's exponentials by ex2_fma (ptx/math.cuh): out within 2x the bf16 unfused computation's
    error of fp64, LSE within 5e-3, rows without a visible key (bottom-right, Sq > Skv) exactly 0 / -inf."""
    import dataclasses

    ca = _ca()
    B, Hq, Hkv, Sq, Skv, D, causal, offset = case
    q, k, v = _qkv(B, Hq, Hkv, Sq, Skv, D)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((B, Hq, Sq), float("nan"), device=DEV)
    var = dataclasses.replace(ca.VARIANTS["c"], exp_fma=exp_fma)
    ca.launch_attention(q, k, v, out, lse, causal, None, var, causal_offset=offset)
    bottom_right = offset != 0
    ro, rl = attention_reference(q.double(), k.double(), v.double(), causal, None, bottom_right)
    to, _ = attention_reference(q, k, v, causal, None, bottom_right)
    assert not torch.isnan(out).any() and torch.equal(torch.isinf(lse), torch.isinf(rl))
    assert _rel(out, ro) <= 2 * _rel(to, ro)
    assert (lse.double() - rl)[torch.isfinite(rl)].abs().max().item() <= 5e-3


@pytest.mark.parametrize("case", [(1, 4, 2, 300, 4100, 128, False), (1, 2, 2, 4200, 4200, 96, True),
                                  (2, 4, 2, 1500, 1500, 128, True), (1, 2, 2, 2048, 2048, 96, True)],
                         ids=["gqa-300x4100-d128-full", "4200-d96-causal", "persistent-gqa-1500-d128-causal",
                              "persistent-2048-d96-causal"])
def test_op_runs_the_wide_key_variant_where_it_is_picked(monkeypatch, case):
    """The public forward (backend="cuda", no variant named) on rows where pick_variant takes 176-key blocks - or the
    persistent CTAs (short causal rows): it launches that variant (after its own self-check) and the output is within
    2x SDPA's error of fp64; so are the gradients, whose backward reads that forward's LSE."""
    ca = _ca()
    B, Hq, Hkv, Sq, Skv, D, causal = case
    wide = ca.PERSISTENT_BY_HEAD_DIM[128] if ca.persistent_pays(causal, Sq, Skv) else ca.WIDE_KEYS_BY_HEAD_DIM[128]
    assert ca.pick_variant(D, causal, Sq, Skv).name == wide
    seen = []
    launch_cached = ca.launch.launch_cached
    # (every CUDA family launches through this one function: the backward's keys hold no variant at [2])
    monkeypatch.setattr(ca.launch, "launch_cached",
                        lambda cache, key, *rest: (seen.append(getattr(key[2], "name", None)),
                                                   launch_cached(cache, key, *rest))[1])
    q, k, v = (t.requires_grad_() for t in _qkv(B, Hq, Hkv, Sq, Skv, D))
    out = tilewright.flash_attention(q, k, v, causal=causal, backend="cuda")
    assert wide in seen
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ro, _ = attention_reference(qd, kd, vd, causal)
    peer = _sdpa(q, k, v, causal)
    assert _rel(out, ro) <= 2 * _rel(peer, ro)
    dout = torch.randn_like(out)
    ours = torch.autograd.grad(out, (q, k, v), dout)
    ref = torch.autograd.grad(ro, (qd, kd, vd), dout.double())
    theirs = torch.autograd.grad(peer, (q, k, v), dout)
    for name, g, r, p in zip(("dq", "dk", "dv"), ours, ref, theirs):
        assert _rel(g, r) <= 2 * _rel(p, r) + 1e-6, f"{name}: {_rel(g, r):.2e} vs SDPA {_rel(p, r):.2e}"


# Persistent CTAs (cp / c176p) against their one-CTA-per-tile twins (c / c176), which run the same tiles' key blocks in
# the same order: (B, Hq, Hkv, Sq, Skv, causal, bottom-right, window (left, right)). Tails in both lengths, GQA,
# B > 1; fewer tiles than SMs (6) and more (512, heavy-first order; 192 past 4096 keys, x-fastest order); tiles
# without a key block (bottom-right causal, Sq 1000 > Skv 200: rows 0-799 see no key, tiles 0-5 have no block); a
# window (two to three blocks a tile, from kb0 > 0); one key block a tile (Skv 100).
PERSISTENT_CASES = [(1, 2, 2, 300, 300, False, False, None), (2, 4, 2, 333, 777, True, False, None),
                    (2, 16, 4, 2047, 2047, True, False, None), (2, 8, 8, 1500, 5000, True, True, None),
                    (2, 4, 2, 1000, 200, True, True, None), (1, 4, 2, 1100, 1100, False, False, (256, 0)),
                    (3, 4, 4, 700, 100, False, False, None)]


@pytest.mark.parametrize("sms", [None, 1, 5], ids=["sms-device", "sms-1", "sms-5"])
@pytest.mark.parametrize("case", PERSISTENT_CASES, ids=lambda c: "x".join(map(str, c[:5])) +
                         f"-{'causal' if c[5] else 'full'}{'-br' if c[6] else ''}{'-window' if c[7] else ''}")
@pytest.mark.parametrize("variant,twin", [("cp", "c"), ("c176p", "c176")])
def test_persistent_matches_its_twin(monkeypatch, variant, twin, case, sms):
    """cp / c176p write out and LSE bit-equal to c / c176 (the same tiles, blocks and instructions per element, only
    the schedule of tiles over CTAs differs) into NaN-poisoned tensors, within bf16's error of the fp64 reference.
    The grid: the device's SM count, or forced to 1 CTA (every tile in one CTA: the barriers' parities and the K / V
    ring's position carried over hundreds of tiles, of 0, 1 or many blocks) or 5 (tiles that do not divide evenly)."""
    ca = _ca()
    if sms is not None:
        monkeypatch.setattr(ca, "sm_count", lambda device: sms)
    monkeypatch.setattr(ca, "_prepared", {})
    B, Hq, Hkv, Sq, Skv, causal, bottom_right, window = case
    q, k, v = _qkv(B, Hq, Hkv, Sq, Skv, 128)
    shift = Skv - Sq if bottom_right else 0
    options = {"causal_offset": shift + (0 if causal or window is None else window[1]),
               "window_offset": None if window is None else shift - window[0]}
    upper = causal or window is not None
    results = []
    for name in (variant, twin):
        out = torch.full_like(q, float("nan"))
        lse = torch.full((B, Hq, Sq), float("nan"), device=DEV)
        ca.launch_attention(q, k, v, out, lse, upper, None, name, **options)
        results.append((out, lse))
    torch.cuda.synchronize()
    (out, lse), (twin_out, twin_lse) = results
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert torch.equal(out, twin_out) and torch.equal(lse, twin_lse), \
        f"{variant} differs from {twin}: out {(out.float() - twin_out.float()).abs().max().item():.3e}, " \
        f"lse {(lse - twin_lse).nan_to_num(posinf=0, neginf=0).abs().max().item():.3e}"
    ro, rl = attention_reference(q.double(), k.double(), v.double(), causal, None, bottom_right, 0.0, window)
    assert torch.equal(torch.isinf(lse), torch.isinf(rl))  # rows without a key: LSE -inf (and out 0) in both
    assert _rel(out, ro) <= 1e-2 and (lse.double() - rl)[torch.isfinite(rl)].abs().max().item() <= 5e-3


def test_repeated_launches_identical():
    ca = _ca()
    q, k, v = _qkv(2, 4, 2, 300, 300, 128)
    out0, lse0 = ca.cuda_attention(q, k, v, True)
    out, lse = torch.empty_like(out0), torch.empty_like(lse0)
    for _ in range(2000):
        ca.launch_attention(q, k, v, out, lse, True)
    torch.cuda.synchronize()
    assert torch.equal(out, out0) and torch.equal(lse, lse0)


def test_every_build_compiles_without_spills():
    """Every variant x head dim x causal in bf16, the default variant in fp16 at every head dim and every variant in
    fp16 at head dim 128 (the stress test's launches): no register spills, no ptxas performance warning. On the
    device (its cores compile in parallel); build-check compiles a subset on the CPU."""
    ca = _ca()
    from tilewright.cuda_fallback import build_check
    from tilewright.cuda_fallback.runtime import build

    builds = [(n, D, c, False) for n in ca.VARIANTS for D in ca.VARIANTS[n].head_dims for c in (False, True)]
    builds += [(ca.pick_variant(D).name, D, c, True) for D in ca.HEAD_DIMS for c in (False, True)]
    builds += [(n, 128 if 128 in ca.VARIANTS[n].head_dims else 64, c, True) for n in ca.VARIANTS
               if n != ca.DEFAULT_VARIANT for c in (False, True)]

    def one(b):
        name, D, causal, fp16 = b
        log = build.compile_source(ca.SOURCE, "sm_90a", ca.VARIANTS[name].defines(D, causal, fp16)).log
        warn = [ln.strip() for ln in log.splitlines() if build_check.PERF_WARNINGS.search(ln)]
        return b, build_check.parse_ptxas(log)["spills"], warn

    with cf.ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as ex:
        bad = [r for r in ex.map(one, builds) if r[1] or r[2]]
    assert not bad, bad


def test_stress_random_launches(stress_launches):
    """--stress: --stress-launches (10,000) launches of the default variant on random small problems (every head dim,
    GQA, causal or not, fp16 at head dim 128), each checked against an fp32 reference on the GPU; synchronised every
    500 launches."""
    ca = _ca()
    rng = random.Random(1234)
    errs, fails = [], []

    def flush():
        torch.cuda.synchronize()
        for (e, el), sh in errs:
            e, el = e.item(), el.item()
            if not (math.isfinite(e) and math.isfinite(el)) or e > 2e-2 or el > 1e-2:
                fails.append((sh, e, el))
        errs.clear()

    for _ in range(stress_launches):
        D = rng.choice((64, 128, 128, 256))
        Hkv = rng.choice((1, 2))
        sh = (rng.choice((1, 2)), Hkv * rng.choice((1, 2, 3)), Hkv, rng.randint(1, 300), rng.randint(1, 300), D,
              rng.random() < 0.5, torch.float16 if D == 128 and rng.random() < 0.25 else torch.bfloat16)
        B, Hq, Hkv, Sq, Skv, D, causal, dtype = sh
        q, k, v = _qkv(B, Hq, Hkv, Sq, Skv, D, dtype)
        out = torch.empty_like(q)
        lse = torch.empty(B, Hq, Sq, device=DEV)
        ca.launch_attention(q, k, v, out, lse, causal)
        ro, rl = attention_reference(q.float(), k.float(), v.float(), causal)
        errs.append((((out.float() - ro).norm() / ro.norm().clamp_min(1e-12), (lse - rl).abs().max()), sh))
        if len(errs) == 500:
            flush()
    flush()
    assert not fails, f"{len(fails)} of {stress_launches} launches wrong, first: {fails[:5]}"


def test_stress_repeated_launches_identical(stress_launches):
    """--stress: the same prepared problem --stress-launches (10,000) times back to back: no state (mbarrier phase,
    named barrier) may survive a launch, so every run is bitwise the first one."""
    ca = _ca()
    q, k, v = _qkv(2, 4, 2, 300, 300, 128)
    out0, lse0 = ca.cuda_attention(q, k, v, True)
    out, lse = torch.empty_like(out0), torch.empty_like(lse0)
    for _ in range(stress_launches):
        ca.launch_attention(q, k, v, out, lse, True)
    torch.cuda.synchronize()
    assert torch.equal(out, out0) and torch.equal(lse, lse0)


@pytest.mark.parametrize("variant", ["a", "c", "cp"])
def test_sanitizer_memcheck(sanitizer, variant):
    """--sanitizer: compute-sanitizer memcheck on one small ragged GQA problem (Sq 130, Skv 200) per head dim."""
    _ca()
    sanitizer("memcheck", f"""
        import torch
        from tilewright.cuda_fallback import attention_sm90 as ca
        for D, causal in ((128, True), (64, False), (256, True)):
            q = torch.randn(1, 4, 130, D, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, 2, 200, D, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(1, 2, 200, D, device="cuda", dtype=torch.bfloat16)
            ca.cuda_attention(q, k, v, causal, None, "{variant}")
        """, timeout=240)
