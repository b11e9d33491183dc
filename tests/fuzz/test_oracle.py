"""The fuzz oracle's own rules, on hand-made inputs (CPU): the relu-kink slack accepts exactly the other side of an
ambiguous kink, nothing more."""
import pytest
import torch

import fuzz_cases as fc


def _case():
    return {"family": "gemm", "entry": "matmul", "opts": {"activation": "relu"}}


def test_relu_kink_slack_covers_a_flipped_near_zero_preactivation():
    A = torch.tensor([[1.0, 1.0], [2.0, -1.0]], dtype=torch.float64)
    B = torch.tensor([[1.0, 3.0], [-1.0 + 2.0 ** -30, 1.0]], dtype=torch.float64)  # z[0, 0] = 2^-30: ambiguous
    T = T64 = {"a": A, "b": B}
    g = torch.tensor([[0.5, -1.0], [2.0, 1.0]], dtype=torch.float64)
    slack = fc._relu_kink_slack(_case(), T, T64, [g], ["a", "b"])
    z = A @ B
    mask = (z > 0).double()
    ref_db = A.t() @ (g * mask)
    flipped = mask.clone()
    flipped[0, 0] = 0  # the kernel put z[0, 0] on the other side
    ours_db = A.t() @ (g * flipped)
    assert (ours_db - ref_db).abs().max() > 0.4  # a real difference the plain rule would reject
    ref_db.kink_slack = slack["b"]
    fc.compare("grad[b]", ours_db.float(), ours_db.float(), ref_db, eps=1e-7)  # accepted
    wrong = ours_db.clone()
    wrong[1, 1] += 0.5  # an error where no kink is ambiguous
    with pytest.raises(fc.FuzzFailure):
        fc.compare("grad[b]", wrong.float(), wrong.float() * 0 + ref_db.float(), ref_db, eps=1e-7)


def test_relu_kink_slack_is_empty_without_an_ambiguous_entry():
    A = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    B = torch.tensor([[1.0], [1.0]], dtype=torch.float64)
    assert fc._relu_kink_slack(_case(), {"a": A, "b": B}, {"a": A, "b": B}, [torch.ones(1, 1)], ["a", "b"]) == {}
    gelu = {"family": "gemm", "entry": "matmul", "opts": {"activation": "gelu"}}
    assert fc._relu_kink_slack(gelu, {"a": A, "b": B}, {"a": A, "b": B}, [torch.ones(1, 1)], ["a", "b"]) == {}


def test_rms_dx_atol_is_the_cancelled_terms_size_in_fp32_ulps():
    # K = 1: dx = rstd * du*g * (1 - xhat^2) ~ 0, while each of its two terms is rstd * |du*g|
    x = torch.tensor([[0.25], [-2.0]], dtype=torch.float64)
    g = torch.tensor([1.5], dtype=torch.float64)
    w = torch.tensor([[2.0], [-1.0]], dtype=torch.float64)  # (N, K)
    gos = [torch.tensor([[1.0, 0.5], [-1.0, 2.0]], dtype=torch.float64)]
    case = {"family": "rms_norm_linear", "dtype": "bfloat16", "opts": {"eps": 1e-12}}
    atol = fc._rms_dx_atol(case, {"x": x, "norm_weight": g, "weight": w}, gos)
    rstd = 1 / x.abs()
    du = gos[0] @ w
    terms = rstd * (du * g).abs() * 2  # the dug term and the equal xhat * c term
    assert atol == pytest.approx(8 * torch.finfo(torch.float32).eps * float(terms.max()), rel=1e-9)
    # a rounding-sized error of the terms passes, an error of 1e-3 does not
    ref = torch.zeros(2, 1, dtype=torch.float64)
    fc.compare("grad[x]", (ref + 2e-7 * float(terms.max())).float(), ref.float(), ref, 2.0 ** -8, extra_atol=atol)
    with pytest.raises(fc.FuzzFailure):
        fc.compare("grad[x]", (ref + 1e-3).float(), ref.float(), ref, 2.0 ** -8, extra_atol=atol)
    assert fc._rms_dx_atol({"family": "gemm"}, {}, gos) == 0.0
    bad_eps = dict(case, opts={"eps": "1e-6"})
    assert fc._rms_dx_atol(bad_eps, {"x": x, "norm_weight": g, "weight": w}, gos) == 0.0


def test_run_case_reports_a_full_gpu_as_oom_not_as_pass_or_failure(monkeypatch):
    """An out-of-memory (the GPU tier shares one card between a dozen processes) is retried once after freeing the
    cache, then reported as "oom"; on the CPU, or for any other exception, nothing is swallowed."""
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))

    def oom(case, device, backend):
        calls.append("run")
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 770.00 MiB")

    monkeypatch.setattr(fc, "_run", oom)
    case = {"family": "attention", "entry": "sdpa", "seed": 1, "backend": None}
    assert fc.run_case(case, "cuda", None) == "oom" and calls == ["run", "empty", "run"]
    with pytest.raises(torch.OutOfMemoryError):
        fc.run_case(case, "cpu", None)
    calls.clear()

    def once(case, device, backend):
        calls.append("run")
        if len(calls) == 1:
            raise fc._OutOfMemory()
        return "pass"

    monkeypatch.setattr(fc, "_run", once)
    assert fc.run_case(case, "cuda", None) == "pass"

    def other(case, device, backend):
        raise RuntimeError("misaligned address")

    monkeypatch.setattr(fc, "_run", other)
    with pytest.raises(RuntimeError, match="misaligned"):
        fc.run_case(case, "cuda", None)
