"""Eager fast path shared by the ops: call a custom op's implementation directly when the dispatcher adds nothing.

Measured on H200 (torch 2.11, `tilewright diag --what host`): going through a Python ``torch.library.custom_op`` costs ~60-80 us
per call (autograd wrapper, redispatch, alias checks) - as long as a 4096^2 x 4096 GEMM runs, so eager callers and
``triton.testing.do_bench`` saw the op's host time rather than its kernel. The registered op is what torch.compile,
export, FakeTensor / functionalization tracing and autograd need; a plain eager call that needs none of them gets
the same result from the implementation itself.
"""
from __future__ import annotations

import torch

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def call_op(op, *args):
    """``op(*args)``, or ``op``'s implementation called directly when that is indistinguishable: not tracing
    (torch.compile / export), no TorchDispatch or TorchFunction mode active (FakeTensor, functionalization, FX proxy),
    every tensor argument a plain tensor (no subclass), and no autograd graph to record."""
    impl = getattr(op, "_init_fn", None)  # CustomOpDef keeps the decorated function (torch >= 2.4)
    if impl is None or torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() \
            or torch._C._is_torch_function_mode_enabled():
        return op(*args)
    grad = torch.is_grad_enabled()
    for t in args:
        if isinstance(t, torch.Tensor) and (type(t) not in _PLAIN or (grad and t.requires_grad)):
            return op(*args)
    return impl(*args)
