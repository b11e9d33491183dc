"""CPU tier: the model-level benchmark (bench/model.py) on its tiny suite under the interpreter - the rows it returns,
and its correctness guard, which must stop a wrong tilewright block (forward or gradients) before anything is timed.
The numbers themselves say nothing on CPU; what is checked is that every provider ran, through the same rows the GPU
run writes."""
import inspect
import math

import pytest
import torch

from tilewright import cli
from tilewright.bench import model
from tilewright.bench.common import COLUMNS
from tilewright.tools.report import case_kind

pytestmark = pytest.mark.interpreter

CPU_PROVIDERS = {"torch_eager", "torch_compile", "tilewright_eager", "tilewright_compile"}
KINDS = ("first_call", "fwd", "fwd+bwd")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def tiny_frame():
    return model.run("tiny", progress=lambda line: None)


@pytest.mark.slow
def test_tiny_suite_end_to_end(tiny_frame):
    df = tiny_frame
    assert list(df.columns) == COLUMNS
    assert set(df.op) == {"model"}
    # every provider but max-autotune (GPU only) on every (block, kind)
    assert set(df.provider) == CPU_PROVIDERS == set(model.PROVIDERS) - {"torch_compile_max_autotune"}
    cases = {f"{block}-tiny|{kind}" for block in ("llama", "vit") for kind in KINDS}
    assert set(df.case) == cases
    assert len(df) == len(cases) * len(CPU_PROVIDERS)
    assert (df.median_ms > 0).all() and df.median_ms.map(math.isfinite).all()
    assert (df.peer == "torch_eager").all()
    assert (df[df.provider == "torch_eager"].speedup == 1.0).all()
    peer_ms = df[df.provider == "torch_eager"].set_index("case").median_ms
    for r in df.itertuples():
        assert r.speedup == pytest.approx(peer_ms[r.case] / r.median_ms)
    timed = df[~df.case.str.endswith("first_call")]
    assert (timed.tflops > 0).all() and df[df.case.str.endswith("first_call")].tflops.isna().all()
    assert set(df.dtype) == {"float16"}


@pytest.mark.slow
def test_tiny_suite_records_the_guard_errors(tiny_frame):
    errors = tiny_frame.attrs["max_rel_err"]
    expected = {f"{block}-tiny|{kind}|{p}" for block in ("llama", "vit") for kind in ("fwd", "fwd+bwd")
                for p in CPU_PROVIDERS}
    assert set(errors) == expected
    assert all(0 <= e < model.REL_TOL for e in errors.values()), errors


def _never_timed(*args, **kwargs):
    raise AssertionError("a wrong model was timed")


def test_guard_stops_a_wrong_weight_before_timing(monkeypatch):
    build = model.build_blocks

    def broken(case, device, dtype, seed=0):
        ref, ours = build(case, device, dtype, seed)
        with torch.no_grad():
            ours.w_down.weight[:, :8] *= 2  # one weight of the tilewright build only
        return ref, ours

    monkeypatch.setattr(model, "build_blocks", broken)
    monkeypatch.setattr(model, "loop_ms_alternating", _never_timed)
    case = model.SUITES["tiny"][0]
    with pytest.raises(model.WrongModel, match=r"llama-tiny: tilewright_eager's forward output .*bound 0.02"):
        model.run_case(case, "cpu", torch.float16, progress=lambda line: None)


class _DoubleGrad(torch.autograd.Function):
    """Identity forward, doubled gradient: a block whose outputs are right and whose backward is wrong."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return 2 * g


def test_guard_stops_a_wrong_backward(monkeypatch):
    forward = model.TilewrightLlamaBlock.forward
    monkeypatch.setattr(model.TilewrightLlamaBlock, "forward", lambda self, x: forward(self, _DoubleGrad.apply(x)))
    timed = []
    monkeypatch.setattr(model, "loop_ms_alternating", lambda fns, **kw: timed.extend(fns) or [1.0] * len(fns))
    case = model.SUITES["tiny"][0]
    with pytest.raises(model.WrongModel, match=r"tilewright_eager's gradients .* on 'input'"):
        model.run_case(case, "cpu", torch.float16, progress=lambda line: None)
    # the forwards (correct) were timed; no fwd+bwd step was: every provider's gradients are checked before the
    # steps are timed (interleaved)
    assert len(timed) == 4


def test_rel_err_and_bounds():
    ref = torch.tensor([1.0, -2.0, 4.0])
    assert model.rel_err(ref + 0.04, ref) == pytest.approx(0.01)
    assert model.rel_err(torch.tensor([1.0, float("nan"), 4.0]), ref) == math.inf
    case = model.SUITES["tiny"][0]
    with pytest.raises(model.WrongModel, match="inf"):  # a non-finite output fails even an infinite bound
        model.check_outputs("p", case, "gradients", {"g": (torch.full((3,), math.inf), ref)}, bounds=math.inf)
    assert model.check_outputs("p", case, "x", {"g": (ref, ref)}) == {"g": 0.0}


def test_flops_count_matmuls_and_attention():
    c = model.Case("llama", model.LLAMA, "prefill", 8, 2048)
    M, d = 8 * 2048, 2048
    gemm = 2 * M * d * (3072 + 2048 + 3 * 5632)
    attn = 4 * 8 * 16 * 2048 ** 2 * 128 / 2
    assert model.flops(c, "fwd") == pytest.approx(gemm + attn)
    assert model.flops(c, "fwd+bwd") == pytest.approx(3 * gemm + 3.5 * attn)


def test_registered_in_the_cli():
    assert cli.BENCH_OPS["model"] == "tilewright.bench.model"
    # --op all runs one suite name across ops: the model bench offers every suite the others share
    assert {"default", "tiny"} <= set(cli._bench_suites(list(cli.BENCH_OPS)))
    assert set(cli._bench_suites(["model"])) >= set(cli._bench_suites([op for op in cli.BENCH_OPS if op != "model"]))
    params = inspect.signature(model.run).parameters
    assert set(cli.ALL_OPS_ARGS["model"]) <= set(params) and cli.ALL_OPS_ARGS["model"]["max_autotune"] is False
    assert case_kind("model", "vit-small|fwd+bwd") == "fwd+bwd" and case_kind("model", "x|first_call") == "first_call"


def test_default_suite_refused_on_cpu():
    with pytest.raises(ValueError, match="needs a GPU"):
        model.run("default", progress=lambda line: None)
