"""CPU tier: tuner (fake timer), persistent cache, reports, plots and the tune/report CLI (issue 6)."""
import json
import sys
import time
import warnings
from html.parser import HTMLParser

import pandas as pd
import pytest
import torch

from tilewright import cli
from tilewright.autotune import cache
from tilewright.tools import report, tuner

SHAPE = (256, 512, 128)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "cache"))


def _fake_timer(fastest: str | None = None):
    """Deterministic times: every config a different time from its name; ``fastest`` (a name) 0.001 ms."""
    import zlib

    seen = []

    def timer(cand, fn):
        seen.append(cand.name)
        if cand.name == fastest:
            return 0.001
        return 0.01 + zlib.crc32(cand.name.encode()) % 1000 / 1e4

    timer.seen = seen
    return timer


def _tune(shapes=(SHAPE,), fastest=None, **kw):
    return tuner.tune_gemm(list(shapes), timer=_fake_timer(fastest), check=False, progress=False, peak=10.0,
                           log=lambda *_: None, **kw)


# ------------------------------------------------------------------------------------------------ tuner + cache
def test_fake_timer_winner_is_chosen_and_cached():
    names = list(_tune(store=False).df.query("backend == 'triton'").config)
    assert len(names) > 5
    target = names[len(names) // 2]
    sweep = _tune(fastest=target)
    win = report.winners(sweep.df)
    assert list(win["shape"]) == ["256x512x128"] and win.winner[0] == "triton" and win.triton_config[0] == target
    assert win.winner_ms[0] == 0.001
    rec = cache.lookup("gemm", "cpu", torch.float16, *SHAPE)
    assert rec["winner"] == "triton" and rec["backends"]["triton"]["name"] == target
    cfg = cache.triton_config(rec)
    row = sweep.df[sweep.df.config == target].iloc[0]
    assert (cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], cfg.num_warps) == (row.block_m, row.block_n, row.warps)


def test_cached_shapes_are_not_retuned():
    _tune()
    timer = _fake_timer()
    sweep = tuner.tune_gemm([SHAPE], timer=timer, check=False, progress=False, peak=10.0, log=lambda *_: None)
    assert timer.seen == [] and sweep.df.empty and sweep.meta["cached_shapes"] == [SHAPE]
    sweep = tuner.tune_gemm([SHAPE], timer=timer, check=False, progress=False, peak=10.0, log=lambda *_: None,
                            reuse=False)
    assert len(timer.seen) == len(sweep.df) > 1


def test_winners_across_backends_and_wrong_configs_never_win():
    rows = [dict(shape="s", M=1, N=1, K=1, backend="peer", config="cublas", median_ms=2.0, tflops=1, status="ok"),
            dict(shape="s", M=1, N=1, K=1, backend="triton", config="t1", median_ms=1.5, tflops=1, status="ok"),
            dict(shape="s", M=1, N=1, K=1, backend="triton", config="t0", median_ms=0.1, tflops=1, status="wrong"),
            dict(shape="s", M=1, N=1, K=1, backend="cuda", config="c1", median_ms=1.0, tflops=1, status="ok"),
            dict(shape="s", M=1, N=1, K=1, backend="cuda", config="c2", median_ms=1.2, tflops=1, status="ok")]
    win = report.winners(report.analyze(pd.DataFrame(rows)))
    assert (win.winner[0], win.winner_config[0], win.triton_config[0]) == ("cuda", "c1", "t1")
    assert win.vs_peer[0] == pytest.approx(2.0)


def test_near_ties_go_to_the_first_candidate_in_sweep_order():
    """Within report.TIE_BAND of the fastest a candidate is tied and the first in the sweep's order wins (then the
    first backend in report.BACKENDS): two sweeps of a shape whose timings differ by noise store the same winner."""
    band = report.TIE_BAND

    def row(backend, config, ms):
        return dict(shape="s", M=1, N=1, K=1, backend=backend, config=config, median_ms=ms, tflops=1, status="ok")

    first, second = report.BACKENDS[0], report.BACKENDS[1]
    runs = [[row(first, "a", 1.0 + band / 2), row(first, "b", 1.0), row(first, "c", 1.0 + band * 2)],
            [row(first, "a", 1.0), row(first, "b", 1.0 + band / 3), row(first, "c", 1.0 + band * 2)]]
    for rows in runs:  # two runs, the measured order of a and b swapped by noise: a wins both
        win = report.winners(report.analyze(pd.DataFrame(rows)))
        assert win[f"{first}_config"][0] == "a" and win.winner_config[0] == "a"
    win = report.winners(report.analyze(pd.DataFrame([row(first, "a", 1.0 + 2 * band), row(first, "b", 1.0)])))
    assert win.winner_config[0] == "b"  # outside the band the fastest wins
    win = report.winners(report.analyze(pd.DataFrame([row(second, "y", 1.0), row(first, "x", 1.0 + band / 2)])))
    assert (win.winner[0], win.winner_config[0]) == (first, "x")
    win = report.winners(report.analyze(pd.DataFrame([row(second, "y", 1.0), row(first, "x", 1.0 + 2 * band)])))
    assert (win.winner[0], win.winner_config[0]) == (second, "y")


def _triton_record(name="x", **config) -> dict:
    """A well-formed record whose Triton winner is a whole config of the space (``config`` overrides fields)."""
    from tilewright.autotune.space import default_gemm_config

    cfg = default_gemm_config(4096, 4096, 4096)
    full = {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": 3, **config}
    return {"winner": "triton", "backends": {"triton": {"name": name, "config": full, "median_ms": 0.2}}}


def test_cache_round_trip_buckets_and_dtypes():
    rec = _triton_record()
    assert cache.store("gemm", "cpu", torch.bfloat16, 3000, 5000, 4000, rec)
    got = cache.lookup("gemm", "cpu", torch.bfloat16, 4000, 5000, 4000)  # same M bucket (4096)
    assert got["winner"] == "triton" and got["shape"] == [3000, 5000, 4000]
    assert cache.lookup("gemm", "cpu", torch.float16, 3000, 5000, 4000) is None
    assert cache.lookup("gemm", "cpu", torch.bfloat16, 5000, 5000, 4000) is None  # next bucket
    assert cache.lookup("gemm", "cpu", torch.bfloat16, 3000, 5001, 4000) is None
    assert cache.triton_config(got).num_stages == 3
    assert list(cache.cache_dir().glob(".autotune-*")) == []  # atomic write leaves no temporary behind
    assert cache.entries("cpu").keys() == {"gemm|bfloat16|M4096,N5000,K4000"}


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": 0, "devices": {}}),
                                     json.dumps({"format": cache.FORMAT, "devices": []}), "\xff\xfe"])
def test_corrupted_or_mismatched_cache_warns_once_and_is_rewritten(content):
    path = cache.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.warns(RuntimeWarning, match="ignored") as record:
        assert cache.lookup("gemm", "cpu", torch.float16, *SHAPE) is None
        assert cache.lookup("gemm", "cpu", torch.float16, *SHAPE) is None
    assert len([w for w in record if "autotune cache" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _tune()
    data = json.loads(path.read_text())
    assert data["format"] == cache.FORMAT and cache.lookup("gemm", "cpu", torch.float16, *SHAPE)


_MALFORMED = {
    "list": [1, 2],
    "number": 3.5,
    "string": "triton",
    "no backends": {"winner": "triton"},
    "winner not a backend": {**_triton_record(), "winner": "cuda"},
    "backend not an object": {"winner": "cuda", "backends": {"cuda": "fast"}},
    "config not an object": {"winner": "triton", "backends": {"triton": {"name": "x", "config": "64x64"}}},
    "time not a number": _triton_record(name="x"),
    "partial triton config": {"winner": "triton", "backends": {"triton": {"name": "x", "config": {"BLOCK_M": 64}}}},
    "text in a triton field": _triton_record(BLOCK_M="64"),
    "unknown triton field": _triton_record(BLOCK_Q=1),
    "cuda config without variant": {"winner": "cuda", "backends": {"cuda": {"name": "c", "config": {"group": 8}}}},
    "peer_ms not a number": {**_triton_record(), "peer_ms": "0.2"},
}
_MALFORMED["time not a number"]["backends"]["triton"]["median_ms"] = "0.2"


@pytest.mark.parametrize("kind", list(_MALFORMED))
def test_malformed_entry_is_absent_at_launch_and_everywhere(kind):
    """Valid JSON of the wrong type or shape for one entry: that entry is absent for every reader (the launcher's
    lookup included), with one warning naming the file, while a good entry of the same file stays usable."""
    from tilewright.triton_kernels import gemm as tg

    key = cache.device_key("cpu")
    good = _triton_record(name="good")
    entries = {cache.entry_key("gemm", torch.float16, 64, 64, 64): _MALFORMED[kind],
               cache.entry_key("gemm", torch.float16, 512, 512, 512): good}
    path = cache.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": cache.FORMAT, "devices": {key: {"entries": entries}}}))
    a = torch.empty(64, 64, dtype=torch.float16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            assert cache.lookup("gemm", "cpu", torch.float16, 64, 64, 64) is None
            # what launch_gemm asks before a launch on a GPU (the CPU tensors only make it callable here)
            assert tg._tuned_config(a, a, 64, 64, 64, True, True, False) is None
        assert list(cache.entries("cpu")) == [cache.entry_key("gemm", torch.float16, 512, 512, 512)]
        assert cache.lookup("gemm", "cpu", torch.float16, 512, 512, 512)["backends"]["triton"]["name"] == "good"
        b = torch.empty(512, 512, dtype=torch.float16)
        assert tg._tuned_config(b, b, 512, 512, 512, True, True, False) is not None
    mine = [w for w in caught if str(path) in str(w.message)]
    assert len(mine) == 1 and "malformed" in str(mine[0].message), [str(w.message) for w in caught]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _tune(shapes=((64, 64, 64),))  # a tune of the shape replaces the bad entry
    stored = json.loads(path.read_text())["devices"][key]["entries"]
    assert cache.record_problem(stored[cache.entry_key("gemm", torch.float16, 64, 64, 64)]) is None


def test_malformed_peak_is_absent():
    path = cache.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": cache.FORMAT, "devices": {cache.device_key("cpu"): {
        "entries": {}, "peak_tflops": ["float16", 100]}}}))
    with pytest.warns(RuntimeWarning, match="peak_tflops"):
        assert cache.peak_tflops("cpu", torch.float16) is None


def test_tuner_records_pass_the_cache_check():
    _tune()
    (rec,) = cache.entries("cpu").values()
    assert cache.record_problem(rec) is None


def test_every_space_config_has_the_checked_keys():
    from tilewright.autotune import space

    for cfg in space.gemm_configs() + [space.INTERPRETER_CONFIG, space.default_gemm_config(16, 64, 64)]:
        assert tuple(cfg.kwargs) == space.GEMM_CONFIG_KEYS


def test_stale_versions_are_ignored_not_applied():
    _tune()
    data = json.loads(cache.cache_path().read_text())
    key = cache.device_key("cpu")
    stale = key.replace(f"torch {torch.__version__}", "torch 0.0")
    data["devices"] = {stale: data["devices"][key]}
    cache.cache_path().write_text(json.dumps(data))
    assert cache.lookup("gemm", "cpu", torch.float16, *SHAPE) is None
    assert cache.other_devices("cpu") == {stale: 1}
    _tune()  # re-tuning adds this stack's entry beside the stale one
    assert cache.lookup("gemm", "cpu", torch.float16, *SHAPE) and cache.other_devices("cpu") == {stale: 1}


def test_unwritable_cache_dir_warns_and_does_not_crash(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(blocker / "sub"))
    with pytest.warns(RuntimeWarning, match="cannot write"):
        _tune()


def test_plain_progress_line():
    import io

    stream = io.StringIO()
    bar = tuner.make_progress(3, "tune gemm 1x2x3", stream, plain=True)
    for i in range(3):
        bar.update(1, best=f"cfg{i}")
    bar.close()
    assert "tune gemm 1x2x3: 3/3 configs, ETA" in stream.getvalue() and "best cfg2" in stream.getvalue()


def test_tuner_rejects_bad_requests():
    with pytest.raises(tuner.TuneError, match="three positive"):
        tuner.tune_gemm([(1, 2, 0)], timer=_fake_timer(), check=False)
    with pytest.raises(tuner.TuneError, match="cuda"):
        tuner.tune_gemm([SHAPE], backends=["cuda"], timer=_fake_timer(), check=False, progress=False)


# ------------------------------------------------------------------------------------------------ reports
class _Checker(HTMLParser):
    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.tags, self.imgs = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "img":
            self.imgs.append(dict(attrs)["src"])
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def _check_html(path):
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    p = _Checker()
    p.feed(text)
    p.close()
    assert p.errors == [] and p.stack == [], (p.errors, p.stack)
    return p


def test_report_files_columns_and_html(tmp_path):
    pytest.importorskip("matplotlib")
    sweep = _tune(shapes=(SHAPE, (16, 256, 256)))
    paths = report.write_report(sweep, tmp_path / "r")
    df = pd.read_csv(paths["sweep_csv"])
    assert list(df.columns[:len(report.SWEEP_COLUMNS)]) == report.SWEEP_COLUMNS
    assert set(df.backend) == {"peer", "triton"} and (df[df.backend == "peer"].pct_of_peer == 100).all()
    win = pd.read_csv(paths["winners_csv"])
    assert list(win.columns) == report.WINNER_COLUMNS and len(win) == 2
    assert "## Winners per shape" in paths["report_md"].read_text()
    checker = _check_html(paths["report_html"])
    assert checker.tags.count("table") == 2
    pngs = sorted(p.name for p in (tmp_path / "r" / "plots").glob("*.png"))
    assert pngs == ["shapes.png", "tile_orders.png", "tiles_256x512x128.png"]
    assert len(checker.imgs) == 3 and all(s.startswith("data:image/png;base64,") for s in checker.imgs)
    for p in pngs:
        assert (tmp_path / "r" / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # re-render the saved sweep elsewhere: same tables
    again = report.render(tmp_path / "r", tmp_path / "r2")
    assert pd.read_csv(again["winners_csv"]).equals(win)


def test_plots_skipped_cleanly_without_matplotlib(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    paths = report.write_report(_tune(), tmp_path / "r")
    assert not any(k.startswith("plot_") for k in paths) and not (tmp_path / "r" / "plots").exists()
    assert "matplotlib not installed" in paths["report_md"].read_text()
    assert _check_html(paths["report_html"]).imgs == []


def test_bench_report_and_ratio_table(tmp_path):
    rows = []
    for case, ours, peer in (("a/gemm", 1.0, 1.1), ("b/gemm", 2.0, 2.0), ("a/bias", 1.0, 0.5)):
        rows += [dict(op="gemm", case=case, shape="1x1x1", dtype="bf16", provider="tilewright_triton",
                      median_ms=ours, tflops=1.0), dict(op="gemm", case=case, shape="1x1x1", dtype="bf16",
                                                        provider="cublas", median_ms=peer, tflops=1.0)]
    from tilewright.bench.common import add_speedups

    df = add_speedups(pd.DataFrame(rows), {"a/gemm": "cublas", "b/gemm": "cublas", "a/bias": "cublas"})
    ratios = report.ratio_table(df)
    g = ratios[ratios.kind == "gemm"].iloc[0]
    assert g.geomean == pytest.approx((1.1 * 1.0) ** 0.5) and g.cases == 2 and g["min"] == pytest.approx(1.0)
    paths = report.write_bench_report(df, {"card": "cpu-interpreter"}, tmp_path / "b", plots=False)
    assert {"gemm_csv", "ratios_csv", "summary_md", "summary_html"} <= paths.keys()
    assert "say nothing" in paths["summary_md"].read_text()
    _check_html(paths["summary_html"])
    assert report.render(tmp_path / "b", plots=False)["ratios_csv"].exists()


# ------------------------------------------------------------------------------------------------ CLI
@pytest.mark.parametrize("argv, message", [
    (["tune", "--shapes", "4096,4096"], "expected M,N,K"),
    (["tune", "--shapes", "1,2,x"], "expected M,N,K"),
    (["tune", "--shapes", "64,64,64", "--suite", "tiny"], "not allowed with"),
    (["tune", "--backend", "tpu"], "invalid choice"),
    (["tune", "--max-configs", "0"], "positive integer"),
    (["report"], "required: path"),
])
def test_cli_argument_errors_are_clear(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["tune", "--op", "attention"], "implemented for gemm only"),
    (["tune", "--shapes", "64,64,64", "--backend", "cuda"], "backend 'cuda' cannot run"),
    (["report", "/nonexistent/sweep"], "no such file"),
    (["tune", "--shapes", "64,64,64", "--no-report", "--export-table", "/tmp/tw-never-written.json"],
     "a config table is measured on a GPU"),
])
def test_cli_request_errors_exit_2_with_reason(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_cli_tune_rejects_negative_jobs(capsys):
    assert cli.main(["tune", "--shapes", "64,64,64", "--no-report", "--jobs", "-1"]) == 2
    assert "--jobs -1" in capsys.readouterr().err


@pytest.mark.interpreter
def test_precompile_chunk_compiles_every_nth_candidate_without_running_it():
    """A worker of the parallel precompile compiles its share of one shape's candidates (slot k of n: k, k + n, ...)
    through their compile-only call, never their run (a launch would disturb a sweep timing on the same GPU)."""
    compiled, ran = [], []
    real = tuner._triton_candidates

    def spy(a, b, out, max_configs):
        cands = real(a, b, out, max_configs)
        for i, c in enumerate(cands):
            c.compile = (lambda i=i, compile=c.compile: (compiled.append(i), compile())[1])
            c.run = (lambda i=i: ran.append(i))
        return cands

    tuner._triton_candidates = spy
    try:
        assert tuner._precompile_chunk(((48, 64, 40), "float16", "cpu", 1, 2, 4)) == (2, 0, None)
    finally:
        tuner._triton_candidates = real
    assert compiled == [1, 3] and ran == []


def test_launch_gemm_compile_only_needs_a_config_and_launches_nothing_on_the_interpreter():
    """compile_only: a config is required (it names the kernel); on the interpreter there is nothing to compile,
    so the output is left as it was - no launch, no computation."""
    import triton

    from tilewright.triton_kernels.gemm import launch_gemm

    a, b = torch.randn(32, 16, dtype=torch.float16), torch.randn(16, 24, dtype=torch.float16)
    out = torch.full((32, 24), float("nan"), dtype=torch.float16)
    with pytest.raises(ValueError, match="compile_only needs a config"):
        launch_gemm(a, b, out, compile_only=True)
    cfg = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP": 1, "TILE_ORDER": 0, "PERSISTENT": 0,
                         "FLATTEN": 0, "TMA_LOADS": 0, "SPLIT_K": 1}, num_warps=4, num_stages=2)
    assert launch_gemm(a, b, out, config=cfg, compile_only=True) is out
    assert torch.isnan(out).all()


def test_sweep_waits_for_its_shapes_precompile():
    """tune_gemm with ``ready`` events (the multi-GPU parent's pool): a shape is swept only once its event is set;
    a shape whose event is already set goes at once. The second shape's event is set 0.3 s after the first shape's
    last timing, so a sweep that did not wait would time it before the release."""
    import threading

    first, second = (16, 32, 16), (32, 16, 16)
    options = dict(backends=["triton"], check=False, max_configs=1, store=False, reuse=False, progress=False,
                   peak=1.0, log=lambda m: None)
    per_shape = []
    tuner.tune_gemm([first], timer=lambda cand, fn: (per_shape.append(cand.name), 1.0)[1], **options)
    n_first = len(per_shape)  # timings of one shape (the peer and one config)
    ready = {first: threading.Event(), second: threading.Event()}
    ready[first].set()
    swept, released = [], []

    def timer(cand, fn):
        swept.append(time.monotonic())
        return 1.0

    def release():
        while len(swept) < n_first:
            time.sleep(0.01)
        time.sleep(0.3)
        released.append(time.monotonic())
        ready[second].set()

    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    tuner.tune_gemm([first, second], timer=timer, ready=ready, **options)
    releaser.join(5)
    assert released and len(swept) == 2 * n_first
    assert swept[n_first - 1] < released[0] <= swept[n_first]  # the first shape before the release, the second after


@pytest.mark.interpreter
def test_precompile_ahead_sets_every_shape_and_reports(monkeypatch):
    """The single-GPU tune's background pool: every shape's event is set when it is done, the closing line is
    logged, and a pool that fails still sets every event (the sweep then compiles what it needs) and says why."""
    logged = []
    thread, ready = tuner._precompile_ahead([(16, 32, 16), (32, 16, 16)], torch.float16, "cpu", 1, 1, logged.append)
    thread.join(120)
    assert all(e.is_set() for e in ready.values())
    assert any(m.startswith("compiled 2 Triton candidates") for m in logged), logged

    def broken(*args, **kwargs):
        raise OSError("no processes")

    monkeypatch.setattr(tuner, "precompile_triton", broken)
    logged.clear()
    thread, ready = tuner._precompile_ahead([(16, 16, 16)], torch.float16, "cpu", 1, 1, logged.append)
    thread.join(120)
    assert all(e.is_set() for e in ready.values())
    assert logged == ["precompile stopped (OSError: no processes); the sweep compiles what it needs"]


@pytest.mark.interpreter
def test_precompile_runs_in_spawned_workers_and_counts(capsys):
    """The pool itself: spawned workers (they import tilewright afresh, as on the device) compile two capped shapes,
    two chunks each; the count, each worker's start-up times and the closing line come back, and ``on_shape`` (what
    releases a waiting sweep) names each shape once, in order."""
    shapes, seen = [(16, 32, 16), (32, 16, 16)], []
    expected = sum(len(tuner._triton_candidates(torch.empty(M, K, dtype=torch.float16),
                                                torch.empty(K, N, dtype=torch.float16),
                                                torch.empty(M, N, dtype=torch.float16), 2)) for M, N, K in shapes)
    got = tuner.precompile_triton(shapes, torch.float16, "cpu", jobs=2, max_configs=2, progress=False, log=print,
                                  on_shape=seen.append)
    assert got["compiled"] == expected and got["errors"] == 0
    out = capsys.readouterr().out
    assert f"compiled {expected} Triton candidates" in out and "workers started in up to" in out
    assert seen == shapes
    # each worker reports its start once: (imports done, first compile about to begin), seconds after the pool's start
    assert 1 <= len(got["startups"]) <= 2 and all(0 < imported <= first < 120 for imported, first in got["startups"])


def test_report_rejects_unrelated_csv(tmp_path, capsys):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    assert cli.main(["report", str(tmp_path / "x.csv")]) == 2
    assert "neither a tune sweep" in capsys.readouterr().err


@pytest.mark.interpreter
def test_cli_tune_runs_checks_and_reuses_cache(tmp_path, capsys):
    """A real (interpreter) sweep of two configs: outputs checked against the peer, winner stored, then reused."""
    out = tmp_path / "rep"
    assert cli.main(["tune", "--shapes", "48,64,40", "--max-configs", "2", "--out", str(out), "--no-plots"]) == 0
    df = pd.read_csv(out / "sweep.csv")
    tri = df[df.backend == "triton"]
    assert len(tri) == 2 and (tri.status == "ok").all() and (tri.rel_err < 1e-2).all()
    assert cache.lookup("gemm", "cpu", torch.float16, 48, 64, 40)["winner"] == "triton"
    capsys.readouterr()
    assert cli.main(["tune", "--shapes", "48,64,40", "--no-report"]) == 0
    assert "cached: gemm 48x64x40" in capsys.readouterr().out
    assert cli.main(["info"]) == 0
    assert "gemm|float16|M64,N64,K40" in capsys.readouterr().out


@pytest.mark.parametrize("M", [1000, 200, 16])
@pytest.mark.parametrize("use_tma", [True, False])
def test_default_config_fits_shared_memory_for_fp32(M, use_tma):
    """Found by the GPU fuzzer: the 16-bit-sized defaults asked 262,160 bytes of 232,448 for fp32 operands
    (OutOfResources at launch with TILEWRIGHT_AUTOTUNE=0 or M <= 256)."""
    from tilewright.autotune import space

    for in_bytes, out_bytes in ((4, 4), (2, 2), (1, 2)):
        cfg = space.default_gemm_config(M, 3000, 4096, use_tma=use_tma, in_bytes=in_bytes, out_bytes=out_bytes,
                                        tma_store=use_tma)
        assert space.gemm_smem_bytes(cfg, in_bytes, out_bytes, use_tma) <= space.SMEM_OPTIN_BYTES - 1024
    # 16-bit defaults are unchanged (they fit as measured)
    assert space.default_gemm_config(M, 3000, 4096, use_tma=use_tma).num_stages == \
        space.default_gemm_config(M, 3000, 4096, use_tma=use_tma, in_bytes=2, out_bytes=2).num_stages


def test_fp32_operands_get_the_ffma_tiles_and_16_bit_never_do():
    """fp32 dots run on the CUDA cores with a second (slice) accumulator: only the two FFMA tiles that compile without
    spills (test_triton_gemm_aot.py::test_fp32_gemm_sums_each_k_slice_apart) are offered or chosen for fp32, and
    16-bit operands never get them."""
    from tilewright.autotune.space import _FP32_TILES, default_gemm_config, gemm_configs, prune_gemm_configs

    def tile(c):
        kw = c.kwargs
        return (kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], c.num_warps, c.num_stages)

    for M in (16, 300, 4096):
        kept = prune_gemm_configs(gemm_configs(), M, 4096, 4096, 4, 4, tma_store=True)
        assert kept and {tile(c) for c in kept} <= set(_FP32_TILES)
        assert tile(default_gemm_config(M, 4096, 4096, in_bytes=4, out_bytes=4)) in _FP32_TILES
        bf16 = prune_gemm_configs(gemm_configs(), M, 4096, 4096, 2, 2, tma_store=True)
        assert not {tile(c) for c in bf16} & set(_FP32_TILES)


def test_fp16_rmsnorm_prologue_never_gets_a_tile_past_128x128():
    """The fp16 RMSNorm prologue (RESCALE_G) on 128x256 tiles gave NaN / wrong rows on H100 (GPU fuzzer, diag
    2026-11-26: 12 of 12 forced runs wrong, 0 of 156 on 128x128): neither the autotuner nor the default may pick one."""
    from tilewright.autotune.space import default_gemm_config, gemm_configs, prune_gemm_configs

    for M in (300, 4096, 16384):
        kept = prune_gemm_configs(gemm_configs(), M, 4096, 4096, 2, 2, tma_store=True, rescale_g=True)
        assert kept and all(c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] <= 128 * 128 for c in kept)
        d = default_gemm_config(M, 4096, 4096, rescale_g=True)
        assert d.kwargs["BLOCK_M"] * d.kwargs["BLOCK_N"] <= 128 * 128
        # bf16 (no rescale) keeps the large tile, or splits K where 128 x 128 tiles leave SMs idle (M = 300)
        plain = default_gemm_config(M, 4096, 4096).kwargs
        assert plain["BLOCK_N"] == 256 or (M == 300 and plain["SPLIT_K"] > 1)
        assert default_gemm_config(M, 4096, 4096, rescale_g=True).kwargs["SPLIT_K"] == 1


# ------------------------------------------------------------------------------------------------ shipped tables
def _record(bm=128, bn=256, bk=64, warps=8, stages=3):
    return {"winner": "triton", "backends": {"triton": {
        "name": f"{bm}x{bn}x{bk}", "median_ms": 0.1,
        "config": {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP": 8, "TILE_ORDER": 1, "EPI_SPLIT": 4,
                   "TMA_LOADS": True, "PERSISTENT": True, "FLATTEN": False, "num_warps": warps,
                   "num_stages": stages}}}}


def _table(tmp_path, entries, card=None):
    """A table file for this machine's "card" ("cpu" / "cpu-interpreter"), or for ``card``."""
    facts = cache.device_facts("cpu")
    path = tmp_path / f"table-{card or 'here'}.json"
    path.write_text(json.dumps({"format": 1, "card": card or facts["gpu"], "capability": facts["capability"],
                                "source": {}, "entries": entries}))
    from tilewright.autotune import tables
    tables._load.cache_clear()
    return path


def test_full_autotune_is_opt_in(monkeypatch):
    """A new shape costs one compile unless TILEWRIGHT_AUTOTUNE asks for the sweep (full, or 1 as before)."""
    from tilewright._env import full_autotune

    for value, want in ((None, False), ("0", False), ("", False), ("1", True), ("full", True), ("FULL", True)):
        if value is None:
            monkeypatch.delenv("TILEWRIGHT_AUTOTUNE", raising=False)
        else:
            monkeypatch.setenv("TILEWRIGHT_AUTOTUNE", value)
        assert full_autotune() is want, value


def test_table_lookup_exact_nearest_and_out_of_reach(tmp_path):
    from tilewright.autotune import tables

    near, far = _record(128, 128), _record(128, 256)
    path = _table(tmp_path, {"gemm|float16|M4096,N4096,K4096": far, "gemm|float16|M1024,N4096,K4096": near,
                             "gemm|bfloat16|M2048,N4096,K4096": _record(64, 64)})
    assert tables.lookup("gemm", "cpu", torch.float16, 4000, 4096, 4096, path) == far  # bucket M4096: exact
    assert tables.lookup("gemm", "cpu", torch.float16, 4096, 2048, 4096, path) == far  # log2 distance 1 vs 3
    assert tables.lookup("gemm", "cpu", torch.float16, 1000, 4096, 2048, path) == near  # log2 distance 1 vs 3
    assert tables.lookup("gemm", "cpu", torch.float16, 64, 512, 512, path) is None  # far from every entry
    assert tables.lookup("gemm", "cpu", torch.float32, 4096, 4096, 4096, path) is None  # no fp32 entry
    other = _table(tmp_path, {"gemm|float16|M4096,N4096,K4096": far}, card="NVIDIA H200")
    assert tables.lookup("gemm", "cpu", torch.float16, 4096, 4096, 4096, other) is None  # another card's table


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": 2}),
                                     json.dumps({"format": 1, "card": "cpu", "entries": {"bad key": {}}}),
                                     json.dumps({"format": 1, "card": "cpu",
                                                 "entries": {"gemm|float16|M1,N1,K1": {"winner": 3}}})])
def test_unusable_table_warns_and_is_ignored(tmp_path, content):
    from tilewright.autotune import tables

    path = tmp_path / "t.json"
    path.write_text(content)
    tables._load.cache_clear()
    with pytest.warns(UserWarning, match="config table"):
        assert tables.lookup("gemm", "cpu", torch.float16, 1, 1, 1, path) is None


def test_export_round_trip_from_the_tuning_cache(tmp_path):
    """tune -> cache -> export: a valid table for this card whose lookups return what was tuned."""
    from tilewright.autotune import tables

    _tune(fastest=None)
    table = tables.export("cpu", source={"sweep": "test"})
    assert tables.problem(table) is None and table["card"] == cache.device_facts("cpu")["gpu"] and table["entries"]
    path = tmp_path / "exported.json"
    path.write_text(json.dumps(table))
    tables._load.cache_clear()
    assert tables.lookup("gemm", "cpu", torch.float16, *SHAPE, path) == cache.lookup("gemm", "cpu", torch.float16,
                                                                                      *SHAPE)


def test_launch_reuses_the_measured_config_for_every_epilogue(tmp_path, monkeypatch):
    """gemm._tuned_config: the cache first, then the shipped table; an epilogue reuses the plain GEMM's config, and
    one that no longer fits shared memory (TMA-store tile beside 4 stages of fp32 operands) is fitted, not dropped
    for a sweep."""
    from tilewright.autotune import tables
    from tilewright.triton_kernels import gemm

    M, N, K = 4096, 4096, 4096
    path = _table(tmp_path, {"gemm|float32|M4096,N4096,K4096": _record(128, 128, 64, 8, 4),
                             "gemm|float16|M4096,N4096,K4096": _record(128, 256, 64, 8, 3)})
    monkeypatch.setattr(tables, "table_path", lambda device=None: path)
    a16, o16 = torch.empty(M, K, dtype=torch.float16), torch.empty(M, N, dtype=torch.float16)
    cfg = gemm._tuned_config(a16, o16, M, N, K, True, True, False)
    assert (cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], cfg.num_stages) == (128, 256, 3)
    # a periodic residual (pos_embed) keeps 128-row tiles at <= 128x128: the 128x256 winner is not forced on it
    assert gemm._tuned_config(a16, o16, M, N, K, True, True, True) is None
    # fp32 operands: the stored 128x128 tile is no FFMA tile, so the pruner drops it whatever its shared memory
    a32, o32 = torch.empty(M, K), torch.empty(M, N)
    assert gemm._tuned_config(a32, o32, M, N, K, True, True, False) is None
    # a 16-bit winner too deep for shared memory with the store tile: fitted to fewer stages
    deep = _table(tmp_path, {"gemm|float16|M4096,N4096,K4096": _record(128, 256, 64, 8, 6)})
    monkeypatch.setattr(tables, "table_path", lambda device=None: deep)
    cfg = gemm._tuned_config(a16, o16, M, N, K, True, True, False)
    assert cfg is not None and cfg.num_stages < 6 and cfg.kwargs["BLOCK_N"] == 256


def test_mid_m_problems_with_few_large_tiles_also_get_64_row_tiles():
    """M > 256 keeps only the large-tile list, unless 128 x 128 tiles would leave SMs idle (M = 512, N = 2048: 64
    tiles for 132 SMs): then the small list's tiles of >= 64 rows join (never the 16/32-row decode tiles)."""
    from tilewright.autotune.space import FEW_TILES, gemm_configs, prune_gemm_configs

    def tiles(M, N, K):
        return {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in prune_gemm_configs(gemm_configs(), M, N, K, 2, 2,
                                                                                         True)}
    few = tiles(512, 2048, 5632)
    assert (64, 128) in few and (64, 64) in few and (128, 128) in few
    assert not any(bm < 64 for bm, _ in few)
    many = tiles(4096, 4096, 4096)
    assert (64, 128) not in many and (128, 256) in many
    assert (4096 // 128) * (4096 // 128) >= FEW_TILES


def test_short_problems_are_timed_as_graph_replays():
    """Decode rows and problems under 2^36 FLOPs: a candidate's launch (full Python path, explicit config) would set
    the pace of an event-timed loop; large problems keep do_bench."""
    assert tuner.graph_timed(16, 4096, 4096) and tuner.graph_timed(256, 8192, 8192)
    assert tuner.graph_timed(512, 2048, 2048) and tuner.graph_timed(1024, 3000, 1536)
    assert not tuner.graph_timed(4096, 4096, 4096) and not tuner.graph_timed(1024, 4096, 16384)


# ------------------------------------------------------------------------------- several GPUs, a shared cache
def _best_two_way_max(shapes) -> float:
    """The smallest largest load over every split of ``shapes`` in two (brute force)."""
    costs = [tuner.sweep_seconds(s) for s in shapes]
    total, best = sum(costs), float("inf")
    for mask in range(1 << (len(costs) - 1)):  # (the last shape's side fixed: each split counted once)
        side = sum(c for i, c in enumerate(costs) if mask >> i & 1)
        best = min(best, max(side, total - side))
    return best


def test_split_shapes_balances_two_workers_near_the_best_split():
    """Dealing costliest-first then moving / swapping out of the heaviest worker: on the default suite (where
    dealing alone left 35.3 / 40.4 s) and on random suites the largest load is within 3% of the best two-way split
    (brute force), every shape once, each worker's shapes costliest first."""
    import random

    from tilewright.bench.gemm import SUITES

    rng = random.Random(7)
    suites = [list(SUITES["default"].values())]
    suites += [[(rng.choice([16, 128, 1024, 3000, 4096, 8192]), rng.choice([1024, 4096, 5000, 14336, 28672]),
                 rng.choice([1024, 4096, 8192, 28672])) for _ in range(rng.randint(3, 12))] for _ in range(20)]
    for shapes in suites:
        parts = tuner.split_shapes(shapes, 2)
        assert sorted(s for p in parts for s in p) == sorted(tuple(s) for s in shapes)
        for p in parts:
            assert [tuner.sweep_seconds(s) for s in p] == sorted((tuner.sweep_seconds(s) for s in p), reverse=True)
        largest = max(sum(map(tuner.sweep_seconds, p)) for p in parts)
        assert largest <= 1.03 * _best_two_way_max(shapes), (shapes, parts)
    default = tuner.split_shapes(suites[0], 2)
    assert max(sum(map(tuner.sweep_seconds, p)) for p in default) < 38.5


def test_split_shapes_deals_work_evenly():
    shapes = [(4096, 4096, 4096), (2048, 2048, 2048), (2048, 2048, 2048), (1024, 1024, 1024), (64, 64, 64)]
    parts = tuner.split_shapes(shapes, 2)
    assert sorted(s for p in parts for s in p) == sorted(shapes)  # every shape once
    # the decode shape (timed as graph replays) is the costliest sweep: it goes first, the mid shapes balance it
    assert parts[0][0] == (64, 64, 64) and tuner.sweep_seconds((64, 64, 64)) > tuner.sweep_seconds((4096,) * 3)
    loads = [sum(map(tuner.sweep_seconds, p)) for p in parts]
    assert max(loads) - min(loads) <= max(map(tuner.sweep_seconds, shapes))
    # the default suite on two GPUs: both decode shapes no longer land on one worker with most of the others
    from tilewright.bench.gemm import SUITES

    suite = list(SUITES["default"].values())
    parts = tuner.split_shapes(suite, 2)
    loads = [sum(map(tuner.sweep_seconds, p)) for p in parts]
    assert max(loads) <= 0.6 * sum(loads), (parts, loads)
    decode = [sum(m <= tuner.DECODE_MAX_M for m, _, _ in p) for p in parts]
    assert sum(decode) == 2 and all(len(p) < len(q) for p, q, d in zip(parts, parts[::-1], decode) if d == 2)
    shapes = [(1024, 1024, 1024)] * 6 + [(512, 1024, 1024)] * 4
    assert [len(p) for p in tuner.split_shapes(shapes, 2)] == [5, 5]
    assert tuner.split_shapes(shapes[:1], 3)[1:] == [[], []]


def test_multi_gpu_tune_checks_shapes_first_and_never_waits_on_a_dead_worker():
    """A bad shape is refused before any worker starts; a worker that died without a result stops the tune with
    an error naming its device instead of a wait that never ends."""
    import queue
    import types

    with pytest.raises(tuner.TuneError, match="three positive integers"):
        tuner.tune_gemm_multi([(16, 16)], ["cpu"])
    alive, dead = types.SimpleNamespace(exitcode=None, killed=False), types.SimpleNamespace(exitcode=-9, killed=False)
    for p in (alive, dead):
        p.kill = lambda p=p: setattr(p, "killed", True)
    q = queue.Queue()
    q.put(("cuda:0", [], {}, None))
    with pytest.raises(tuner.TuneError, match="cuda:1: the worker process exited without a result"):
        tuner._collect(q, [alive, dead], ["cuda:0", "cuda:1"], poll_s=0.01)
    assert alive.killed and dead.killed
    q.put(("cuda:0", [], {}, None))
    q.put(("cuda:1", [], {}, None))
    assert len(tuner._collect(q, [alive, types.SimpleNamespace(exitcode=0)], ["cuda:0", "cuda:1"], 0.01)) == 2


def test_gpu_list_parsing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert cli._gpu_list(None) == []
    assert cli._gpu_list("all") == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert cli._gpu_list("2") == ["cuda:0", "cuda:1"]
    assert cli._gpu_list("0,3") == ["cuda:0", "cuda:3"]
    assert cli._gpu_list("1,") == ["cuda:1"]  # one index alone
    for bad in ("0,0", "5", "0,4", "x", "0", ","):
        with pytest.raises(tuner.TuneError, match="--gpus"):
            cli._gpu_list(bad)
    with pytest.raises(tuner.TuneError, match="at least 1"):  # (a session's '--gpus 0' meant GPU 0)
        cli._gpu_list("0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cli_gpus_without_cuda_is_a_clear_error(capsys):
    assert cli.main(["tune", "--shapes", "64,64,64", "--no-report", "--gpus", "all"]) == 2
    assert "no CUDA device here" in capsys.readouterr().err


def _entries_of(path):
    return {k for sec in json.loads(path.read_text())["devices"].values() for k in sec["entries"]}


def test_cache_merge_adds_and_newer_tunes_win(tmp_path, capsys):
    mine, theirs = tmp_path / "mine.json", tmp_path / "theirs.json"
    dev = torch.device("cpu")
    old, new = _triton_record("old"), _triton_record("new")
    cache.store_many([("gemm", torch.float16, 256, 256, 256, {**old, "tuned_at": "2026-01-01T00:00:00+00:00"}),
                      ("gemm", torch.float16, 512, 512, 512, {**old, "tuned_at": "2026-06-01T00:00:00+00:00"})],
                     dev, path=mine)
    cache.store_many([("gemm", torch.float16, 256, 256, 256, {**new, "tuned_at": "2026-03-01T00:00:00+00:00"}),
                      ("gemm", torch.float16, 512, 512, 512, {**new, "tuned_at": "2026-02-01T00:00:00+00:00"}),
                      ("gemm", torch.float16, 1024, 1024, 1024, new)], dev, path=theirs)
    assert cache.merge(theirs, path=mine) == (1, 1)  # 1024 added, 256 replaced (later), 512 kept (ours later)
    got = {s: cache.lookup("gemm", dev, torch.float16, s, s, s, path=mine)["backends"]["triton"]["name"]
           for s in (256, 512, 1024)}
    assert got == {256: "new", 512: "old", 1024: "new"}
    assert cache.merge(theirs, path=mine) == (0, 0)  # idempotent
    assert cli.main(["tune", "--merge", str(theirs)]) == 0  # into the autouse fixture's TILEWRIGHT_CACHE_DIR
    assert "3 entries added" in capsys.readouterr().out
    assert len(_entries_of(cache.cache_path())) == 3


@pytest.mark.parametrize("content", ["{not json", '{"format": 99, "devices": {}}', "[1, 2]"])
def test_cache_merge_rejects_what_is_not_a_cache(tmp_path, content, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(ValueError, match="bad.json"):
        cache.merge(bad, path=tmp_path / "mine.json")
    assert cli.main(["tune", "--merge", str(bad)]) == 2
    assert "--merge" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not readable"):
        cache.merge(tmp_path / "missing.json", path=tmp_path / "mine.json")


def test_concurrent_processes_storing_lose_no_entries(tmp_path):
    """Two processes storing different shapes into one cache file at the same time (one per GPU in `tune --gpus`):
    every entry survives (the read-modify-write is locked across processes)."""
    import subprocess
    import textwrap

    path = tmp_path / "shared.json"
    rec = json.dumps(_triton_record("x"))
    code = textwrap.dedent(f"""
        import json, sys, torch
        from tilewright.autotune import cache
        rec, base = json.loads({rec!r}), int(sys.argv[1])
        for i in range(25):  # N exact in the bucket key: 25 entries per process
            cache.store_many([("gemm", torch.float16, 64, 8 * (base + i + 1), 64, rec)], torch.device("cpu"),
                             path={str(path)!r})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(b)]) for b in (0, 1000)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    assert len(_entries_of(path)) == 50


@pytest.mark.interpreter
def test_multi_gpu_compile_pool_size():
    """jobs per device, less one core per sweep worker, capped at MULTI_POOL_MAX (a 30-process pool on a 32-core
    two-GPU host took 13.6 s to its first compile), never below one."""
    assert tuner.multi_pool_size(15, 2, 2, cores=32) == tuner.MULTI_POOL_MAX == 16
    assert tuner.multi_pool_size(4, 2, 2, cores=32) == 8
    assert tuner.multi_pool_size(15, 2, 2, cores=12) == 10
    assert tuner.multi_pool_size(15, 2, 2, cores=2) == 1


def test_tune_gemm_multi_runs_workers_and_merges(tmp_path):
    """The worker path of `tune --gpus` on the interpreter (one device here: 'cpu'): a spawned process tunes its
    share, stores the winners in the shared cache and sends its rows back; a repeated device is refused."""
    logged = []
    sweep = tuner.tune_gemm_multi([(16, 32, 16), (32, 16, 16)], ["cpu"], backends=["triton"], max_configs=1,
                                  dtype=torch.float16, jobs=1, log=logged.append)
    # the candidates were compiled once, by the parent's pool, while the worker started
    assert any(m.startswith("compiled ") and "on 1 processes" in m for m in logged), logged
    assert set(map(tuple, sweep.df[["M", "N", "K"]].drop_duplicates().values.tolist())) == {(16, 32, 16), (32, 16, 16)}
    assert sweep.meta["devices"] == ["cpu"] and sweep.meta["shapes_per_device"] == {"cpu": 2}
    assert cache.lookup("gemm", torch.device("cpu"), torch.float16, 16, 32, 16) is not None
    with pytest.raises(tuner.TuneError, match="distinct"):
        tuner.tune_gemm_multi([(16, 16, 16)], ["cpu", "cpu"])


# ------------------------------------------------------------------------------------------------ finals
def _final_rows(times: dict, peer_ms: float = 2.0):
    """Rows and candidates as _sweep_shape leaves them: the peer first, then ``times`` ({name: sweep ms})."""
    cands = [tuner.Candidate(tuner.PEER_BACKEND, "cublas", {}, lambda: None)]
    cands += [tuner.Candidate("triton", name, {}, lambda: None) for name in times]
    rows = [dict(shape="s", M=8, N=8, K=8, backend=c.backend, config=c.name, median_ms=ms, tflops=1.0, status="ok")
            for c, ms in zip(cands, [peer_ms, *times.values()])]
    return rows, cands


def test_finals_retime_contenders_interleaved_and_keep_the_sweep_time():
    """The contenders (within FINAL_BAND of the fastest, at most FINAL_MAX, fastest first) and the peer are timed
    FINAL_ROUNDS more times, each round in a rotated order; each keeps the median, its sweep time in sweep_ms; a
    config outside the band is not re-timed. A sweep whose drift made the slower config look fastest then stores the
    config that is fastest when both run side by side."""
    band = tuner.FINAL_BAND
    names = [f"c{i}" for i in range(tuner.FINAL_MAX + 2)]
    sweep = {n: 1.0 + band * i / (len(names) + 1) for i, n in enumerate(names)}  # all in the band ...
    sweep["far"] = 1.0 + 2 * band  # ... but this one
    true = {n: 2.0 - 0.1 * i for i, n in enumerate(names)}  # the finals reverse the order: the last contender wins
    rows, cands = _final_rows(sweep)
    calls = []

    def timer(cand, fn):
        calls.append(cand.name)
        return {"cublas": 3.0, **true}[cand.name] + 0.001 * len(calls) % 3  # noise that the median removes

    got = tuner.run_finals(rows, cands, timer, rounds=3)
    contenders = names[:tuner.FINAL_MAX]
    assert [cands[i].name for i in got] == contenders + ["cublas"]
    assert len(calls) == 3 * (len(contenders) + 1) and set(calls) == {*contenders, "cublas"}
    per_round = [calls[r * 5:(r + 1) * 5] for r in range(3)]
    assert per_round[0][0] == contenders[0] and per_round[1][0] == contenders[1]  # rotated
    by_name = {r["config"]: r for r in rows}
    for n in contenders:
        assert by_name[n]["sweep_ms"] == sweep[n] and abs(by_name[n]["median_ms"] - true[n]) < 0.01
        assert by_name[n]["tflops"] == pytest.approx(2 * 8 ** 3 / by_name[n]["median_ms"] / 1e9)
    assert "sweep_ms" not in by_name["far"] and by_name["far"]["median_ms"] == sweep["far"]
    assert "sweep_ms" not in by_name[names[-1]]  # in the band, beyond FINAL_MAX
    win = report.winners(report.analyze(pd.DataFrame(rows)))
    assert win.winner_config[0] == contenders[-1]  # the sweep's fastest (c0) lost side by side


def test_finals_skip_what_they_cannot_compare_and_survive_a_failure():
    rows, cands = _final_rows({"a": 1.0, "b": 1.5})  # one contender in the band: nothing to re-time
    assert tuner.run_finals(rows, cands, lambda c, f: 9.0, rounds=3) == [] and rows[1]["median_ms"] == 1.0
    rows, cands = _final_rows({"a": 1.0, "b": 1.01})
    assert tuner.run_finals(rows, cands, lambda c, f: 9.0, rounds=0) == []
    rows[2]["status"] = "wrong"  # a wrong config is never a contender
    assert tuner.run_finals(rows, cands, lambda c, f: 9.0, rounds=3) == []

    rows, cands = _final_rows({"a": 1.0, "b": 1.01, "c": 1.02})

    def timer(cand, fn):
        if cand.name == "b":
            raise RuntimeError("launch failed")
        return 0.5

    got = tuner.run_finals(rows, cands, timer, rounds=3)
    assert sorted(cands[i].name for i in got) == ["a", "c", "cublas"]
    assert rows[2]["median_ms"] == 1.01 and "sweep_ms" not in rows[2] and rows[1]["median_ms"] == 0.5
    rows, cands = _final_rows({"a": 1.0, "b": 1.01})

    def broken(cand, fn):
        raise RuntimeError("the GPU is gone")
    assert tuner.run_finals(rows, cands, broken, rounds=3) == [] and rows[1]["median_ms"] == 1.0  # every one failed


def test_tune_gemm_stores_the_finals_winner():
    """tune_gemm runs the finals (finals=N; on by default only on a GPU) and the cache keeps their winner."""
    first = _tune(store=False).df.query("backend == 'triton'").sort_values("median_ms").config.tolist()
    loser, winner = first[0], first[1]  # the sweep's fastest and second (fake times, within the band below)
    seen = {}

    def timer(cand, fn):
        seen[cand.name] = seen.get(cand.name, 0) + 1
        if cand.name in (loser, winner):
            return 0.0100 if seen[cand.name] == 1 else (0.0105 if cand.name == loser else 0.0101)
        return 0.05

    sweep = tuner.tune_gemm([SHAPE], timer=timer, check=False, progress=False, peak=10.0, log=lambda *_: None,
                            finals=3)
    assert seen[loser] == seen[winner] == 4
    assert cache.lookup("gemm", "cpu", torch.float16, *SHAPE)["backends"]["triton"]["name"] == winner
    assert report.winners(sweep.df).winner_config[0] == winner
    assert _tune(store=False, reuse=False).df.get("sweep_ms") is None  # off on the interpreter by default


def test_finals_time_each_backends_best_and_winners_compare_finalists_only():
    """Each backend's sweep-best runs in the finals even outside the band, so report.winners can take every
    backend's best from its finalists: a finals-slowed contender is never beaten by another row's stale sweep time."""
    rows, cands = _final_rows({"a": 1.0, "b": 1.01})
    for name, ms in (("x", 1.2), ("y", 1.3)):
        cands.append(tuner.Candidate("cuda", name, {}, lambda: None))
        rows.append(dict(rows[1], backend="cuda", config=name, median_ms=ms))
    finals = {"a": 1.5, "b": 1.6, "x": 1.4, "cublas": 2.5}  # the card slower now; x faster than a side by side
    got = tuner.run_finals(rows, cands, lambda c, f: finals[c.name], rounds=3)
    assert sorted(cands[i].name for i in got) == ["a", "b", "cublas", "x"]  # y: not its backend's best
    win = report.winners(report.analyze(pd.DataFrame(rows)))
    assert (win.winner[0], win.winner_config[0], win.triton_config[0], win.cuda_config[0]) == ("cuda", "x", "a", "x")
    assert win.vs_peer[0] == pytest.approx(2.5 / 1.4)
    rows[1]["median_ms"] = 1.0  # a row not in the finals (no sweep_ms) with a faster stale time ...
    del rows[1]["sweep_ms"]
    win = report.winners(report.analyze(pd.DataFrame(rows)))
    assert win.triton_config[0] == "b" and win.winner_config[0] == "x"  # ... is not compared with the finalists


def test_the_sweep_leaves_out_variants_not_yet_run_on_a_gpu(monkeypatch):
    """gemm_sm90.AB_ONLY (a variant until its GPU tests and A/B ran): not among the swept sm_90a variants - only a
    caller naming it runs it; every other variant that fits is swept (the 192-column tile since its first GPU run)."""
    from tilewright.cuda_fallback import gemm_sm90 as cg

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    fitting = {n for n, v in cg.VARIANTS.items() if v.smem_bytes() <= cg.SMEM_LIMIT}
    assert set(tuner._swept_cuda_variants(torch.device("cpu"))) == fitting - cg.AB_ONLY and "coop128x192s4" in fitting
    monkeypatch.setattr(cg, "AB_ONLY", frozenset({"coop128x192s4"}))
    assert set(tuner._swept_cuda_variants(torch.device("cpu"))) == fitting - {"coop128x192s4"}


def test_cuda_builds_ahead_compile_what_the_sweep_launches(monkeypatch):
    """build_cuda_ahead compiles each sm_90a variant that fits, once, with the defines the sweep's own launch asks
    for (both operands row-major, no epilogue: the same cache key, so the sweep finds it built or waits on its lock);
    a failing build is left for the sweep to record; nothing starts off sm_90 or without a compiler."""
    from tilewright.cuda_fallback import gemm_sm90 as cg
    from tilewright.cuda_fallback.runtime import build, gemm_common

    asked = []
    monkeypatch.setattr(build, "compile_source", lambda source, arch, defines: asked.append((source, arch, defines)))
    a, b = torch.empty(300, 200, dtype=torch.bfloat16), torch.empty(200, 504, dtype=torch.bfloat16)
    fitting = [v for n, v in cg.VARIANTS.items() if v.smem_bytes() <= cg.SMEM_LIMIT and n not in cg.AB_ONLY]
    for v in fitting:  # what the sweep's launch (gemm_common.build_and_map_operands) compiles for its operands
        gemm_common.build_for(cg.SOURCE, "sm_90a", a, b, v, 0, None, 0)
    sweep_builds, asked[:] = sorted(map(repr, asked)), []

    monkeypatch.setattr(tuner, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(build, "compiler_missing", lambda: None)
    thread = tuner.build_cuda_ahead(torch.bfloat16, "cuda", [(4096, 4096, 4096), (1, 1000, 512)])
    thread.join(10)
    assert len(fitting) >= 2 and sorted(map(repr, asked)) == sweep_builds
    # a swept shape whose contiguous output rows are off the 128-byte grid (N 1000 in bf16): its launches take the
    # direct-store builds (gemm_sm90.direct_store), compiled ahead beside the TMA-store ones
    asked[:] = []
    assert cg.direct_store_contiguous(3000, 1000, 2) and not cg.direct_store_contiguous(4096, 4096, 2)
    assert not cg.direct_store_contiguous(1, 1000, 2)
    for v in fitting:
        gemm_common.build_for(cg.SOURCE, "sm_90a", a, b, v, 0, None, 0, extra_defines={"TW_STORE_DIRECT": 1})
    direct_builds, asked[:] = sorted(map(repr, asked)), []
    tuner.build_cuda_ahead(torch.bfloat16, "cuda", [(4096, 4096, 4096), (3000, 1000, 512)]).join(10)
    assert sorted(map(repr, asked)) == sorted(sweep_builds + direct_builds)

    def failing(source, arch, defines):
        raise RuntimeError("nvcc: error")
    monkeypatch.setattr(build, "compile_source", failing)
    tuner.build_cuda_ahead(torch.bfloat16, "cuda").join(10)  # no exception out of the threads

    assert tuner.build_cuda_ahead(torch.float32, "cuda") is None  # no fp32 variant
    monkeypatch.setattr(build, "compiler_missing", lambda: "no nvcc")
    assert tuner.build_cuda_ahead(torch.bfloat16, "cuda") is None
    monkeypatch.setattr(build, "compiler_missing", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    assert tuner.build_cuda_ahead(torch.bfloat16, "cuda") is None
    assert tuner.build_cuda_ahead(torch.bfloat16, "cpu") is None
