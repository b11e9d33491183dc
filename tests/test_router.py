"""CPU tier for the backend registry and the router's policy over it: a fake op with fake records is chosen or
skipped by the same loop as the real ops, forced-backend errors, the runtime Guard's disable path on a faked device,
and the decision cache following a family that was disabled after it was cached. No GPU needed."""
from __future__ import annotations

import re
import types
import warnings
from pathlib import Path

import pytest
import torch

from tilewright import _env, backends, router
from tilewright.backends import Backend
from tilewright.cuda_fallback import build_check
from tilewright.cuda_fallback import gemm_sm90 as cg
from tilewright.cuda_fallback.runtime import build, gemm_common, guard
from tilewright.cuda_fallback.runtime.guard import Guard

OP = "fake_op"


class _FakeCuda(torch.Tensor):
    """A CPU tensor that claims to be on a GPU, so the router's per-signature decision cache applies to it."""

    @property
    def is_cuda(self):
        return True


@pytest.fixture
def fake_op(monkeypatch):
    """``fake_op`` with a hand-written "cuda" record for sm_9x (preferring M >= 64, readiness from ``state``), a
    "triton" record and a "torch" record - none of which the router has ever heard of."""
    state = {"cap": (9, 0), "ready": (True, "self-check passed"), "ready_calls": 0, "missing": None}

    def ready(x):
        state["ready_calls"] += 1
        return state["ready"]

    cuda = Backend(OP, "cuda", "fake_sm90", lambda x: (x.dim() == 2, "2-D input" if x.dim() == 2 else "not 2-D"),
                   kernel="fake kernel", archs=(9,), dtypes=(torch.bfloat16,), switch="FAKE_CUDA",
                   requires=lambda: state["missing"],
                   preferred=lambda x: (x.shape[0] >= 64, f"M = {x.shape[0]} vs the measured 64"),
                   ready=ready, launch=lambda x, out: True)
    backends.records()  # load the real families first, so the fake records are added beside them
    for record in (cuda, Backend(OP, "triton", "fake_triton", lambda x: (True, "any tensor")),
                   Backend(OP, "torch", "fake_torch", lambda x: (True, "runs anywhere"), kernel="reference")):
        monkeypatch.setitem(backends.REGISTRY, record.key, record)
    monkeypatch.setattr(router, "_capability", lambda device: state["cap"])
    monkeypatch.delenv("TILEWRIGHT_BACKEND", raising=False)
    monkeypatch.delenv("FAKE_CUDA", raising=False)
    return state


def _x(M=128, dtype=torch.bfloat16):
    return torch.randn(M, 32, dtype=dtype)


# ------------------------------------------------------------------------------------------------ policy loop
def test_a_registered_op_gets_the_policy_loop(fake_op):
    assert router.PREFERENCE[OP] == ("cuda", "triton", "torch")
    d = router.decide(OP, _x())
    assert d.backend == "cuda" and not d.forced and d.record.name == "fake_sm90"
    assert d.reasons == ["chosen: cuda: M = 128 vs the measured 64; cuda: self-check passed"]
    assert d.launch(_x(), None) is True
    d = router.decide(OP, _x(M=16))  # not preferred: skipped before its self-check
    assert d.backend == "triton" and d.reasons[0] == "skipped: cuda: M = 16 vs the measured 64", str(d)
    assert d.reasons[1] == "chosen: triton: any tensor" and d.launch(_x(), None) is False  # no launch entry
    assert fake_op["ready_calls"] == 1


@pytest.mark.parametrize("setup,reason", [
    (lambda s, mp: s.update(cap=(8, 0)), "cuda: no fake_op kernel for sm_80 (have: sm_9x); Triton covers it"),
    (lambda s, mp: s.update(cap=None), "cuda: tensors on cpu (needs an NVIDIA GPU)"),
    (lambda s, mp: mp.setenv("FAKE_CUDA", "0"), "cuda: disabled by FAKE_CUDA=0"),
    (lambda s, mp: s.update(missing="no widget compiler"), "cuda: no widget compiler"),
    (lambda s, mp: s.update(ready=(False, "self-check failed")), "cuda: M = 128 vs the measured 64; "
                                                                 "cuda: self-check failed"),
], ids=["arch", "no-gpu", "switch", "requires", "not-ready"])
def test_each_gate_skips_with_its_reason(fake_op, monkeypatch, setup, reason):
    setup(fake_op, monkeypatch)
    d = router.decide(OP, _x())
    assert d.backend == "triton" and d.reasons[0] == f"skipped: {reason}", str(d)


def test_dtypes_and_constraints_of_the_record(fake_op):
    d = router.decide(OP, _x(dtype=torch.float32))
    assert d.reasons[0] == "skipped: cuda: dtype torch.float32 not supported for fake_op (torch.bfloat16)"
    d = router.decide(OP, torch.randn(4, 4, 4, dtype=torch.bfloat16))
    assert d.backend == "triton" and d.reasons[0] == "skipped: cuda: not 2-D"


# ------------------------------------------------------------------------------------------------ forced backends
def test_forced_backend_sources_and_errors(fake_op, monkeypatch):
    d = router.decide(OP, _x(M=16), backend="cuda")  # forcing skips the preference, never the self-check
    assert d.forced and d.backend == "cuda"
    assert d.reasons == ["forced by backend= argument", "cuda: self-check passed"]
    with router.use_backend("torch"):
        assert router.decide(OP, _x()).reasons == ["forced by tilewright.use_backend()", "torch: reference: runs "
                                                                                         "anywhere"]
    monkeypatch.setenv("TILEWRIGHT_BACKEND", "triton")
    assert router.decide(OP, _x()).reasons[0] == "forced by TILEWRIGHT_BACKEND"
    monkeypatch.setenv("TILEWRIGHT_BACKEND", "cuda")
    fake_op["ready"] = (False, "self-check failed")
    with pytest.raises(ValueError, match=r"fake_op: backend 'cuda' forced by TILEWRIGHT_BACKEND cannot run these "
                                         r"inputs: cuda: self-check failed"):
        router.decide(OP, _x())
    fake_op["cap"] = (12, 0)
    with pytest.raises(ValueError, match="no fake_op kernel for sm_120"):
        router.decide(OP, _x(), backend="cuda")
    with pytest.raises(ValueError, match="unknown backend 'cudnn'"):
        router.decide(OP, _x(), backend="cudnn")
    with pytest.raises(ValueError, match="unknown backend"):
        with router.use_backend("cudnn"):
            pass


def test_backward_keeps_a_forced_backend_only_where_it_can_run(fake_op, monkeypatch):
    """The backward's own calls (other shapes and layouts than the forward's) keep the forced backend where it fits
    and otherwise get the router's pick by name - never the forward-time ValueError halfway through a step."""
    assert router.backward_backend(OP, None, _x()) is None  # nothing forced: the router decides as usual
    assert router.backward_backend(OP, "cuda", _x()) == "cuda"
    three_d = torch.randn(2, 64, 32, dtype=torch.bfloat16)  # the fake CUDA record takes 2-D inputs only
    with pytest.raises(ValueError, match="forced by backend= argument cannot run"):
        router.decide(OP, three_d, backend="cuda")
    assert router.backward_backend(OP, "cuda", three_d) == "triton"
    with router.use_backend("cuda"):
        assert router.backward_backend(OP, None, three_d) == "triton"
    monkeypatch.setenv("TILEWRIGHT_BACKEND", "cuda")
    fake_op["ready"] = (False, "self-check failed")
    assert router.backward_backend(OP, None, _x()) == "triton"


def test_forced_cuda_gemm_backward_falls_back_per_call(monkeypatch):
    """A forced CUDA backend that cannot take the backward's GEMMs: gradients still come (the router's pick runs
    them), equal to torch's. On this CPU machine no call is CUDA-eligible, so the forward runs unforced and the
    backward is forced to "cuda" through use_backend (before, each backward GEMM raised the forward's ValueError)."""
    import tilewright

    x = torch.randn(5, 24, dtype=torch.float32, requires_grad=True)
    w = torch.randn(7, 24, dtype=torch.float32, requires_grad=True)
    y = tilewright.linear(x, w)
    with router.use_backend("cuda"):
        with pytest.raises(ValueError, match="forced by tilewright.use_backend"):
            tilewright.linear(x, w)  # the forward itself still refuses
        gx, gw = torch.autograd.grad(y.sum(), (x, w))
    torch.testing.assert_close(gx, torch.ones(5, 7) @ w.detach())
    torch.testing.assert_close(gw, torch.ones(5, 7).t() @ x.detach())


def test_forcing_a_backend_the_op_lacks(fake_op, monkeypatch):
    monkeypatch.delitem(backends.REGISTRY, (OP, "fake_sm90"))
    with pytest.raises(ValueError, match=f"cuda: no cuda implementation of {OP}"):
        router.decide(OP, _x(), backend="cuda")
    with pytest.raises(ValueError, match="unknown op 'conv'"):
        router.decide("conv", _x())


def test_registering_a_name_twice_is_an_error(fake_op):
    with pytest.raises(ValueError, match="registered twice"):
        backends.register(backends.REGISTRY[(OP, "fake_sm90")])
    with pytest.raises(ValueError, match="unknown backend"):
        backends.register(Backend(OP, "cudnn", "x", lambda x: (True, "")))


def test_router_source_names_no_op():
    """Beside the behavioural tests above: the router is policy over records, with no branch on an op's name."""
    code = Path(router.__file__).read_text()
    assert not re.search(r"\bop\s*[!=]=", code)
    for op in backends.ops():
        assert f'"{op}"' not in code and f"'{op}'" not in code, op


# ------------------------------------------------------------------------------------------------ registry data
def test_build_check_reads_the_registry():
    """Every kernel source under cuda_fallback/ belongs to a registered family or a listed kernel part (none skipped
    as unregistered), build-check's table is their own data, and every family has its router record."""
    sources = sorted(p.name for p in build.SOURCE_DIR.glob("*.cu"))
    assert sorted(build_check.KERNELS) == sources
    assert build_check.KERNELS[cg.SOURCE] == (cg.BUILD_CHECK_ARCHS, cg.BUILD_CHECK_MARKERS, cg.build_check_builds)
    families = {m.__name__.rsplit(".", 1)[1] for m in backends.implementation_modules()}
    assert families == {r.name for r in backends.records(backend="cuda")}
    names = {m.__name__.rsplit(".", 1)[1] for m in backends.kernel_modules()}
    assert names == families | {m.rsplit(".", 1)[1] for m in backends.KERNEL_PARTS}
    assert all(Path(s).stem in names for s in sources)  # host module and kernel share a base name


def test_measurements_are_data_with_their_card():
    for r in backends.records(backend="cuda"):
        for m in r.measured:
            assert m.card and re.fullmatch(r"\d{4}-\d\d-\d\d", m.date) and m.csv.startswith("perf/results/"), r.key
    assert {r.name for r in backends.records(backend="cuda") if not r.measured} == {"gemm_sm100", "gemm_sm120"}


def test_env_constants(monkeypatch):
    header = (build.PTX_DIR / "common.cuh").read_text()
    m = re.search(r"#define TW_SMEM_OPTIN_BYTES \((\d+) \* (\d+)\)", header)
    assert m and int(m[1]) * int(m[2]) == _env.SMEM_OPTIN_BYTES == cg.SMEM_LIMIT == 232448
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not _env.interpreting()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert _env.interpreting()


# ------------------------------------------------------------------------------------------------ Guard
@pytest.fixture
def fake_device(monkeypatch, fake_compiler):
    monkeypatch.setattr(guard, "_warned", set())
    monkeypatch.setattr(guard, "device_model", lambda device: "Fake GPU (sm_90)")


def test_guard_self_check_is_memoized_per_key(fake_device):
    g = Guard("fake GEMM", "fake ", measured=())
    calls = []

    def check(ok):
        calls.append(ok)
        return ok, "self-check passed" if ok else "self-check failed: relative error 0.5"

    assert g.check("cpu", "v1", (torch.bfloat16,), lambda: check(True)) == (
        True, f"fake v1: self-check passed; {guard.NOT_RUN_NOTE}")
    assert g.check("cpu", "v1", (torch.bfloat16,), lambda: check(True))[0] and calls == [True]  # remembered
    with pytest.warns(RuntimeWarning, match="fake GEMM v2 disabled on Fake GPU.*; Triton serves instead"):
        assert not g.check("cpu", "v2", (torch.bfloat16,), lambda: check(False))[0]
    # a variant that falls back to another of its family says so (attention's wide key blocks -> variant c)
    with pytest.warns(RuntimeWarning, match="fake GEMM v3 disabled on Fake GPU.*; variant v1 serves instead"):
        assert not g.check("cpu", "v3", (torch.bfloat16,), lambda: check(False), fallback="variant v1")[0]
    assert g.disabled is None and g.blocked((True, "fits")) is None  # a failed key does not disable the family
    assert g.blocked((False, "not 2-D")) == (False, "not 2-D")


def test_guard_compile_failure_disables_the_family_once(fake_device):
    g = Guard("fake GEMM", measured=("H200",))

    def broken():
        raise build.CompileError("ptxas: boom")

    with pytest.warns(RuntimeWarning, match="did not compile"):
        assert g.check("cpu", "v1", (), broken) == (False, "compile failed (see the warning)")
    assert g.blocked((True, "fits")) == (False, "compile failed (see the warning)")


def test_guard_run_declines_or_disables(fake_device, monkeypatch):
    g = Guard("fake attention", declines=(ValueError,))

    def launch(kind):
        if kind:
            raise kind("boom")

    assert g.run(launch, None) is True
    assert g.run(launch, ValueError) is False and g.disabled is None  # declined: this call only
    with pytest.warns(RuntimeWarning, match="fake attention launch failed"):
        assert g.run(launch, RuntimeError) is False
    assert g.disabled == "launch failed: RuntimeError: boom"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # disabled: declines silently, one warning in total
        assert g.run(launch, None) is False
    monkeypatch.setattr(build, "toolchain", lambda: None)
    assert Guard("fresh").blocked((True, "fits")) == (False, "no CUDA compiler (nvcc or NVRTC) found")


# ------------------------------------------------------------------------------------------------ decision cache
def test_cached_decision_follows_a_family_disabled_after_it(fake_device, monkeypatch):
    """The per-signature cache serves a repeated call the same Decision until readiness changes: once the sm_90 GEMM
    family is disabled (a failed launch), the next identical call is decided again, for Triton."""
    router.invalidate()
    monkeypatch.setattr(router, "_capability", lambda device: (9, 0))
    monkeypatch.setattr(cg.GUARD, "checked", {})
    monkeypatch.setattr(cg.GUARD, "disabled", None)
    monkeypatch.setattr(gemm_common, "self_check", lambda *a, **k: (True, "self-check passed"))
    monkeypatch.delenv("TILEWRIGHT_BACKEND", raising=False)
    monkeypatch.delenv("TILEWRIGHT_CUDA", raising=False)
    a = torch.empty(16384, 4096, dtype=torch.bfloat16).as_subclass(_FakeCuda)
    b = torch.empty(4096, 4096, dtype=torch.bfloat16).as_subclass(_FakeCuda)
    first = router.decide("gemm", a, b, None, None)
    assert first.backend == "cuda" and first.record.name == "gemm_sm90", str(first)
    assert router.decide("gemm", a, b, None, None) is first  # served from the cache
    with pytest.warns(RuntimeWarning, match="CUDA GEMM launch failed"):
        assert cg.GUARD.run(lambda: 1 / 0) is False
    again = router.decide("gemm", a, b, None, None)
    assert again is not first and again.backend == "triton", str(again)
    assert "launch failed: ZeroDivisionError" in again.reasons[0]
    router.invalidate()


def test_a_cached_decision_skips_the_readiness_check_until_readiness_changes(fake_op):
    """A hit costs no readiness check (attention's re-ran its constraints, toolchain and device lookups on every
    backward call); a readiness change anywhere (``backends.readiness_changed``: a family disabled, a failed
    self-check) or a changed environment switch makes the next identical call decide again."""
    router.invalidate()
    x = _x().as_subclass(_FakeCuda)
    first = router.decide(OP, x)
    assert first.backend == "cuda" and fake_op["ready_calls"] == 1
    assert router.decide(OP, x) is first and fake_op["ready_calls"] == 1
    fake_op["ready"] = (False, "self-check failed")
    backends.readiness_changed()
    again = router.decide(OP, x)
    assert again.backend == "triton" and fake_op["ready_calls"] == 2, str(again)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAKE_CUDA", "0")  # the record's switch is part of the key
        assert router.decide(OP, x) is not again
    router.invalidate()


def test_every_op_explains_the_info_command_s_probe(monkeypatch, fake_compiler):
    """``tilewright info`` asks every op about (a, a) on the device: each record's predicates take the tensors as the
    caller passes them - fewer than the op's full argument list included - and answer with a reason."""
    monkeypatch.setattr(router, "_capability", lambda device: (9, 0))
    monkeypatch.delenv("TILEWRIGHT_BACKEND", raising=False)
    monkeypatch.delenv("TILEWRIGHT_CUDA", raising=False)
    a = torch.empty(256, 256, dtype=torch.bfloat16)
    texts = {op: router.explain(op, a, a) for op in router.PREFERENCE}
    assert "backend=triton" in texts["gemm"] and "outside the measured win region" in texts["gemm"]
    assert "q, k, v must be tensors" in texts["attention"]
    assert "expects tensors x, norm_weight, weight" in texts["rms_norm_linear"]
    assert "dtype torch.bfloat16 not supported for scaled_mm" in texts["scaled_mm"]
    f8 = torch.empty(256, 256, dtype=torch.float8_e4m3fn)
    assert "cuda: a must be row-major and b column-major" in router.explain("scaled_mm", f8, f8)
    # with scaled_mm's layout the FP8 kernel's region answers for its defaults (row-wise scales, bf16 out, accurate)
    small = torch.empty(64, 256, dtype=torch.float8_e4m3fn)
    assert "cuda: M = 64 < 256" in router.explain("scaled_mm", small, f8.t())


# ---- the first-use self-check loop every CUDA family shares (runtime/guard.run_self_check) ---------------------------
def _gemm_by_torch(bug=None):
    from tilewright.reference import activation_reference

    def launch(a, b, out, bias=None, residual=None, activation=None, variant=None):
        y = activation_reference(a.float() @ b.float() + (0 if bug == "drop bias" else bias.float()), activation)
        if residual is not None:
            y = y + residual.reshape(out.shape).float()
        if bug == "skip a row":
            y[-1] = float("nan")  # an element the kernel never wrote stays at the NaN the check pre-fills
        out.copy_(y.to(out.dtype))
    return launch


@pytest.mark.parametrize("bug", [None, "drop bias", "skip a row"])
def test_gemm_self_check_passes_a_correct_kernel_and_fails_a_wrong_one(bug):
    from tilewright.cuda_fallback.runtime import gemm_common

    variant = type("V", (), {"bm": 64, "bn": 64, "name": "fake64"})()
    ok, why = gemm_common.self_check(torch.device("cpu"), variant, False, False, torch.float32, _gemm_by_torch(bug))
    assert ok == (bug is None), why
    assert why.startswith("self-check passed" if bug is None else "self-check failed for fake64 on (296, 264, 200)")


def test_attention_and_rmsnorm_self_checks_fail_a_wrong_kernel(monkeypatch):
    """The two other families run the same loop: a kernel that ignores its inputs fails it, with the metrics."""
    from tilewright.cuda_fallback import attention_sm90, rmsnorm_gemm_sm90

    def attention_by_torch(q, k, v, out, lse, causal, scale, variant, causal_offset=0, window_offset=None):
        # the kernel's band: key j visible to query i iff j <= i + causal_offset (causal), j >= i + window_offset
        Sq, Skv = q.shape[2], k.shape[2]
        diff = torch.arange(Skv)[None, :] - torch.arange(Sq)[:, None]
        visible = torch.ones(Sq, Skv, dtype=torch.bool)
        if causal:
            visible &= diff <= causal_offset
        if window_offset is not None:
            visible &= diff >= window_offset
        group = q.shape[1] // k.shape[1]
        kk, vv = (t.float().repeat_interleave(group, 1) for t in (k, v))
        s = (q.float() @ kk.transpose(-1, -2) * (scale or q.shape[-1] ** -0.5)).masked_fill(~visible, float("-inf"))
        l_ = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isfinite(l_), l_, torch.zeros_like(l_))[..., None])
        out.copy_((p @ vv).to(out.dtype))
        lse.copy_(l_)
    monkeypatch.setattr(attention_sm90, "launch_attention", attention_by_torch)
    ok, why = attention_sm90.self_check(torch.device("cpu"), attention_sm90.pick_variant(), 64, torch.float32)
    assert ok, why
    monkeypatch.setattr(attention_sm90, "launch_attention",
                        lambda q, k, v, out, lse, *a, **kw: (out.zero_(), lse.zero_()))
    ok, why = attention_sm90.self_check(torch.device("cpu"), attention_sm90.pick_variant(), 64, torch.float32)
    assert not ok and "out relative error" in why and "max |LSE error|" in why

    def rms_by_torch(x, g, b, out, rstd, eps, bias=None, residual=None, activation=None, variant=None):
        y, r = rmsnorm_gemm_sm90.reference(x, g, b.t(), bias, eps, activation,
                                          None if residual is None else residual.reshape(out.shape))
        out.copy_(y.to(out.dtype))
        rstd.copy_(r * 1.001)  # 0.1% off: the rstd limit is 1e-5
    monkeypatch.setattr(rmsnorm_gemm_sm90, "launch_cuda_rmsnorm_gemm", rms_by_torch)
    variant = type("V", (), {"bm": 64, "bn": 64, "name": "fake-rms"})()
    ok, why = rmsnorm_gemm_sm90._self_check_one(torch.device("cpu"), variant, torch.float32)
    assert not ok and "rstd error" in why


def test_sm_count_is_the_reference_card_off_the_gpu_and_cached_per_device(monkeypatch):
    """_env.sm_count: REFERENCE_SMS for a CPU tensor's device (the interpreter's stand-in), else the device's
    multiprocessor count, queried once per device index."""
    assert _env.sm_count(torch.device("cpu")) == _env.REFERENCE_SMS
    calls = []
    monkeypatch.setattr(_env, "_sm_counts", {})
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: calls.append(index) or types.SimpleNamespace(multi_processor_count=78))
    assert _env.sm_count(torch.device("cuda", 1)) == 78 and _env.sm_count(torch.device("cuda", 1)) == 78
    assert calls == [1]
