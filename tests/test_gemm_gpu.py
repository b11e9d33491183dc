"""GPU tier (run on the device): bf16/fp16 numerics across the suite and epilogues, CUDA graphs, >2^31 elements.

Error rule: max |tilewright - fp64 reference| <= 2 x max |torch same-dtype - fp64 reference| (+ tiny floor).
"""
import pytest
import torch
import triton

import tilewright
from tilewright.bench.gemm import SUITES
from tilewright.reference import gemm_reference
from tilewright.triton_kernels import gemm as tg

pytestmark = pytest.mark.gpu
DEV = "cuda"


@pytest.fixture(autouse=True, scope="module")
def _no_tuning_in_numerics_tests():
    """Numerics tests use the default config per shape (tuning every key would take minutes); the tuned path
    runs in the benchmark, which checks its outputs, and every config is checked in
    test_every_config_of_the_space_is_correct."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TILEWRIGHT_AUTOTUNE", "0")
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _triton_backend():
    """These tests are about the Triton kernel: keep the router from handing a call to the CUDA backend."""
    with tilewright.use_backend("triton"):
        yield


def _err(x, ref):
    return (x.double() - ref).abs().max().item()


def _assert_within_torch_error(out, inputs, **epi):
    ref = gemm_reference(*[t.double() if t is not None else None for t in inputs], **epi)
    torch_out = gemm_reference(*inputs, **epi)
    assert torch.isfinite(out).all()
    bound = 2 * _err(torch_out, ref) + 1e-6 * ref.abs().max().item()
    err = _err(out, ref)
    assert err <= bound, f"tilewright err {err:.4g} > 2x torch err bound {bound:.4g}"


@pytest.mark.parametrize("tag", list(SUITES["default"]))
@pytest.mark.parametrize("epilogue", ["plain", "bias_gelu_residual"])
def test_suite_bf16(tag, epilogue):
    M, N, K = SUITES["default"][tag]
    a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16)
    if epilogue == "plain":
        out = tilewright.matmul(a, b)
        _assert_within_torch_error(out, (a, b))
    else:
        bias = torch.randn(N, device=DEV, dtype=torch.bfloat16)
        r = torch.randn(M, N, device=DEV, dtype=torch.bfloat16)
        out = tilewright.matmul(a, b, bias=bias, residual=r, activation="gelu")
        _assert_within_torch_error(out, (a, b, bias, r), activation="gelu")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("shape", [(1, 4096, 4096), (7, 1000, 3000), (3000, 5000, 4000), (1000, 777, 333)])
def test_epilogues_odd_shapes(dtype, activation, shape):
    M, N, K = shape
    a = torch.randn(M, K, device=DEV, dtype=dtype)
    b = torch.randn(N, K, device=DEV, dtype=dtype).t()  # K-major B, as nn.Linear weights
    bias = torch.randn(N, device=DEV, dtype=dtype)
    r = torch.randn(M, N, device=DEV, dtype=dtype)
    out = tilewright.matmul(a, b, bias=bias, residual=r, activation=activation)
    _assert_within_torch_error(out, (a, b, bias, r), activation=activation)


def test_pos_embed_bf16():
    B, S, K, N = 4, 197, 768, 2304  # ViT-B/16: 197 tokens, tiles straddle the period boundary
    x = torch.randn(B, S, K, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=DEV, dtype=torch.bfloat16)
    pos = torch.randn(S, N, device=DEV, dtype=torch.bfloat16)
    out = tilewright.linear(x, w, residual=pos)
    ref = x.double() @ w.double().t() + pos.double()
    assert _err(out, ref) <= 2 * _err(x @ w.t() + pos, ref) + 1e-6


def test_fp32_is_ieee_not_tf32():
    a = torch.randn(512, 1024, device=DEV)
    b = torch.randn(1024, 256, device=DEV)
    ref = a.double() @ b.double()
    rel = ((tilewright.matmul(a, b).double() - ref).norm() / ref.norm()).item()
    assert rel < 1e-5, f"relative error {rel:.2e}: looks like tf32"


def test_gradients_bf16():
    x = torch.randn(4, 256, 512, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(768, 512, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    bias = torch.randn(768, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    out = tilewright.linear(x, w, bias, activation="gelu_tanh")
    g = torch.randn_like(out)
    out.backward(g)
    refs = [t.detach().double().requires_grad_() for t in (x, w, bias)]
    torch.nn.functional.gelu(torch.nn.functional.linear(*refs), approximate="tanh").backward(g.double())
    same = [t.detach().clone().requires_grad_() for t in (x, w, bias)]
    torch.nn.functional.gelu(torch.nn.functional.linear(*same), approximate="tanh").backward(g)
    for t, r, s in zip((x, w, bias), refs, same):
        assert _err(t.grad, r.grad) <= 2 * _err(s.grad, r.grad) + 1e-3


def test_cuda_graph_capture_after_warmup(monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_AUTOTUNE", "1")
    a = torch.randn(2048, 1024, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(1024, 3072, device=DEV, dtype=torch.bfloat16)
    bias = torch.randn(3072, device=DEV, dtype=torch.bfloat16)
    kw = dict(bias=bias, activation="silu", backend="triton")
    expected = tilewright.matmul(a, b, **kw)  # warm-up: autotunes this key
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tilewright.matmul(a, b, **kw)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, tilewright.matmul(a, b, **kw))
    assert not torch.equal(out, expected)


def test_capture_of_untuned_shape_raises_clearly(monkeypatch):
    """TILEWRIGHT_AUTOTUNE=full at a bucket nothing measured: the sweep cannot run inside a capture, so the call
    says so. The shipped table is switched off: its nearest-bucket match would give this shape a config (it did
    once the H100 table gained the M ~1000 buckets) and there would be nothing to tune."""
    from tilewright.autotune import tables

    monkeypatch.setenv("TILEWRIGHT_AUTOTUNE", "1")
    monkeypatch.setattr(tables, "lookup", lambda *a, **k: None)
    a = torch.randn(1536, 1152, device=DEV, dtype=torch.bfloat16)  # a key nothing else uses
    b = torch.randn(1152, 2176, device=DEV, dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="autotun"):
        with torch.cuda.graph(graph):
            tilewright.matmul(a, b, activation="relu", backend="triton")


def test_more_than_2_31_elements_operand():
    """a has 2.25e9 elements: row offsets past 2^31 must not wrap (TMA path and pointer path)."""
    M, K, N = 2_200_000, 1024, 64
    a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16)
    rows = torch.tensor([0, 1, M // 2, M - 2_000, M - 1], device=DEV)
    ref = a[rows].double() @ b.double()
    for use_tma in (True, False):
        out = torch.full((M, N), float("nan"), device=DEV, dtype=torch.bfloat16)
        tg.launch_gemm(a, b, out, use_tma=use_tma)
        assert torch.isfinite(out[-1000:]).all()
        assert _err(out[rows], ref) <= 2 * _err((a[rows] @ b), ref) + 1e-3
    del a


def test_more_than_2_31_elements_output_and_residual():
    M, K, N = 34_000_000, 16, 64  # out and residual: 2.18e9 elements each
    a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16)
    r = torch.randn(M, N, device=DEV, dtype=torch.bfloat16)
    out = tilewright.matmul(a, b, residual=r)
    rows = torch.tensor([0, M // 2, M - 1], device=DEV)
    ref = a[rows].double() @ b.double() + r[rows].double()
    assert _err(out[rows], ref) <= 2 * _err(a[rows] @ b + r[rows], ref) + 1e-3


def test_every_config_of_the_space_is_correct(long_sweep):
    """Each config the tuner may pick (tile, split, order; TMA and pointer paths) gives the right answer. The whole
    space (106 configs x 2 paths, ~200 compiles: most of this file's 412 s on an H200) with --long; by default every
    7th config, the sample's start rotating with the day of the year so that successive runs cover the space."""
    import datetime

    from tilewright.autotune.space import gemm_configs

    M, N, K = 1000, 1288, 520  # tails in every dim, several tiles per program
    a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16)
    bias = torch.randn(N, device=DEV, dtype=torch.bfloat16)
    r = torch.randn(4, 250, N, device=DEV, dtype=torch.bfloat16)[:, :1].expand(4, 250, N)  # periodic residual
    inputs = (a, b, bias, r.reshape(M, N))
    ref = gemm_reference(*[t.double() for t in inputs], activation="silu")
    bound = 2 * _err(gemm_reference(*inputs, activation="silu"), ref) + 1e-6
    failures = []
    configs = gemm_configs()
    if not long_sweep:
        configs = configs[datetime.date.today().timetuple().tm_yday % 7::7]
    for cfg in configs:
        for use_tma in (True, False):
            out = torch.full((M, N), float("nan"), device=DEV, dtype=torch.bfloat16)
            tg.launch_gemm(a, b, out, bias=bias, residual=r, activation=4, use_tma=use_tma, config=cfg,
                           num_programs=37)
            if not _err(out, ref) <= bound:
                failures.append((str(cfg), use_tma, _err(out, ref)))
    assert not failures, failures


def test_router_decision_cache_keys_on_the_call_signature(monkeypatch):
    """Cached decisions (router._decisions) must follow everything they depend on: same signature -> the same
    Decision object; forced backend, environment and pointer alignment -> a fresh decision."""
    from tilewright import router

    a = torch.randn(512, 512, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(512, 512, device=DEV, dtype=torch.bfloat16)
    with tilewright.use_backend(None):
        first = router.decide("gemm", a, b, None, None)
        assert router.decide("gemm", a.clone(), b.clone(), None, None) is first
        assert router.decide("gemm", a, b, None, None, backend="torch").backend == "torch"
        monkeypatch.setenv("TILEWRIGHT_BACKEND", "torch")
        assert router.decide("gemm", a, b, None, None).backend == "torch"
        monkeypatch.delenv("TILEWRIGHT_BACKEND")
        assert router.decide("gemm", a, b, None, None) is first
        # a base 2 bytes past 16-byte alignment: TMA (and the CUDA kernel) cannot take it
        flat = torch.randn(512 * 512 + 1, device=DEV, dtype=torch.bfloat16)
        shifted = flat[1:].view(512, 512)
        d = router.decide("gemm", shifted, b, None, None)
        assert d is not first and d.backend != "cuda"


def test_launch_plan_cache_follows_alignment_and_layout():
    """launch_gemm caches its plan per signature: the same shape with another alignment or layout must get its own
    plan (pointer path vs TMA, K- vs N-major B) and a correct answer each time, in any order."""
    M, N, K = 384, 264, 200
    flat = torch.randn(M * K + 8, device=DEV, dtype=torch.bfloat16)
    aligned = flat[:M * K].view(M, K)
    shifted = flat[1:M * K + 1].view(M, K)  # 2-byte offset: pointer loads
    b_n_major = torch.randn(K, N, device=DEV, dtype=torch.bfloat16) / 16
    b_k_major = b_n_major.t().contiguous().t()
    for _ in range(2):
        for a in (aligned, shifted, aligned):
            for b in (b_n_major, b_k_major):
                out = torch.full((M, N), float("nan"), device=DEV, dtype=torch.bfloat16)
                tg.launch_gemm(a, b, out)
                _assert_within_torch_error(out, (a, b))


@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_nan_in_bias_propagates_through_the_activation(backend, activation):
    """Found by the GPU fuzzer: relu as fmax turned NaN into 0 on the GPU (torch.relu keeps NaN). A NaN bias entry
    must give a NaN output column, and nothing else may change."""
    M, K, N = 256, 512, 384
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    bias[[3, 100]] = float("nan")
    try:
        out = tilewright.linear(a, w, bias, activation=activation, backend=backend)
    except ValueError as e:  # forced cuda that this device or toolchain cannot run: says so
        pytest.skip(str(e))
    ref = gemm_reference(a.float(), w.float().t(), bias.float(), None, activation)
    assert torch.equal(out.isnan(), ref.isnan())
    assert out.isnan()[:, [3, 100]].all()


@pytest.mark.parametrize("M,N,K,a_t", [(1024, 1024, 16384, True), (512, 2048, 5632, False), (520, 1000, 4104, True)])
def test_split_k_on_the_device_is_right_reproducible_and_replayable(M, N, K, a_t):
    """Split-K where it serves (few tiles, long K; the weight gradient's M-major A): every split-K config the pruner
    keeps, 20 launches each - bitwise the same every time (the last arrival adds partials in split order; a race
    between arrivals would show as differing bits or a wrong tile) and within 2x torch's error. Then the launch bound
    for an eager replay, called on new operands: right too (it finds this stream's workspace), and two streams running
    split-K GEMMs at once (one workspace each) both right."""
    from tilewright._record import recording
    from tilewright.autotune.space import gemm_configs, prune_gemm_configs

    torch.manual_seed(0)

    def operands():
        a = torch.randn(K, M, device=DEV, dtype=torch.bfloat16).t() if a_t else \
            torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
        return a, torch.randn(K, N, device=DEV, dtype=torch.bfloat16)

    a, b = operands()
    ref = (a.double() @ b.double())
    bound = 2 * _err(a @ b, ref) + 1e-6
    configs = [c for c in prune_gemm_configs(gemm_configs(), M, N, K, 2, 2, True) if c.kwargs["SPLIT_K"] > 1]
    assert configs, "the pruner kept no split-K config for a few-tile, long-K problem"
    for cfg in configs:
        first = None
        for _ in range(20):
            out = torch.full((M, N), float("nan"), device=DEV, dtype=torch.bfloat16)
            tg.launch_gemm(a, b, out, config=cfg)
            if first is None:
                first = out
                assert _err(out, ref) <= bound, (str(cfg), _err(out, ref), bound)
            else:
                assert torch.equal(out, first), f"{cfg}: split-K result changed between launches"
    cfg = configs[-1]
    out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
    with recording() as launches:
        tg.launch_gemm(a, b, out, config=cfg)  # recording binds the launch, as an op's first call does
    (bound_launch, roles, _), = launches
    a2, b2 = operands()
    out2 = torch.full((M, N), float("nan"), device=DEV, dtype=torch.bfloat16)
    pointers = {"a_ptr": a2, "b_ptr": b2, "c_ptr": out2}
    bound_launch(*[pointers[r].data_ptr() for r in roles])
    ref2 = a2.double() @ b2.double()
    assert _err(out2, ref2) <= 2 * _err(a2 @ b2, ref2) + 1e-6
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    outs = [torch.full((M, N), float("nan"), device=DEV, dtype=torch.bfloat16) for _ in range(2)]
    torch.cuda.synchronize()
    for _ in range(10):
        for s, o in zip((s1, s2), outs):
            with torch.cuda.stream(s):
                tg.launch_gemm(a2, b2, o, config=cfg)
    torch.cuda.synchronize()
    for o in outs:
        assert torch.equal(o, out2)


@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_activation_grad_binds_its_launch_and_the_bound_call_computes(activation):
    """The backward's ``grad * act'(preact)`` kernel binds its launch at a signature's first call; the next call at
    that signature (fresh data) goes through the bound launch and matches the JIT launch on the same data bit for
    bit, and the float64 formula within bf16 rounding."""
    from tilewright._codes import ACTIVATIONS
    from tilewright.reference import activation_grad_reference
    from tilewright.triton_kernels import activation as act

    torch.manual_seed(5)
    code = ACTIVATIONS[activation]
    shape = (1000, 3000)
    g, z = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    act._bound.clear()
    act.launch_activation_grad(g, z, code)
    assert len(act._bound) == 1
    g.normal_()
    z.normal_(0, 3)
    bound_out = act.launch_activation_grad(g, z, code)
    jit_out = torch.empty_like(g)
    act._activation_grad_kernel[(triton.cdiv(g.numel(), 1024),)](g, z, jit_out, g.numel(), ACTIVATION=code,
                                                                  BLOCK=1024, num_warps=4)
    assert torch.equal(bound_out, jit_out)
    want = activation_grad_reference(g.double(), z.double(), activation, torch.float64)
    assert (bound_out.double() - want).abs().max().item() <= 1e-2 * want.abs().max().item()
