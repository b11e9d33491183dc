"""The attention benchmark's row timing (CPU): every case's rows timed together, a row whose setup fails reported
and left out, and a provider failing in the middle of the interleaved rounds not taking the other rows with it."""
from tilewright.bench import attention


def test_rows_are_timed_together_and_failures_are_reported_not_fatal():
    notes = []
    calls = {"ok": 0, "flaky": 0}

    def ok():
        calls["ok"] += 1

    def flaky():  # runs once (the untimed first call), then fails: a failure inside the timed rounds
        calls["flaky"] += 1
        if calls["flaky"] > 1:
            raise RuntimeError("out of memory")

    def broken():
        raise ValueError("cannot build")

    rows = {("a", "fwd"): ("case a", lambda: ok), ("b", "fwd"): ("case b", lambda: flaky),
            ("c", "fwd"): ("case c", broken)}
    times = attention._time_rows(rows, notes.append)
    assert set(times) == {("a", "fwd")} and times[("a", "fwd")] >= 0
    assert any("case c: skipped (ValueError: cannot build)" in n for n in notes)
    assert any("interleaved timing failed" in n for n in notes)
    assert any("case b: skipped (RuntimeError: out of memory)" in n for n in notes)
    assert calls["ok"] >= 2  # its first call, then its timing (alone, after the interleaved rounds failed)


def test_rows_all_fine_are_timed_interleaved_once_each_on_cpu():
    seen = []
    rows = {(k, "fwd"): (k, (lambda k=k: (lambda: seen.append(k)))) for k in ("x", "y", "z")}
    times = attention._time_rows(rows, print)
    assert set(times) == {(k, "fwd") for k in "xyz"}
    assert sorted(seen) == ["x", "x", "y", "y", "z", "z"]  # first call + one timed run each (CPU: one round)
