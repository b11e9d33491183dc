"""The public ops enter torch.compile graphs as single nodes (ops/_opaque.py): registered with dynamo as soon as it
is imported - never imported by ``import tilewright`` - and guarded like the torch ops they stand for."""
from __future__ import annotations

import io
import logging
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import tilewright

pytestmark = pytest.mark.interpreter


def test_registration_waits_for_dynamo_and_follows_its_import():
    code = (
        "import sys, tilewright\n"
        "assert 'torch._dynamo' not in sys.modules, 'import tilewright imported torch._dynamo'\n"
        "import torch._dynamo\n"
        "from torch._dynamo import trace_rules\n"
        "fns = [tilewright.linear, tilewright.matmul, tilewright.rms_norm_linear, tilewright.flash_attention,\n"
        "       tilewright.scaled_dot_product_attention, tilewright.apply_rotary, tilewright.swiglu]\n"
        "assert all(trace_rules.is_callable_allowed(f) for f in fns)\n"
        "assert not trace_rules.is_callable_allowed(tilewright.flash_attention_with_kvcache)  # mutates its cache\n"
        "from tilewright.ops import _opaque\n"
        "assert not any(isinstance(f, _opaque._AfterDynamoImport) for f in sys.meta_path)  # the hook went\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_registration_when_dynamo_came_first():
    code = ("import torch._dynamo, tilewright\n"
            "from torch._dynamo import trace_rules\n"
            "assert trace_rules.is_callable_allowed(tilewright.linear)\n"
            "import sys\n"
            "from tilewright.ops import _opaque\n"
            "assert not any(isinstance(f, _opaque._AfterDynamoImport) for f in sys.meta_path)  # no hook left behind\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def _guard_count(fn) -> int:
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    log = logging.getLogger("torch._dynamo.guards")
    log.addHandler(handler)
    torch._logging.set_logs(guards=True)
    try:
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(fn, backend="eager", fullgraph=True)()
    finally:
        torch._logging.set_logs()
        log.removeHandler(handler)
        torch._dynamo.reset()
    tree = buf.getvalue()
    tree = tree[tree.find("TREE_GUARD_MANAGER"):]
    return sum(1 for line in tree.splitlines() if "_MATCH" in line or "LAMBDA_GUARD" in line)


def test_a_compiled_op_is_guarded_like_the_torch_ops_it_stands_for():
    """Traced through, tilewright.linear cost dynamo 77 guards (every helper and module global its Python read),
    checked on every call of the compiled graph, against F.linear's 15; as one node it is guarded through its
    tensors alone."""
    x, w, g, r = torch.randn(1, 8, 64), torch.randn(32, 64), torch.rand(64) + 0.5, torch.randn(1, 8, 32)
    assert _guard_count(lambda: tilewright.linear(x, w, residual=r)) <= _guard_count(lambda: F.linear(x, w) + r)
    assert _guard_count(lambda: tilewright.rms_norm_linear(x, g, w, eps=1e-6)) <= \
        _guard_count(lambda: F.linear(F.rms_norm(x, (64,), g, 1e-6), w))
