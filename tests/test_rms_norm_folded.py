"""CPU tier of the folded RMSNorm-linear forward (ops/rms_norm_linear._folded): the row sum-of-squares pass (Triton,
interpreter), the folded weight's cache and when it is refreshed, the rule that picks the path, the CUDA kernel's
host constraints and launch arguments. The kernel itself runs in tests/cuda/test_rstd_gemm_sm90_gpu.py."""
import importlib

import pytest
import torch

from tilewright.cuda_fallback import rstd_gemm_sm90 as rg
from tilewright.triton_kernels.rmsnorm_gemm import launch_row_sumsq

rms = importlib.import_module("tilewright.ops.rms_norm_linear")  # (the package attribute is the function)


@pytest.mark.parametrize("M,K", [(1, 1), (7, 123), (33, 1000), (5, 5000), (130, 64)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("layout", ["row_slice", "column_major"])
def test_row_sumsq_matches_torch(M, K, dtype, layout):
    """Tails in M and K, rows longer than one 2048-wide step, a row stride wider than K (a slice of x) and x read
    through a non-unit K stride (a transposed tensor)."""
    if layout == "row_slice":
        x = (torch.randn(M, K + 9, dtype=dtype) * 3)[:, 3:3 + K]
    else:
        x = (torch.randn(K, M, dtype=dtype) * 3).t()
    got = torch.full((M,), float("nan"))
    launch_row_sumsq(x, got)
    want = x.double().pow(2).sum(1)
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=0), (got, want)


def test_row_sumsq_refuses_a_wrong_out_by_name():
    x = torch.randn(8, 16)
    for bad in (torch.empty(8, dtype=torch.float16), torch.empty(9), torch.empty(16)[::2]):
        with pytest.raises(ValueError, match="out: expected a contiguous float32"):
            launch_row_sumsq(x, bad)


@pytest.mark.parametrize("family,bug", [(f, b) for f in ("rmsnorm_gemm_sm90", "rstd_gemm_sm90", "folded")
                                        for b in (None, "no rstd", "rstd not stored")] + [("folded", "g applied")])
def test_norm_self_check_tells_a_right_launch_from_a_wrong_one(monkeypatch, family, bug):
    """The norm GEMMs' shared first-use self-check with each launcher replaced by its torch contract on the CPU: it
    passes the right result and fails an output without rstd or an rstd never written; the folded (in-kernel sum of
    squares) build's check also fails a launch that applies g on top of the folded weight."""
    import importlib

    mod = importlib.import_module(f"tilewright.cuda_fallback.{family if family != 'folded' else 'rmsnorm_gemm_sm90'}")

    def launch(x, *args, bias=None, residual=None, activation=0, variant=None, row_counts=None):
        if family == "folded":
            g, b, out, rstd, eps = args
            assert variant.name == mod.folded_variant(x.shape[0], b.shape[1], x.shape[1])
            if bug == "g applied":  # a build that multiplied x by the g argument as the -xf build does
                x = (x.float() * g.float()).to(x.dtype)
            y, r = rg.reference(x, b.t(), x.float().pow(2).sum(1), bias, eps, activation,
                                None if residual is None else residual[0])
        elif family == "rmsnorm_gemm_sm90":
            g, b, out, rstd, eps = args
            y, r = mod.reference(x, g, b.t(), bias, eps, activation, None if residual is None else residual[0])
        else:
            b, out, sumsq, rstd, eps = args
            y, r = mod.reference(x, b.t(), sumsq, bias, eps, activation, None if residual is None else residual[0])
        if bug == "no rstd":
            y = y / r[:, None]
        out.copy_(y)
        if bug != "rstd not stored":
            rstd.copy_(r)
        return out

    monkeypatch.setattr(mod, "launch_cuda_rstd_gemm" if family == "rstd_gemm_sm90" else "launch_cuda_rmsnorm_gemm",
                        launch)
    if family == "folded":
        ok, why = mod._folded_self_check(torch.device("cpu"), torch.bfloat16)
    else:
        ok, why = mod._self_check_one(torch.device("cpu"), next(iter(mod.VARIANTS.values())), torch.bfloat16)
    assert ok == (bug is None), why


def test_folded_weight_is_kept_until_either_tensor_changes():
    g = (1 + 0.5 * torch.randn(48)).bfloat16()
    w = torch.randn(24, 48).bfloat16()

    def expected():
        return (w.float() * g.float()).bfloat16()

    f1 = rms.folded_weight(w, g)
    assert torch.equal(f1, expected())
    assert rms.folded_weight(w, g) is f1  # kept
    w.add_(1)  # an optimizer step: the version counter moves
    f2 = rms.folded_weight(w, g)
    assert f2 is not f1 and torch.equal(f2, expected())
    g.mul_(2)
    f3 = rms.folded_weight(w, g)
    assert f3 is not f2 and torch.equal(f3, expected())
    w.data.mul_(3)  # bypasses the version counter: the documented case for clear_folded
    rms.clear_folded(w)
    assert torch.equal(rms.folded_weight(w, g), expected())
    other = torch.randn(24, 48).bfloat16()
    f4 = rms.folded_weight(other, g, cache=False)
    assert not hasattr(other, "_tilewright_folded") and rms.folded_weight(other, g, cache=False) is not f4
    # a call that may keep no copy still reads a current kept one (not the product again); a stale one it does not
    f5 = rms.folded_weight(w, g)
    assert rms.folded_weight(w, g, cache=False) is f5
    w.add_(1)
    f6 = rms.folded_weight(w, g, cache=False)
    assert f6 is not f5 and torch.equal(f6, expected()) and rms._kept_fold(w, g) is None


def test_nocache_never_reads_a_kept_fold(monkeypatch):
    """TILEWRIGHT_RMS_FOLDED=nocache (for weights written through .data, which version counters miss): every call
    folds anew, even where a copy kept before the switch looks current."""
    g = (1 + 0.5 * torch.randn(48)).bfloat16()
    w = torch.randn(24, 48).bfloat16()
    kept = rms.folded_weight(w, g)
    w.data.mul_(2)  # unseen by the version counter
    monkeypatch.setenv(rms.FOLDED_ENV, "nocache")
    for cache in (True, False):
        got = rms.folded_weight(w, g, cache=cache)
        assert got is not kept and torch.equal(got, (w.float() * g.float()).bfloat16())


def test_a_folded_replay_reads_the_kept_copy_only_while_it_is_current(monkeypatch):
    """ops/rms_norm_linear._FoldedReplay: the recorded launch gets the weight's kept folded copy in the weight's
    place; an in-place update of either tensor, a dropped copy, or a kept copy at another signature answers None (the
    public function then runs the full path, which folds again)."""
    # (the CPU allocator's 64-byte alignment would change the signature's 128-byte bit between refolds; the CUDA
    # allocator's blocks are 512-byte aligned)
    monkeypatch.setattr(rms._fast, "sig", lambda t: (t.shape, t.stride(), t.dtype))
    g = (1 + 0.5 * torch.randn(48)).bfloat16()
    w = torch.randn(24, 48).bfloat16()
    x, bias = torch.randn(4, 48).bfloat16(), torch.randn(24).bfloat16()
    calls = []

    def inner(device, *inputs):
        calls.append(inputs)
        return ["out"]

    replay = rms._FoldedReplay(inner, rms.folded_weight(w, g))
    assert replay("cpu", x, g, w, bias) == ["out"]
    assert calls[-1][0] is x and calls[-1][1] is g and calls[-1][2] is w._tilewright_folded[1] and calls[-1][3] is bias
    n = len(calls)
    for update in (lambda: w.add_(1), lambda: g.mul_(2)):
        update()
        assert replay("cpu", x, g, w, bias) is None  # stale: the full path refolds
        rms.folded_weight(w, g)  # (what that full path does)
        assert replay("cpu", x, g, w, bias) == ["out"]
    rms.clear_folded(w)
    assert replay("cpu", x, g, w, bias) is None
    held = rms.folded_weight(w, g)
    w._tilewright_folded = (w._tilewright_folded[0], held[:, 1:])  # a copy at another signature (alignment, shape)
    assert replay("cpu", x, g, w, bias) is None
    assert len(calls) == n + 2


def test_the_inference_op_replays_a_folded_call_on_the_kept_copy(monkeypatch):
    """tilewright::rms_norm_linear_inference (what a compiled inference graph calls): a folded call records its
    launch with the kept copy in the weight's place and later calls replay it on that copy - not the full path -
    while the copy is current; an in-place update of the weight sends the next call through the full path again
    (which refolds and records anew); a replay never gets the weight's own address. CPU stand-ins: the full path
    folds (as _folded does in a call autograd does not record) and records a bound launch; the launch notes the
    addresses it is given."""
    from tilewright._record import record

    monkeypatch.setattr(rms._fast, "sig", lambda t: None if t is None else (t.shape, t.stride(), t.dtype))
    monkeypatch.setattr(rms._fast, "eligible", lambda *ts: True)
    monkeypatch.setattr(rms._fast, "state", lambda: ())  # (it reads the current CUDA device)
    rms._inference_replays.clear()
    g = (1 + 0.5 * torch.randn(48)).bfloat16()
    w = torch.randn(24, 48).bfloat16()
    x = torch.randn(4, 48).bfloat16()
    full_calls, launched = [], []

    def bound(a, gp, b, c, r):
        launched.append((a, b))

    def full(x_, g_, w_, b_, eps, backend):
        assert rms._keeps_fold(w_)  # the op runs as a call autograd does not record
        wg = rms.folded_weight(w_, g_, cache=True)
        full_calls.append(wg)
        rms._call_state.folded = wg
        y, rstd = torch.empty(4, 24).bfloat16(), torch.empty(4)
        bound(x_.data_ptr(), wg.data_ptr(), wg.data_ptr(), y.data_ptr(), rstd.data_ptr())
        record(bound, {"a_ptr": x_, "g_ptr": wg, "b_ptr": wg, "c_ptr": y, "rstd_ptr": rstd}, writes=("c_ptr",))
        return y, rstd

    monkeypatch.setattr(rms, "_rms_norm_linear_full", full)
    rms.rms_norm_linear_inference_op(x, g, w, None, 1e-6, None)
    for _ in range(2):
        y, rstd = rms.rms_norm_linear_inference_op(x, g, w, None, 1e-6, None)
        assert y.shape == (4, 24) and rstd.shape == (4,)
    assert len(full_calls) == 1 and len(launched) == 3  # two replays
    assert all(a == x.data_ptr() and b == full_calls[0].data_ptr() != w.data_ptr() for a, b in launched)
    w.mul_(2)  # an in-place update: the kept copy is stale
    rms.rms_norm_linear_inference_op(x, g, w, None, 1e-6, None)
    rms.rms_norm_linear_inference_op(x, g, w, None, 1e-6, None)
    assert len(full_calls) == 2 and len(launched) == 5  # the full path once (refolds), then its replay
    assert torch.equal(full_calls[1], (w.float() * g.float()).bfloat16())
    assert all(b != w.data_ptr() for _, b in launched)
    rms._inference_replays.clear()


def test_run_recorded_takes_inputs_decided_by_the_call_and_wraps_what_it_stores(monkeypatch):
    """ops/_fast.run_recorded: ``inputs`` as a function called after the call (rms_norm_linear's folded call names
    its folded copy there) and ``wrap`` making what is stored of the replay."""
    from tilewright import _record
    from tilewright.ops import _fast

    x, copy, out = torch.randn(4), torch.randn(4), torch.empty(4)

    class Bound:
        def __call__(self, *ptrs):
            pass

    def call():
        _record.record(Bound(), {"a_ptr": copy, "c_ptr": out}, writes=("c_ptr",))
        return (out,)

    cache = {}
    assert _fast.run_recorded(cache, "k", call, {"a_ptr": (0, x)}, lambda r: {"c_ptr": (0, r[0])}) == (out,)
    assert "k" not in cache  # a_ptr is not at the input's address: no replay
    got = _fast.run_recorded(cache, "k", call, lambda: {"a_ptr": (0, copy)}, lambda r: {"c_ptr": (0, r[0])},
                             wrap=lambda replay: ("wrapped", replay))
    assert got == (out,) and cache["k"][0] == "wrapped" and isinstance(cache["k"][1], _fast.Replay)


def test_folded_weight_of_inference_tensors_is_never_cached():
    with torch.inference_mode():
        w = torch.randn(8, 16).bfloat16()
        g = torch.randn(16).bfloat16()
        f = rms.folded_weight(w, g)
        assert torch.equal(f, (w.float() * g.float()).bfloat16())
        assert not hasattr(w, "_tilewright_folded")


def test_folded_path_is_not_taken_off_the_gpu_or_when_switched_off(monkeypatch):
    x = torch.randn(4096, 2048).bfloat16()
    assert not rms.folded_applies(x, 4096)  # a CPU tensor
    assert not rms._folded(x, torch.ones(2048).bfloat16(), torch.randn(4096, 2048).bfloat16(), None, 1e-6,
                           torch.empty(4096, 4096).bfloat16(), torch.empty(4096))
    monkeypatch.setenv(rms.FOLDED_ENV, "0")
    assert not rms.folded_applies(x, 4096)


def test_rstd_gemm_constraints_name_the_argument():
    x = torch.randn(256, 512).bfloat16()
    b = torch.randn(1024, 512).bfloat16().t()
    assert rg.constraints(x, b, torch.empty(256))[0]
    for bad in (torch.empty(256, dtype=torch.float16), torch.empty(255), torch.empty(512)[::2], None):
        ok, why = rg.constraints(x, b, bad)
        assert not ok and why.startswith("sumsq:"), why
    with pytest.raises(ValueError, match="rstd must be"):
        rg.launch_cuda_rstd_gemm(x, b, torch.empty(256, 1024).bfloat16(), torch.empty(256), torch.empty(256).half(),
                                 1e-6)
    with pytest.raises(ValueError, match="eps"):
        rg.launch_cuda_rstd_gemm(x, b, torch.empty(256, 1024).bfloat16(), torch.empty(256), None, 0.0)


def test_launch_appends_sumsq_rstd_and_eps_to_the_gemm_arguments(monkeypatch):
    """The build is the GEMM's variant with TW_NORM_SUMSQ, and the kernel's three extra arguments follow the GEMM's."""
    from tilewright.cuda_fallback import gemm_sm90
    from tilewright.cuda_fallback.runtime import launch

    seen = {}

    def prepare(x, b, out, v, *rest, **kw):
        seen["variant"], seen["source"] = v, rest[-2:]
        return "fn", 1, ["gemm args"]

    def launch_cached(cache, key, make, device, threads, smem, roles, zero=None):
        seen["prepared"], seen["roles"], seen["threads"] = make(), roles, threads

    monkeypatch.setattr(gemm_sm90, "prepare", prepare)
    monkeypatch.setattr(launch, "launch_cached", launch_cached)
    x = torch.randn(512, 512).bfloat16()
    b = torch.randn(1024, 512).bfloat16().t()
    out, sumsq, rstd = torch.empty(512, 1024).bfloat16(), torch.empty(512), torch.empty(512)
    rg.launch_cuda_rstd_gemm(x, b, out, sumsq, rstd, 1e-5)
    fn, grid, args = seen["prepared"]
    assert seen["source"] == (rg.SOURCE, rg.KERNEL) and seen["threads"] == 384
    assert seen["variant"].defines(False, False, False)["TW_NORM_SUMSQ"] == 1
    assert seen["variant"].name == gemm_sm90.pick_variant(512, 1024, 512).name + "-rstd"
    assert args[0] == "gemm args" and [a.value for a in args[1:3]] == [sumsq.data_ptr(), rstd.data_ptr()]
    assert abs(args[3].value - 1e-5) < 1e-12
    assert seen["roles"]["sumsq_ptr"] is sumsq and seen["roles"]["rstd_ptr"] is rstd


def test_the_fold_is_kept_only_for_weights_that_do_not_train(monkeypatch):
    """A call autograd records (a training step) keeps no folded copy (and runs its two passes, which replay); a call
    it does not record keeps one, unless TILEWRIGHT_RMS_FOLDED=nocache; the op called directly decides by the
    weight's requires_grad."""
    w = torch.randn(8, 16).bfloat16()
    g = torch.randn(16).bfloat16()
    assert rms._keeps_fold(w)
    w.requires_grad_()
    assert not rms._keeps_fold(w)  # the op called directly: a weight that requires grad trains
    rms._call_state.records = False  # what rms_norm_linear sets for a call autograd does not record (no_grad)
    try:
        assert rms._keeps_fold(w)
        monkeypatch.setenv(rms.FOLDED_ENV, "nocache")
        assert not rms._keeps_fold(w)
        monkeypatch.delenv(rms.FOLDED_ENV)
        rms._call_state.records = True
        assert not rms._keeps_fold(torch.randn(8, 16))  # a recorded call (frozen weight, x with grad): two passes
    finally:
        rms._call_state.records = None
    w2 = w.detach()
    assert not rms._folded_is_current(w2, g)
    rms.folded_weight(w2, g)
    assert rms._folded_is_current(w2, g)
    w2.add_(1)
    assert not rms._folded_is_current(w2, g)


def test_a_self_check_run_inside_an_op_is_not_recorded(monkeypatch):
    """A backend's first-use self-check launches kernels while the calling op records its launches for the eager
    replay: recorded, they made the op's first call hold more launches than its replay (no replay for it)."""
    from tilewright._record import record, recording
    from tilewright.cuda_fallback.runtime import guard

    monkeypatch.setattr(guard, "device_model", lambda device: "test card")
    g = guard.Guard("test family")
    with recording() as launches:
        record("the op's launch", {})
        ok, _ = g.check("cpu", "v1", (), lambda: (record("a self-check launch", {}), (True, "fine"))[1])
        record("the op's second launch", {})
    assert ok and [bound for bound, *_ in launches] == ["the op's launch", "the op's second launch"]


def test_when_the_folded_path_applies(monkeypatch):
    """folded_applies' rules on CPU tensors posing as an sm_90 device's: bf16 only, the plain GEMM's region, no
    CUDA-graph capture (unless TILEWRIGHT_RMS_FOLDED=capture: a graph would hold the folded copy), a weight that does
    not train (or a kept copy that is current)."""
    state = {"capturing": False}
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: state["capturing"])
    M, N, K = 4096, 4096, 2048
    x = torch.randn(M, K).bfloat16()
    w, g = torch.randn(N, K).bfloat16(), torch.randn(K).bfloat16()
    assert rms.folded_applies(x, N, w, g)
    assert not rms.folded_applies(x.half(), N, w.half(), g.half())  # fp16: g * W could overflow
    assert not rms.folded_applies(x[:3000], N, w, g)  # M % 64: outside the sm_90 GEMM's region (cuBLAS is faster)
    # ... unless the 192-column tile balances its waves (issue 17's 3000 x 5120 x 5120: rms.wave_tile_folds)
    x5, w5, g5 = torch.randn(3000, 5120).bfloat16(), torch.randn(5120, 5120).bfloat16(), torch.randn(5120).bfloat16()
    assert rms.folded_applies(x5, 5120, w5, g5) and rms.wave_tile_folds(3000, 5120, 5120)
    assert not rms.wave_tile_folds(3000, 5000, 4000)  # (N, K not whole tiles: measured slower there)
    monkeypatch.setenv("TILEWRIGHT_CUDA_GEMM_VARIANT", "coop128x256s3")  # a named tile: the region alone
    assert not rms.folded_applies(x5, 5120, w5, g5)
    monkeypatch.delenv("TILEWRIGHT_CUDA_GEMM_VARIANT")
    assert not rms.folded_applies(x.t().contiguous().t(), N, w, g)  # x not unit-stride along K
    state["capturing"] = True
    assert not rms.folded_applies(x, N, w, g)
    monkeypatch.setenv(rms.FOLDED_ENV, "capture")
    assert rms.folded_applies(x, N, w, g)
    state["capturing"] = False
    monkeypatch.setenv(rms.FOLDED_ENV, "0")
    assert not rms.folded_applies(x, N, w, g)
    monkeypatch.delenv(rms.FOLDED_ENV)
    w.requires_grad_()  # the op called directly with a trainable weight: the two passes, unless a current copy is kept
    assert not rms.folded_applies(x, N, w, g)
    rms.folded_weight(w.detach(), g)  # (a copy on another tensor object is not this weight's)
    assert not rms.folded_applies(x, N, w, g)


@pytest.mark.parametrize("in_kernel", ["runs", "not ready", "launch fails"])
def test_folded_forward_takes_the_in_kernel_sum_of_squares_build_first(monkeypatch, in_kernel):
    """_folded launches the one-kernel build (sums of squares from the x tiles in shared memory) with the folded
    weight; where that build is not ready or its launch fails, the read-only pass and the rstd GEMM run instead."""
    from tilewright.cuda_fallback import rmsnorm_gemm_sm90 as rn
    from tilewright.triton_kernels import rmsnorm_gemm as trn

    calls = []
    monkeypatch.setattr(rms, "folded_applies", lambda *a: True)
    monkeypatch.setattr(rn, "folded_ready", lambda x, w, bias: (in_kernel != "not ready", "test"))
    monkeypatch.setattr(rn, "try_launch_folded",
                        lambda x, wg, y, rstd, eps, bias=None: calls.append(("in-kernel", wg)) or in_kernel == "runs")
    monkeypatch.setattr(rg, "ready", lambda *a: (True, "test"))
    monkeypatch.setattr(trn, "launch_row_sumsq", lambda x, ss: calls.append(("pass", None)))
    monkeypatch.setattr(rg, "try_launch",
                        lambda x, b, y, ss, rstd, eps, bias=None: calls.append(("rstd", b.t())) or True)
    g = (1 + 0.5 * torch.randn(64)).bfloat16()
    w = torch.randn(32, 64).bfloat16()
    x = torch.randn(16, 64).bfloat16()
    assert rms._folded(x, g, w, None, 1e-6, torch.empty(16, 32).bfloat16(), torch.empty(16))
    want = (w.float() * g.float()).bfloat16()
    kinds = [k for k, _ in calls]
    assert kinds == {"runs": ["in-kernel"], "not ready": ["pass", "rstd"],
                     "launch fails": ["in-kernel", "pass", "rstd"]}[in_kernel]
    assert all(torch.equal(wg, want) for k, wg in calls if wg is not None)  # every GEMM got the folded weight


def test_a_bound_launch_is_cached_per_signature_and_an_unbindable_one_is_prepared_once(monkeypatch):
    """runtime/launch.launch_bound: one prepare per signature; the bound launch gets the roles' addresses each call;
    a prepared launch that cannot be bound answers False from then on without preparing again."""
    from tilewright.cuda_fallback.runtime import launch

    prepares, launched = [], []

    class Bound:
        def __call__(self, *ptrs):
            launched.append(ptrs)

    bindable = {"yes": True}
    monkeypatch.setattr(launch, "bind_cuda", lambda *a: Bound() if bindable["yes"] else None)
    cache = {}
    t1, t2 = torch.empty(4), torch.empty(4)

    def prepare():
        prepares.append(1)
        return "fn", 1, []

    assert launch.launch_bound(cache, ("sig",), prepare, torch.device("cpu"), 128, 0, {"a": t1})
    assert launch.launch_bound(cache, ("sig",), prepare, torch.device("cpu"), 128, 0, {"a": t2})
    assert len(prepares) == 1 and launched == [(t1.data_ptr(),), (t2.data_ptr(),)]
    bindable["yes"] = False
    assert not launch.launch_bound(cache, ("other",), prepare, torch.device("cpu"), 128, 0, {"a": t1})
    assert not launch.launch_bound(cache, ("other",), prepare, torch.device("cpu"), 128, 0, {"a": t1})
    assert len(prepares) == 2 and len(launched) == 2


def test_a_self_check_is_deferred_during_cuda_graph_capture(monkeypatch):
    """A first-use self-check reached inside a CUDA-graph capture (where its synchronize and host copies are illegal)
    is not run: the call is declined without a verdict and the readiness epoch moves, so the router re-decides; the
    first call outside capture runs it."""
    from tilewright import backends
    from tilewright.cuda_fallback.runtime import guard

    monkeypatch.setattr(guard, "device_model", lambda device: "test card")
    capturing = {"now": True}
    monkeypatch.setattr(guard, "_capturing", lambda device: capturing["now"])
    g = guard.Guard("test family")
    runs = []
    epoch = backends.readiness_epoch
    ok, why = g.check("cuda", "v1", (), lambda: runs.append(1) or (True, "fine"))
    assert not ok and "deferred" in why and not runs and backends.readiness_epoch > epoch and not g.disabled
    capturing["now"] = False
    ok, why = g.check("cuda", "v1", (), lambda: runs.append(1) or (True, "fine"))
    assert ok and runs == [1]
    capturing["now"] = True  # checked already: capture no longer matters
    assert g.check("cuda", "v1", (), lambda: runs.append(1) or (True, "fine"))[0] and runs == [1]
