"""GPU tier for the sm_90a CUDA GEMM (Hopper only): numerics of every variant / layout / dtype / epilogue on odd
shapes against fp64, with the rule "error <= 2x torch's own unfused error in the same dtype"; randomized repeated
launches (the persistent-kernel bug class: fine once, wrong or hung after many runs; 10,000 of them with --stress);
compute-sanitizer on small launches (--sanitizer); the op and router path. ``_check`` also serves the mma.sync
kernel's tests (test_gemm_sm120_gpu.py) through its ``launch`` / ``constraints`` arguments."""
from __future__ import annotations

import math
import random

import pytest
import torch
from _cuda_gpu import cuda_family

import tilewright
from tilewright import router
from tilewright.reference import gemm_reference

pytestmark = pytest.mark.gpu


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


needs_hopper = pytest.mark.skipif(not _hopper(), reason="sm_90a kernel: needs an H100/H200")
DEV = "cuda"


def _cg():
    return cuda_family("gemm_sm90")  # the device check is the needs_hopper mark


def _inputs(M, N, K, dtype, a_mn=False, b_mn=True):
    a = torch.randn(M, K, device=DEV).to(dtype)
    b = (torch.randn(K, N, device=DEV) / math.sqrt(K)).to(dtype)
    if a_mn:
        a = a.t().contiguous().t()
    if not b_mn:
        b = b.t().contiguous().t()
    return a, b


def _check(cg, M, N, K, dtype, *, variant=None, a_mn=False, b_mn=True, bias=False, act=None, res=None,
           order="grouped", group=8, launch=None, constraints=None):
    """One launch into a NaN-poisoned output, checked against fp64; its relative error, or None when the layout cannot
    take TMA (the router would not route it). ``res``: None | "full" | "pos" (a (S, N) pos_embed broadcast over the
    batch) | "row" (one (N,) row for every output row). ``launch`` / ``constraints``: another CUDA GEMM family's
    (default: ``cg``'s launch_cuda_gemm / constraints)."""
    launch = launch or cg.launch_cuda_gemm
    constraints = constraints or cg.constraints
    a, b = _inputs(M, N, K, dtype, a_mn, b_mn)
    if not constraints(a, b)[0]:
        return None
    bias_t = None
    if bias == "odd":  # a bias view 2 bytes past a 4-byte boundary: the epilogue's element-wise loads
        bias_t = torch.randn(N + 1, device=DEV, dtype=dtype)[1:]
    elif bias:
        bias_t = torch.randn(N, device=DEV, dtype=dtype)
    res3 = res2d = None
    if res == "full":
        res2d = torch.randn(M, N, device=DEV, dtype=dtype)
        res3 = res2d.reshape(1, M, N)
    elif res == "pos":  # pos_embed (S, N) broadcast over a batch of M // S rows
        S = next(s for s in (7, 5, 3, 2, 1) if M % s == 0)
        pe = torch.randn(S, N, device=DEV, dtype=dtype)
        res3 = pe.unsqueeze(0).expand(M // S, S, N)
        res2d = res3.reshape(M, N)
    elif res == "row":  # a residual with outer and row stride 0
        row = torch.randn(N, device=DEV, dtype=dtype)
        res3 = row.expand(1, M, N)
        res2d = row.expand(M, N)
    elif res == "pos_tile":  # a pos_embed of 256 rows repeated over the batch: read through a map of its rows
        pe = torch.randn(256, N, device=DEV, dtype=dtype)
        res3 = pe.unsqueeze(0).expand(M // 256, 256, N)
        res2d = res3.reshape(M, N)
    elif res == "batched":  # (4, M / 4, N), batches back to back: one map over the M rows
        res2d = torch.randn(M, N, device=DEV, dtype=dtype)
        res3 = res2d.reshape(4, M // 4, N)
    elif res == "odd":  # odd row stride and a base 2 bytes off: no 32-bit pair loads
        res2d = torch.randn(M, N + 1, device=DEV, dtype=dtype)[:, 1:]
        res3 = res2d.unsqueeze(0)
    elif res == "transposed":  # column stride M: the pair's second element is a row away
        res2d = torch.randn(N, M, device=DEV, dtype=dtype).t()
        res3 = res2d.unsqueeze(0)
    out = torch.full((M, N), float("nan"), device=DEV, dtype=dtype)  # poisoned: every element must be written
    launch(a, b, out, bias=bias_t, residual=res3, activation=act, variant=variant, tile_order=order, group=group)
    ref = gemm_reference(a.double(), b.double(), None if bias_t is None else bias_t.double(),
                         None if res2d is None else res2d.double(), act)
    ours = (out.double() - ref).norm() / ref.norm()
    theirs = (gemm_reference(a, b, bias_t, res2d, act, dtype).double() - ref).norm() / ref.norm()
    assert torch.isfinite(out).all(), f"unwritten or non-finite output ({M}, {N}, {K})"
    assert ours <= 2 * theirs + 1e-5, f"({M}, {N}, {K}) {variant} err {ours:.3e} vs torch {theirs:.3e}"
    return ours.item()


ODD = [(1, 8, 8), (5, 136, 72), (127, 136, 72), (300, 264, 200), (513, 776, 1000), (1000, 4096, 120),
       (5000, 1032, 336), (129, 264, 4104)]
EPILOGUES = [dict(), dict(bias=True), dict(bias=True, act="relu"), dict(bias=True, act="gelu"),
             dict(bias=True, act="gelu_tanh"), dict(bias=True, act="silu"), dict(res="full"),
             dict(bias=True, res="pos"), dict(bias=True, act="gelu", res="full"), dict(act="silu", res="row"),
             dict(bias="odd", res="odd"), dict(bias=True, res="transposed")]
FULL_EPILOGUE = EPILOGUES[8]  # bias + gelu + full residual: every epilogue stage at once
VARIANTS = ["pp128x128s4", "pp128x128s5", "pp64x256s4", "coop128x256s3", "coop256x128s3", "coop128x192s4"]
DEFAULT = "coop128x256s3"  # gemm_sm90.DEFAULT_VARIANT (named here so collection needs no CUDA module)
# tails in every dim; K = 1 and K = 333 / 4100 are not TMA-able with a K-major operand (those cases are skipped per
# layout, as the router would); 2048^3 and 5000 rows: many waves of the persistent grid
SWEEP_SHAPES = [(1, 8, 8), (5, 136, 1), (64, 64, 64), (127, 136, 72), (300, 264, 200), (513, 776, 1000),
                (1000, 4096, 120), (2048, 2048, 2048), (5000, 1032, 333), (129, 264, 4100)]
# (variant, a_mn, b_mn, fp16): every variant with A K-major / B N-major in bf16; the default variant also in the other
# three layouts and in fp16 (both B layouts)
SWEEP_BUILDS = ([(v, False, True, False) for v in VARIANTS] +
                [(DEFAULT, True, True, False), (DEFAULT, False, False, False), (DEFAULT, True, False, False),
                 (DEFAULT, False, True, True), (DEFAULT, False, False, True)])


def _epilogues_for(build):
    """Every epilogue on the main build (default variant, bf16, A K-major, B N-major); none and the full one elsewhere
    (each (build, epilogue) is a compile)."""
    return EPILOGUES if build == (DEFAULT, False, True, False) else [EPILOGUES[0], FULL_EPILOGUE]


def _epi_id(e):
    return "-".join(f"{k}={v}" for k, v in e.items()) or "plain"


def _build_id(b):
    return f"{b[0]}-{'AM' if b[1] else 'AK'}-{'BN' if b[2] else 'BK'}-{'fp16' if b[3] else 'bf16'}"


@needs_hopper
@pytest.mark.parametrize("epi", EPILOGUES, ids=_epi_id)
@pytest.mark.parametrize("shape", ODD, ids=str)
def test_epilogues_odd_shapes(shape, epi):
    _check(_cg(), *shape, torch.bfloat16, **epi)


@needs_hopper
@pytest.mark.parametrize("variant", ["coop128x256s3", "pp128x128s5"])
@pytest.mark.parametrize("res", ["full", "batched", "pos_tile", "row", "odd", "transposed"])
@pytest.mark.parametrize("shape", [(2048, 264, 200), (1024, 1032, 336), (4096, 2048, 2048)], ids=str)
def test_residual_paths(shape, res, variant):
    """Each residual layout on the path the launcher gives it - the TMA map into the staging tile (full, batched,
    a pos_embed whose period holds whole tiles) or element loads (a repeated row, odd alignment, transposed) - with
    a bias, N tails and several tiles per CTA; the path is asserted so neither can go untested."""
    cg = _cg()
    M, N, K = shape
    v = cg.VARIANTS[variant]
    expect_map = res in ("full", "batched", "pos_tile")
    if res == "pos_tile":
        rs, period = (0, N, 1), 256
    elif res == "batched":
        rs, period = (M // 4 * N, N, 1), M // 4
    else:
        rs, period = (M * N, N, 1), M
    if expect_map:
        assert cg.residual_map_rows(M, N, v, 1 << 20, rs, period) == (256 if res == "pos_tile" else M)
    else:  # the layouts _check builds for these kinds: element loads
        rs, period, ptr = {"row": ((0, 0, 1), M, 1 << 20), "odd": ((M * (N + 1), N + 1, 1), M, (1 << 20) + 2),
                           "transposed": ((M * N, 1, M), M, 1 << 20)}[res]
        assert cg.residual_map_rows(M, N, v, ptr, rs, period) == 0
    _check(cg, M, N, K, torch.bfloat16, variant=variant, bias=True, res=res)


# (N, buffer pitch, first column) of an output view: a contiguous 1000-wide output (2,000-byte pitch), a view of a
# buffer 8 columns wider than it, one 8 columns into a 64-multiple buffer (base off the 128-byte grid), and an N tail
# that is no whole 16-byte chunk (B K-major: an N-major B of 1003 columns cannot take TMA)
DIRECT_STORE_CASES = {"contiguous": (1000, 1000, 0), "wide_pitch": (2000, 2008, 0), "base_offset": (1024, 1088, 8),
                      "n_tail": (1003, 1016, 8)}


@needs_hopper
@pytest.mark.parametrize("variant", ["coop128x256s3", "pp128x128s5", "coop128x192s4"])
@pytest.mark.parametrize("case", list(DIRECT_STORE_CASES))
@pytest.mark.parametrize("epilogue", ["plain", "bias+gelu+residual"])
def test_odd_pitch_outputs_take_the_direct_store(variant, case, epilogue):
    """An output whose pitch or base is off the 128-byte grid is written by the consumers' own stores
    (TW_STORE_DIRECT): every element of the view once, bit-equal to the TMA store's output into an aligned buffer,
    nothing outside the view touched (the NaN poison around it survives), within 2x torch's error against fp64."""
    cg = _cg()
    M, K = 1000 + 37, 328  # an M tail in every tile height
    N, pitch, col0 = DIRECT_STORE_CASES[case]
    dtype = torch.bfloat16
    a, b = _inputs(M, N, K, dtype, b_mn=False)
    bias = res2d = None
    if epilogue != "plain":
        bias = torch.randn(N, device=DEV, dtype=dtype)
        res2d = torch.randn(M, N, device=DEV, dtype=dtype)
    buf = torch.full((M + 1, pitch), float("nan"), device=DEV, dtype=dtype)
    out = buf[:M, col0:col0 + N]
    assert cg.direct_store(out)
    aligned = torch.full((M, -(-N // 64) * 64), float("nan"), device=DEV, dtype=dtype)[:, :N]
    assert not cg.direct_store(aligned)
    act = None if epilogue == "plain" else "gelu"
    for o in (out, aligned):
        cg.launch_cuda_gemm(a, b, o, bias=bias, residual=None if res2d is None else res2d.unsqueeze(0),
                            activation=act, variant=variant)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "an output element left unwritten"
    assert torch.equal(out, aligned), "the direct store's output differs from the TMA store's"
    outside = torch.ones_like(buf, dtype=torch.bool)
    outside[:M, col0:col0 + N] = False
    assert torch.isnan(buf[outside]).all(), "written outside the output view"
    ref = gemm_reference(a.double(), b.double(), None if bias is None else bias.double(),
                         None if res2d is None else res2d.double(), act)
    ours = (out.double() - ref).norm() / ref.norm()
    theirs = (gemm_reference(a, b, bias, res2d, act, dtype).double() - ref).norm() / ref.norm()
    assert ours <= 2 * theirs + 1e-5, f"{case} {variant} err {ours:.3e} vs torch {theirs:.3e}"


@needs_hopper
@pytest.mark.parametrize("build", SWEEP_BUILDS, ids=_build_id)
def test_sweep_builds_shapes_epilogues(build):
    """Each build of the sweep on every SWEEP_SHAPES shape its layout can take, with its epilogues."""
    cg = _cg()
    variant, a_mn, b_mn, fp16 = build
    dtype = torch.float16 if fp16 else torch.bfloat16
    checked = 0
    for shape in SWEEP_SHAPES:
        for epi in _epilogues_for(build):
            checked += _check(cg, *shape, dtype, variant=variant, a_mn=a_mn, b_mn=b_mn, **epi) is not None
    assert checked >= 3, f"only {checked} cases were TMA-able"  # M-major A with K-major B: 3 of the shapes


@needs_hopper
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layout", [(False, True), (True, True), (False, False), (True, False)],
                         ids=["AK-BN", "AM-BN", "AK-BK", "AM-BK"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_variants_layouts_dtypes(variant, layout, dtype):
    cg = _cg()
    for shape in ((300, 264, 200), (2 * 256 + 8, 3 * 256 + 8, 1000)):
        _check(cg, *shape, dtype, variant=variant, a_mn=layout[0], b_mn=layout[1], bias=True, act="gelu",
               res="full")


@needs_hopper
@pytest.mark.parametrize("order", ["row_major", "grouped", "morton", "hilbert"])
@pytest.mark.parametrize("group", [1, 4, 8, 16])
@pytest.mark.parametrize("shape", [(2048 + 64, 3000, 256), (2048, 2048, 256), (1000, 3000, 128)], ids=str)
def test_tile_orders(shape, order, group):
    _check(_cg(), *shape, torch.bfloat16, variant=DEFAULT, bias=True, order=order, group=group)


def _random_problem(rng, a_mn, b_mn):
    """(M, N, K, tile order, group) of one randomized launch: M-major A / N-major B dims rounded to 8 elements (the
    16-byte TMA stride rule), so every draw is a launch."""
    M = rng.choice([rng.randint(1, 300), rng.randint(1, 3000)])
    if a_mn:
        M = 8 * -(-M // 8)
    N = 8 * rng.randint(1, 300)
    K = rng.randint(1, 1500)
    if not (a_mn and b_mn):
        K = 8 * -(-K // 8)
    return M, N, K, rng.choice(["row_major", "grouped", "morton", "hilbert"]), rng.choice([1, 2, 4, 8, 16])


@needs_hopper
def test_many_randomized_launches():
    """2,000 launches over random shapes, variants, layouts, tile orders and epilogues; each checked."""
    cg = _cg()
    rng = random.Random(0)
    n = 0
    while n < 2000:
        a_mn, b_mn = rng.random() < 0.2, rng.random() < 0.7
        M, N, K, order, group = _random_problem(rng, a_mn, b_mn)
        epi = rng.choice([dict(), FULL_EPILOGUE])
        r = _check(cg, M, N, K, torch.bfloat16, variant=rng.choice(VARIANTS), a_mn=a_mn, b_mn=b_mn, order=order,
                   group=group, **epi)
        n += r is not None
    torch.cuda.synchronize()


@needs_hopper
def test_stress_randomized_launches(stress_launches):
    """--stress: --stress-launches launches (10,000) over the sweep's builds (fp16 and every layout included) with
    random shapes, tile orders and each build's epilogues; each checked."""
    cg = _cg()
    rng = random.Random(1)
    n = 0
    while n < stress_launches:
        build = rng.choice(SWEEP_BUILDS)
        variant, a_mn, b_mn, fp16 = build
        M, N, K, order, group = _random_problem(rng, a_mn, b_mn)
        r = _check(cg, M, N, K, torch.float16 if fp16 else torch.bfloat16, variant=variant, a_mn=a_mn, b_mn=b_mn,
                   order=order, group=group, **rng.choice(_epilogues_for(build)))
        n += r is not None
    torch.cuda.synchronize()


@needs_hopper
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
@pytest.mark.parametrize("variant", ["pp128x128s5", "coop128x256s3"])
def test_sanitizer_small_launch(sanitizer, tool, variant):
    """--sanitizer: a 200x328x520 launch (K and N tails) with the full epilogue under each compute-sanitizer tool.
    The kernel's async-proxy traffic (TMA, wgmma) is invisible to racecheck: it checks the generic-proxy shared
    memory accesses (epilogue staging) only."""
    _cg()
    sanitizer(tool, f"""
        import torch
        from tilewright.cuda_fallback import gemm_sm90 as cg
        a = torch.randn(200, 520, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(520, 328, device="cuda", dtype=torch.bfloat16) / 23
        bias = torch.randn(328, device="cuda", dtype=torch.bfloat16)
        res = torch.randn(1, 200, 328, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(200, 328, device="cuda", dtype=torch.bfloat16)
        for _ in range(2):
            cg.launch_cuda_gemm(a, b, out, variant="{variant}")
            cg.launch_cuda_gemm(a, b, out, bias=bias, residual=res, activation="gelu", variant="{variant}")
        """)


@needs_hopper
def test_op_and_router_path():
    cg = _cg()
    a = torch.randn(16384, 2048, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(4096, 2048, device=DEV, dtype=torch.bfloat16) / 32
    bias = torch.randn(4096, device=DEV, dtype=torch.bfloat16)
    # 2MNK = 2^38, above the smallest problem the router hands the CUDA kernel (gemm_sm90.PREFER_MIN_FLOPS = 2^36)
    d = router.decide("gemm", a, w.t(), bias, None)
    assert d.backend == "cuda", str(d)  # large bf16 on Hopper: in the win region, self-check passes
    # 2^35: below the floor - Triton, or cuBLAS where the measured table (cublas_routes.py) prefers it
    assert router.decide("gemm", a[:2048], w.t(), bias, None).backend in ("triton", "torch")
    y = tilewright.linear(a, w, bias, activation="gelu", backend="cuda")
    ref = gemm_reference(a.double(), w.t().double(), bias.double(), None, "gelu")
    assert ((y.double() - ref).norm() / ref.norm()) < 1e-2
    # decode-sized problems follow the measured preference; misaligned strides never reach TMA
    expect = "cuda" if cg.preferred(16, 4096, 2048)[0] else "triton"
    assert router.decide("gemm", a[:16], w.t(), None, None).backend == expect
    odd_k = torch.randn(4096, 2047, device=DEV, dtype=torch.bfloat16)  # row stride 4094 B: not TMA-able
    assert router.decide("gemm", odd_k, torch.randn(2047, 4096, device=DEV, dtype=torch.bfloat16), None,
                         None).backend in ("triton", "torch")
    assert cg.try_launch(a, w.t(), torch.empty(16384, 4096, device=DEV, dtype=torch.bfloat16))


@needs_hopper
def test_cuda_gemm_bench_entry():
    cg = _cg()
    a, b = _inputs(1024, 2048, 512, torch.bfloat16)
    res = torch.randn(2048, device=DEV, dtype=torch.bfloat16)
    y = cg.cuda_gemm(a, b, bias=res, residual=res, activation="relu")
    ref = gemm_reference(a.double(), b.double(), res.double(), res.double(), "relu")
    assert ((y.double() - ref).norm() / ref.norm()) < 1e-2


def test_the_op_launches_the_tuned_winner(monkeypatch):
    """With a ``tilewright tune`` record naming the CUDA family's winner for the shape (variant, tile order), the
    public matmul on backend "cuda" launches that variant (GemmFamily.tuned_launch) and its product is right."""
    from tilewright.autotune import cache

    cg = _cg()
    record = {"winner": "cuda", "backends": {"cuda": {"config": {"variant": "pp128x128s5", "tile_order": "row_major",
                                                                 "group": 16}}}}
    monkeypatch.setattr(cache, "lookup", lambda op, device, dtype, M, N, K: record if op == "gemm" else None)
    seen, real = [], cg.FAMILY.launch
    monkeypatch.setattr(cg.FAMILY, "launch", lambda *a, **kw: (seen.append((kw.get("variant"), kw.get("tile_order"))),
                                                               real(*a, **kw))[1])
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(3000, 4096, device="cuda", generator=g).bfloat16()
    w = (torch.randn(5120, 4096, device="cuda", generator=g) / 64).bfloat16()
    y = tilewright.matmul(x, w.t(), backend="cuda")
    assert any(v is not None and v.name == "pp128x128s5" and order == "row_major" for v, order in seen), seen
    ref = x.double() @ w.double().t()
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-2


@needs_hopper
@pytest.mark.parametrize("epilogue", ["residual", "bias+gelu+residual", "pos_embed"])
def test_the_op_takes_the_residual_tile_with_a_fused_residual(monkeypatch, epilogue):
    """The public matmul with a fused residual on backend "cuda" launches RESIDUAL_VARIANT (the pingpong tile;
    GemmFamily.residual_launch) - full rows, with bias + GELU, a pos_embed repeated over the batch - and its result is
    within 2x torch's own bf16 error of the float64 reference, on a NaN-poisoned output whose M and N tails are
    not tile multiples."""
    cg = _cg()
    seen, real = [], cg.FAMILY.launch
    monkeypatch.setattr(cg.FAMILY, "launch", lambda *a, **kw: (seen.append(kw.get("variant")), real(*a, **kw))[1])
    g = torch.Generator(device="cuda").manual_seed(5)
    M, N, K, S = 2 * 1480, 1000, 1024, 1480  # tails in M, N and the pos_embed's period (S % 128 = 72)
    x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    w = (torch.randn(N, K, device="cuda", generator=g) / 32).bfloat16()
    bias = torch.randn(N, device="cuda", generator=g).bfloat16() if "bias" in epilogue else None
    act = "gelu" if "gelu" in epilogue else None
    if epilogue == "pos_embed":
        x = x.view(2, S, K)
        res = torch.randn(S, N, device="cuda", generator=g).bfloat16()
    else:
        res = torch.randn(M, N, device="cuda", generator=g).bfloat16()
    poison = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    del poison  # (the output's allocation reuses this block)
    y = tilewright.matmul(x, w.t(), bias=bias, residual=res, activation=act, backend="cuda")
    assert seen and seen[-1] is cg.VARIANTS[cg.RESIDUAL_VARIANT], seen

    def unfused(x, w, bias, res):
        h = x @ w.t() + (bias if bias is not None else 0)
        return (torch.nn.functional.gelu(h) if act else h) + res
    ref = unfused(x.double(), w.double(), None if bias is None else bias.double(), res.double())
    err = (y.double() - ref).abs().max().item()
    torch_err = (unfused(x, w, bias, res).double() - ref).abs().max().item()
    assert not torch.isnan(y).any() and err <= 2 * torch_err + 1e-6, (err, torch_err)
