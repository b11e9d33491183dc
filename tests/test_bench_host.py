"""bench/host.py and bench/first_call.py on the CPU (interpreter): every case runs for both providers, rows are in
the common long format with speedup = torch time / tilewright time, and bad suites are refused. The numbers mean
nothing here (the interpreter); the GPU runs are in perf/results/<card>/host/."""
import math

import pytest

from tilewright.bench import common, first_call, host

pytest.importorskip("pandas")


def test_host_bench_rows_cover_every_case_and_provider():
    df = host.run("tiny", progress=lambda s: None)
    assert list(df.columns) == common.COLUMNS
    tiny = host.SUITES["tiny"]
    cases = set(host.cases(tiny["gemm"], tiny["attention"], "cpu", __import__("torch").float16))
    assert set(df.case) == cases and set(df.provider) == {"tilewright", "torch"}
    assert len(df) == 2 * len(cases)
    ours = df[df.provider == "tilewright"]
    assert (ours.median_ms > 0).all() and all(math.isfinite(x) and x > 0 for x in ours.speedup)
    assert (df[df.provider == "torch"].speedup == 1).all()


def test_first_call_bench_runs_fresh_processes_cold_then_warm():
    df = first_call.run("tiny", progress=lambda s: None)
    assert list(df.columns) == common.COLUMNS
    modes = {c.rsplit("|", 1)[1] for c in df.case}
    assert modes == {"cold", "disk-warm"}
    assert len(df) == 2 * 2 * len(first_call.SUITES["tiny"])
    assert (df.median_ms > 0).all()


@pytest.mark.parametrize("module", [host, first_call])
def test_unknown_suite_is_refused(module):
    with pytest.raises(ValueError, match="suite"):
        module.run("huge", progress=lambda s: None)


def test_host_times_alternate_between_the_two_sides():
    """Run r of tilewright, then run r of torch, then run r + 1 of each: a drifting host CPU falls on both medians
    alike (one side's runs after the other's compared two different speeds of the machine)."""
    order = []
    times = host.host_us_alternating([lambda: order.append("a"), lambda: order.append("b")], calls=2, runs=3)
    assert order == ["a"] * 3 + ["b"] * 3 + ["a", "a", "b", "b"] * 3  # three warm-up calls each, then interleaved
    assert len(times) == 2 and all(t > 0 for t in times)
