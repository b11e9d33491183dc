"""Eager fast path shared by the ops: call a custom op's implementation directly when the dispatcher adds nothing.

Measured on the device (H100 host, torch 2.11, ``tilewright diag --what host``): a call through a Python
``torch.library.custom_op`` costs 60-240 us (autograd wrapper, redispatch, ``fill_defaults``, alias checks) - longer
than the kernel of a mid-sized GEMM. The registered op is what torch.compile, export, FakeTensor / functionalization
tracing and functorch transforms need; a plain eager call gets the same result from:

* the implementation itself, when there is no autograd graph to record;
* a per-op ``torch.autograd.Function`` built from the op's own registered ``setup_context`` and backward, when there
  is: the same saved tensors and the same backward (a double backward differentiates the same ops), without the
  dispatcher round trip. torch builds the same kind of Function inside ``register_autograd``; this one is entered
  directly instead of through the Autograd dispatch key.

Calls that do go through the dispatcher (``torch.ops.tilewright.*``, which is what a torch.compile'd graph runs) get
the same shortcut from :func:`register_fast_dispatch`'s autograd kernel.
"""
from __future__ import annotations

import torch

from . import _dtensor

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_functions: dict = {}


def traced() -> bool:
    """Whether something would need the registered op: torch.compile / export tracing, an active TorchDispatch or
    TorchFunction mode (FakeTensor, functionalization, FX proxies), or a functorch transform (vmap, grad)."""
    return (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
            or torch._C._is_torch_function_mode_enabled() or torch._C._are_functorch_transforms_active())


def _autograd_function(op):
    """The apply of ``op``'s eager autograd.Function (made once): forward(ctx, run, *args) = run(*args), then the op's
    registered setup_context; backward = the op's registered backward. ``run`` is the op's implementation or an
    eager replay of it (ops/_fast.py); as the Function's first input it is cut from ``needs_input_grad`` before the
    registered backward reads it. The old-style forward (ctx first, no ``setup_context`` staticmethod) is deliberate:
    with one, ``Function.apply`` binds the arguments through ``inspect.signature`` on every call (~20 us); functorch,
    which needs the new style, never gets here (:func:`traced`)."""
    fn = _functions.get(op)
    if fn is None:
        setup, backward = op._setup_context_fn, op._backward_fn

        def forward(ctx, run, *args):
            output = run(*args)
            setup(ctx=ctx, inputs=args, output=output)
            # An output the loss does not use (the GEMM's pre-activation, attention's LSE, the norm's rstd) gets a
            # None gradient instead of a materialised zero tensor, which the registered backwards would add or read
            # as a full (M, N) / (B, H, S) pass; the primary output's gradient is still materialised (below).
            ctx.set_materialize_grads(False)
            first = output[0] if isinstance(output, tuple) else output
            ctx.primary = (first.shape, first.dtype, first.device, first.stride())
            return output

        def backward_(ctx, *grads):
            if grads[0] is None:
                shape, dtype, device, stride = ctx.primary
                grads = (torch.empty_strided(shape, stride, dtype=dtype, device=device).zero_(), *grads[1:])
            needs = ctx.needs_input_grad
            ctx.needs_input_grad = needs[1:]
            try:
                grads_in = backward(ctx, *grads)
            finally:
                ctx.needs_input_grad = needs
            return (None, *grads_in) if isinstance(grads_in, tuple) else (None, grads_in)

        cls = type(f"Eager_{getattr(op, '_namespace', 'op')}_{getattr(op, '_name', 'op')}", (torch.autograd.Function,),
                   {"forward": staticmethod(forward), "backward": staticmethod(backward_)})
        # The C-level apply, bound to the class: ``Function.apply``'s Python layer only adds functorch handling
        # (unwrapping dead wrappers of every argument, ~15 us a call here), and functorch never reaches this path.
        fn = super(torch.autograd.Function, cls).apply
        _functions[op] = fn
    return fn


def call_op(op, *args):
    """``op(*args)``, or its eager equivalent when that is indistinguishable: not traced (:func:`traced`) and every
    tensor argument a plain tensor (no subclass). Without autograd recording the implementation is called directly;
    with it, the op's eager autograd.Function wraps the same call. (Replays enter through :func:`call_checked`.)"""
    impl = getattr(op, "_init_fn", None)  # CustomOpDef keeps the decorated function (torch >= 2.4)
    if impl is None or traced():
        for t in args:  # (a DTensor traced by torch.compile reaches the op here, not through _run_direct)
            if isinstance(t, torch.Tensor) and type(t) not in _PLAIN:
                _dtensor.ensure(t)
        return op(*args)
    result = _run_direct(op, impl, args)
    return op(*args) if result is _NOT_DIRECT else result


_NOT_DIRECT = object()


def _run_direct(op, impl, args):
    """The untraced call's shortcut that :func:`call_op` and the dispatch kernel of :func:`register_fast_dispatch`
    share: ``impl(*args)`` when autograd records nothing, the op's eager autograd.Function around it when it does,
    :data:`_NOT_DIRECT` when only the registered op can serve the call (a tensor subclass, or autograd recording an
    op without a registered backward)."""
    record_grad = False
    grad = torch.is_grad_enabled()
    for t in args:
        if isinstance(t, torch.Tensor):
            if type(t) not in _PLAIN:
                _dtensor.ensure(t)  # a DTensor: the ops' sharding strategies, registered on first sight
                return _NOT_DIRECT
            record_grad = record_grad or (grad and t.requires_grad)
    if record_grad:
        if getattr(op, "_backward_fn", None) is None or getattr(op, "_setup_context_fn", None) is None:
            return _NOT_DIRECT
        return _autograd_function(op)(impl, *args)
    return impl(*args)


def call_checked(op, run, record_grad: bool, *args):
    """:func:`call_op` for a caller that has already established what it checks (ops/_fast.py replays: their key
    exists only for untraced calls on plain CUDA tensors): ``run(*args)``, inside the op's eager autograd.Function
    when ``record_grad``."""
    if record_grad:
        return _autograd_function(op)(run, *args)
    return run(*args)


# ----------------------------------------------------------------------------------------------------------------
# The op's own dispatch: what a torch.compile'd graph (and ``torch.ops.tilewright.*``) pays per call
# ----------------------------------------------------------------------------------------------------------------
_dispatch_libs: list = []  # the fragments holding the kernels below (a Library unregisters them when collected)


def register_fast_dispatch(op) -> None:
    """Give ``op`` (a ``torch.library.custom_op``, after its ``register_autograd``) a lean autograd kernel for CPU and
    CUDA tensors.

    Why: a compiled graph calls ``torch.ops.tilewright.<op>`` for every op, and custom_op's own chain - its Autograd
    kernel, a redispatch, the backend wrapper with its alias check and a dynamo-disable wrapper - cost 48 us a call on
    the H100 host against 20 us for the implementation itself (a 512 x 2048 x 2048 GEMM without grad,
    perf/results/h100/host/op_dispatch_2026-11-26_2225_before.txt). That is what made the compiled tilewright
    blocks slower per call than the eager ones.

    How: a kernel registered for the AutogradCPU and AutogradCUDA keys takes precedence over custom_op's kernel for
    the Autograd alias key. For a call :func:`call_op` would run directly (not traced, plain tensors only) it does
    the same: the implementation, or when autograd records, the op's eager autograd.Function (same registered
    setup_context and backward). Anything else - FakeTensors, dispatch modes, functorch, keyword arguments - goes
    to the autograd kernel custom_op itself builds, so tracing sees exactly what it saw before.
    """
    from torch._library.autograd import make_autograd_impl
    from torch._library.utils import fill_defaults

    overload = op._opoverload
    impl = op._init_fn
    schema = overload._schema
    n_args = len(schema.arguments)
    slow = make_autograd_impl(overload, op)

    def kernel(keyset, *args, **kwargs):
        if not kwargs and not traced():
            if len(args) < n_args:  # the dispatcher drops trailing arguments equal to their schema defaults
                args = tuple(fill_defaults(schema, args, {})[0])
            result = _run_direct(op, impl, args)
            if result is not _NOT_DIRECT:
                return result
        return slow(keyset, *args, **kwargs)

    lib = torch.library.Library(op._namespace, "FRAGMENT")
    for key in ("AutogradCPU", "AutogradCUDA"):
        lib.impl(op._name, kernel, key, with_keyset=True)
    _dispatch_libs.append(lib)
