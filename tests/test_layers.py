"""CPU tier: one import direction between the runtime and the tools (issue 13, item 3).

The runtime (what ``import tilewright`` and a kernel launch load: ops, router, kernels, CUDA fallback,
``autotune``) never imports a tool (``tools``, ``bench``, ``cli``) nor the tools' optional pandas /
matplotlib - not even inside a function. Checked two ways: by reading every runtime module's imports, and by running
``import tilewright`` plus a kernel in a fresh interpreter where pandas and matplotlib cannot be imported.
"""
import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import tilewright

PACKAGE_DIR = Path(tilewright.__file__).parent
TOOLS = ("tilewright.tools", "tilewright.bench", "tilewright.cli")
OPTIONAL = ("pandas", "matplotlib")
TOOL_PATHS = (PACKAGE_DIR / "tools", PACKAGE_DIR / "bench", PACKAGE_DIR / "cli.py")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """Every module ``source`` (the text of ``module``) may import, anywhere in it: ``import x``, ``from x import y``
    (as ``x`` and ``x.y``, since ``y`` may be a submodule), relative imports resolved, and string literals given to
    ``importlib.import_module`` / ``__import__``. (line, dotted name) pairs."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")):
            found.append((node.lineno, node.args[0].value))
    return found


def _is_tool(name: str) -> bool:
    return any(name == t or name.startswith(t + ".") for t in TOOLS + OPTIONAL)


def _runtime_files() -> list[Path]:
    return [p for p in sorted(PACKAGE_DIR.rglob("*.py"))
            if not any(p == t or t in p.parents for t in TOOL_PATHS)]


def test_scanner_sees_lazy_relative_and_dynamic_imports():
    source = textwrap.dedent("""
        import os
        from . import cache

        def tune():
            from ..tools import tuner
            from ..bench.common import time_ms
            import importlib
            importlib.import_module("tilewright.cli")
            return __import__("pandas")
        """)
    names = {name for _, name in imported_names(source, "tilewright.autotune.space")}
    assert {"tilewright.autotune.cache", "tilewright.tools.tuner", "tilewright.bench.common",
            "tilewright.cli", "pandas"} <= names
    assert [n for n in names if _is_tool(n)] and not _is_tool("tilewright.autotune.cache")


def test_runtime_never_imports_a_tool():
    files = _runtime_files()
    names = {_module_name(p) for p in files}
    assert {"tilewright.router", "tilewright.autotune.cache", "tilewright.autotune.space", "tilewright.ops.gemm",
            "tilewright.triton_kernels.gemm"} <= names
    assert not any(_is_tool(n) for n in names)
    wrong = [f"{p.relative_to(PACKAGE_DIR.parent)}:{line} imports {name}"
             for p in files for line, name in imported_names(p.read_text(), _module_name(p), p.name == "__init__.py")
             if _is_tool(name)]
    assert wrong == [], "runtime modules must not import the tools or their optional dependencies:\n" + \
        "\n".join(wrong)


# A fresh interpreter in which pandas and matplotlib cannot be imported, as in an install without the bench extra.
_WITHOUT_EXTRAS = """
import importlib.abc, io, json, sys, contextlib

class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pandas", "matplotlib"):
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, _Blocked())
import torch
import tilewright

a = torch.randn(33, 40, dtype=torch.float16)
b = torch.randn(40, 24, dtype=torch.float16)
err = ((tilewright.matmul(a, b).float() - a.float() @ b.float()).abs().max() / (a.float() @ b.float()).abs().max())
result = {"after_matmul": sorted(m for m in sys.modules if m.split(".")[0] in ("pandas", "matplotlib")),
          "rel_err": err.item()}
from tilewright import cli

for argv in (["info"], ["bench", "--op", "gemm"], ["tune", "--shapes", "16,16,16"], ["report", "x.csv"]):
    out, errs = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(errs):
        rc = cli.main(argv)
    result[argv[0]] = [rc, errs.getvalue().strip()]
result["at_exit"] = sorted(m for m in sys.modules if m.split(".")[0] in ("pandas", "matplotlib"))
print(json.dumps(result))
"""


def test_import_and_kernel_run_without_pandas_and_matplotlib(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", TILEWRIGHT_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(PACKAGE_DIR.parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_EXTRAS], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["after_matmul"] == [] and got["at_exit"] == []
    assert got["rel_err"] < 2e-2
    assert got["info"][0] == 0  # the diagnostics verb needs no extra
    for verb in ("bench", "tune", "report"):  # the tools name the extra, in one line, no traceback
        rc, err = got[verb]
        assert rc == 1 and err.count("\n") == 0 and "pip install 'tilewright[bench]'" in err, (verb, rc, err)
