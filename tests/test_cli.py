"""CPU tier: the ``tilewright`` verbs on bad input print one line naming what is wrong, never a traceback (issue 12)."""
import json
import warnings

import pytest
import torch

from tilewright import cli
from tilewright.autotune import cache


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "cache"))


def _one_line(text: str) -> str:
    text = text.strip()
    assert text and "Traceback" not in text and text.count("\n") == 0, text
    return text


# ------------------------------------------------------------------------------------------------ arguments
@pytest.mark.parametrize("argv, message", [
    (["bench", "--op", "conv"], "invalid choice"),
    (["tune", "--suite", "bogus"], "invalid choice"),
    (["build-check", "--arch", "sm_80"], "invalid choice"),
    (["tune", "--dtype", "int8"], "invalid choice"),
])
def test_argument_errors_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and argv[1] in err


def test_build_check_unknown_kernel_names_it(capsys):
    assert cli.main(["build-check", "--kernel", "nope.cu"]) == 2
    assert "no kernel source ['nope.cu']" in _one_line(capsys.readouterr().err)


def test_bench_unknown_suite_names_the_flag_and_the_suites(capsys):
    assert cli.main(["bench", "--op", "gemm", "--suite", "bogus"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "--suite 'bogus'" in err and "default, tiny" in err


def test_bench_all_unknown_suite(capsys):
    assert cli.main(["bench", "--op", "all", "--suite", "huge"]) == 2
    assert "--suite 'huge'" in _one_line(capsys.readouterr().err)


# ------------------------------------------------------------------------------------------------ output folders
@pytest.fixture
def blocked_out(tmp_path):
    """An --out path that cannot be a folder, whatever the user's permissions: it runs through a regular file."""
    (tmp_path / "a-file").write_text("x")
    return tmp_path / "a-file" / "out"


def test_bench_unwritable_out(blocked_out, capsys):
    assert cli.main(["bench", "--op", "gemm", "--out", str(blocked_out)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "--out" in err and "a-file is a file, not a folder" in err


def test_tune_unwritable_out_is_refused_before_the_sweep(blocked_out, capsys):
    assert cli.main(["tune", "--shapes", "16,16,16", "--max-configs", "1", "--out", str(blocked_out)]) == 2
    out, err = capsys.readouterr()
    assert "--out" in _one_line(err) and "a-file is a file" in err
    assert cache.entries("cpu") == {}  # refused up front: nothing was tuned


def _bench_csv(path, speedup="1.5"):
    path.write_text("op,case,shape,dtype,provider,median_ms,tflops,peer,speedup\n"
                    f"gemm,a/gemm,1x1x1,fp16,tilewright_triton,1.0,1.0,torch,{speedup}\n"
                    "gemm,a/gemm,1x1x1,fp16,torch,1.5,1.0,torch,1.0\n")
    return path


def test_report_unwritable_out(tmp_path, blocked_out, capsys):
    csv = _bench_csv(tmp_path / "gemm.csv")
    assert cli.main(["report", str(csv), "--out", str(blocked_out), "--no-plots"]) == 2
    assert "a-file is a file" in _one_line(capsys.readouterr().err)


# ------------------------------------------------------------------------------------------------ report inputs
def _write(path, content):
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize("name, content, expect", [
    ("image.csv", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not a readable CSV file"),
    ("empty.csv", "", "not a readable CSV file"),
    ("notes.txt", "just some words\n", "neither a tune sweep nor bench results"),
    ("other.csv", "a,b\n1,2\n", "neither a tune sweep nor bench results"),
    ("typed.csv", None, "column 'speedup' holds 'fast'"),
    ("sweep.csv", "config_json,x\n{},1\n", "not a tilewright sweep"),
    ("sweep.csv", "config_json,shape,backend,config,median_ms\n{},1x1x1,triton,c,slow\n", "column 'median_ms'"),
])
def test_report_bad_input_is_one_line_naming_the_file(tmp_path, capsys, name, content, expect):
    path = _bench_csv(tmp_path / name, speedup="fast") if content is None else _write(tmp_path / name, content)
    assert cli.main(["report", str(path), "--no-plots"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert str(path) in err and expect in err and "expected" in err


def test_report_bad_sweep_meta_names_the_json(tmp_path, capsys):
    (tmp_path / "sweep.csv").write_text("config_json,shape,backend,config,median_ms\n{},1x1x1,triton,c,1.0\n")
    (tmp_path / "sweep.json").write_text("{truncated")
    assert cli.main(["report", str(tmp_path), "--no-plots"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert str(tmp_path / "sweep.json") in err and "not valid JSON" in err


def test_report_missing_file(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "gone.csv")]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "gone.csv: no such file or folder; expected" in err


def test_report_good_bench_csv_still_renders(tmp_path, capsys):
    csv = _bench_csv(tmp_path / "gemm.csv")
    assert cli.main(["report", str(csv), "--no-plots"]) == 0
    assert (tmp_path / "summary.html").exists()


# ------------------------------------------------------------------------------------------------ info
@pytest.mark.parametrize("entry", [[1, 2], 3.5, "winner", {"winner": "triton"},
                                   {"winner": "cuda", "backends": {"cuda": "fast"}},
                                   {"winner": "triton", "backends": {"triton": {"name": "x", "config": {},
                                                                                "median_ms": "0.1"}}}])
def test_info_with_malformed_cache_entry(entry, capsys):
    key = cache.device_key("cpu")
    path = cache.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": cache.FORMAT, "devices": {key: {"entries": {
        cache.entry_key("gemm", torch.float16, 64, 64, 64): entry}}}}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "no tuned shapes for this device" in out
    mine = [w for w in caught if str(path) in str(w.message)]
    assert len(mine) == 1 and "malformed" in str(mine[0].message)


# ------------------------------------------------------------------------------------------------ diag
@pytest.mark.parametrize("argv, message", [
    (["diag", "--what", "bogus"], "invalid choice"),
    (["diag", "--what", "launch", "--shape", "1,2"], "expected M,N,K"),
    (["diag", "--what", "launch", "--kernel", "sm_80"], "invalid choice"),
    (["diag", "--what", "launch", "--group", "0"], "positive integer"),
])
def test_diag_argument_errors_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and argv[-2] in err


@pytest.mark.parametrize("argv, expect", [
    (["diag", "--what", "gemm-sm90", "--variants", "pp128x128s5,nope"], "--variants nope: expected names from"),
    (["diag", "--what", "launch", "--kernel", "rmsnorm_sm90", "--variants", "pp128x128s4"], "coop128x256s3-xf"),
    (["diag", "--what", "attention-sm90", "--variants", "d"], "a, b, b_free, c, c64"),
    (["diag", "--what", "host", "--variants", "a"], "takes no variants"),
    (["diag", "--what", "gemm-sm120", "--cases", "sq4k,huge"], "--cases huge: expected tags from sq4k"),
])
def test_diag_bad_values_are_one_line_exit_2(argv, expect, capsys):
    assert cli.main(argv) == 2
    assert expect in _one_line(capsys.readouterr().err)


def test_diag_unwritable_out(blocked_out, capsys):
    assert cli.main(["diag", "--what", "layers", "--out", str(blocked_out)]) == 2
    assert "a-file is a file" in _one_line(capsys.readouterr().err)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_diag_without_a_device_says_so(capsys):
    assert cli.main(["diag", "--what", "gemm-sm90", "--variants", "pp128x128s5", "--cases", "odd"]) == 1
    assert "needs a CUDA device" in _one_line(capsys.readouterr().err)


def test_diag_every_what_has_a_function():
    from tilewright.tools import diag

    assert all(callable(getattr(diag, "diag_" + w.replace("-", "_"), None)) for w in diag.WHAT)
