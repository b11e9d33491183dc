"""The public ops as single graph nodes for torch.compile: dynamo does not trace their Python, AOT autograd does.

Why: dynamo guards every function and module global it reads while tracing, and a compiled graph checks all of its
guards on every call. Traced through, one tilewright op read ~30-90 guards' worth of argument checks, routing and
call plumbing (8.5-16 us of checking a call on the dev box against 3-7 us for the same computation in torch ops;
the compiled Llama block's cache lookup 94 us against torch's 37 on the H100 host, perf/LOG.md session 18). With
``torch._dynamo.allow_in_graph`` the op is one node of dynamo's graph - guarded only through its tensor arguments -
and AOT autograd runs the same Python on its fake tensors, so the ATen route's formulas, the custom ops and the
checks' errors are what they were - provided the ops know that run for a trace: torch 2.11 leaves
``torch.compiler.is_compiling()`` False there (2.13 does not), hence ``_checks.traced_into_graph``, which also asks
whether the tensors are fake.

How, without importing torch._dynamo at ``import tilewright`` (1.7-2.2 s; a user who never compiles must not pay
it): if it is already imported, the functions are registered now; otherwise a one-shot import hook registers them
right after ``torch._dynamo`` finishes loading - which ``torch.compile`` does before it traces anything.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

_DYNAMO = "torch._dynamo"
_pending: list = []


def _register_all(dynamo) -> None:
    while _pending:
        dynamo.allow_in_graph(_pending.pop())


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for ``torch._dynamo`` it takes the regular spec and has its loader call
    :func:`_register_all` once the module has run. Removes itself on first use."""

    def find_spec(self, name, path, target=None):
        if name != _DYNAMO:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _register_all(module)

        spec.loader.exec_module = exec_module
        return spec


def opaque_to_dynamo(fn):
    """Mark a public op function (tensors and Python constants in, tensors out, no mutation of its inputs) to enter
    torch.compile graphs as one node (module docstring); returns ``fn`` itself."""
    _pending.append(fn)
    dynamo = sys.modules.get(_DYNAMO)
    if dynamo is not None and hasattr(dynamo, "allow_in_graph"):
        _register_all(dynamo)
    elif not any(isinstance(f, _AfterDynamoImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoImport())
    return fn
