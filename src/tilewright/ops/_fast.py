"""Eager replay: an op called again with an unchanged signature launches its recorded kernel directly.

Why: an eager call's Python path - argument checks, the router, the launch plan, Triton's JIT dispatch - cost 115-190
us per call on the device's CPU (``tilewright bench --op host``, H100 host), 6-13x torch's own op and longer than the
kernel of a mid-sized GEMM. Nearly all of it re-derives what the previous call with the same signature already knew.

How: the op computes a signature key from its arguments (shapes, strides, dtypes, devices, 16/128-byte alignment of
every pointer, the options, and :func:`state` - the environment switches, the tuning cache generation, the router's
epoch, the forced backend and the current device: everything the checks, the router and the launch plan read; the
GEMM adds whether autograd records, which decides whether its kernel also stores the pre-activation). On a miss it
runs the full path through :func:`run_recorded`; a launcher that knows its launch is replayable reports it with
``_record.record`` as a ``triton_kernels._runtime.BoundLaunch`` and the tensors behind each pointer argument
(``roles``). :func:`build` turns one recorded launch into a :class:`Replay` only when each role is exactly one of the
op's inputs (same pointer: the op made no copy) or one of its outputs - the op says which, nothing is inferred from
equal addresses. A hit allocates the outputs and calls the launch (inside the op's eager autograd.Function when
autograd records, ops/_eager.call_checked).

What never replays (the full path runs every time): a call the full path served with torch's reference formulas (the
gemm op's plain cuBLAS call does replay: ``ops/gemm._TorchGemm``), or with a launch that cannot be bound (fp16
rms_norm_linear's weight scale), or with a copy of an input (a strided bias, a non-unit-stride attention input);
calls that torch.compile / export / a dispatch or function mode / functorch traces, or that take tensor subclasses;
the interpreter. An op whose full path is a designed pipeline of launches (rms_norm_linear's two-pass forward: norm
pass, then the GEMM reading its output) asks for up to that many (``max_launches``); they replay in order when each
of their pointer arguments is an input, an output or a buffer an earlier launch of the call wrote whole (declared by
that launch's ``writes``; the replay allocates it). Every other op replays a single launch: a torch op between two
launches would not be replayed. An error raised by the full path is raised again by the next call with the same
signature, since nothing was recorded.

Under torch.compile each op's ``_replay_key`` returns None before anything else: a traced call never replays, and
where dynamo traces an op's Python (the ops that are not single graph nodes, ops/_opaque.py) it guards every function
and module global the trace reads - checks the compiled graph then runs on every call. Returning in the key function
itself, before :func:`eligible`, keeps ``eligible``, ``traced`` and the key's helpers out of the trace.
"""
from __future__ import annotations

import operator

import torch

from .. import _env, _native, backends, router
from .._env import interpreting
from ..autotune import cache
from . import _aten
from .._record import is_recording, record, recording, tensor_signature
from ._eager import _PLAIN, traced

CACHE_MAX = 4096
_caches: list[dict] = []
_env_names: frozenset | None = None  # the switches' names (bytes on POSIX: _env.set_env)


def new_cache() -> dict:
    """A replay cache for one op (cleared with every other by :func:`invalidate`)."""
    replays: dict = {}
    _caches.append(replays)
    return replays


def invalidate() -> None:
    """Forget every recorded replay (``router.invalidate()`` also makes them unreachable: its epoch is in the key)."""
    for replays in _caches:
        replays.clear()


def store(cache: dict, key, replay) -> None:
    """Keep ``replay`` under ``key``; a full cache is emptied first (a workload with thousands of signatures is not
    one the replay helps, and the full path stays correct)."""
    if len(cache) >= CACHE_MAX:
        cache.clear()
    cache[key] = replay


def eligibility(device_attr: str = "is_cuda"):
    """The replay's eligibility test with ``device_attr`` as each tensor's device check: :func:`eligible` is
    ``eligibility("is_cuda")``; CPU tests and dev-box probes let CPU tensors stand in with ``"is_cpu"`` (the C key
    takes the same name: :func:`native_replay_key`)."""
    on_device = operator.attrgetter(device_attr)

    def eligible(*tensors) -> bool:
        """Whether an eager call on ``tensors`` (None entries skipped) may replay: tensors of plain types on the
        device (CUDA), no tracing (ops/_eager.traced), no interpreter. Autograd is the caller's check."""
        if traced():
            return False
        for t in tensors:
            if t is not None and (type(t) not in _PLAIN or not on_device(t)):
                return False
        return not interpreting()

    return eligible


eligible = eligibility()


sig = tensor_signature  # what a replay depends on in one tensor argument (None stays None)


def python_replay_key(head: tuple, tensors: tuple, tail: tuple):
    """An op's replay key: ``(*head, *signatures of tensors, *tail, records_grad, state())``, or None when the call
    may not replay (:func:`eligible`). ``tensors``: the op's tensor arguments (None entries allowed), all of them
    read for ``records_grad`` (``torch.is_grad_enabled()`` and any of them requires grad); ``head`` / ``tail``: the
    op's name and options, already judged hashable by the op. The caller checks ``torch.compiler.is_compiling()``
    first (where dynamo sees it). :data:`replay_key` is this function or its C twin (tilewright/_native), which
    builds the same tuple; tests compare the two."""
    if _native_pending:
        _adopt_native()
    if not eligible(*tensors):
        return None
    return (*head, *map(sig, tensors), *tail,
            torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors), state())


replay_key = python_replay_key  # the C key once tilewright/_native has loaded it (_adopt_native)
_native_pending = not _native.disabled()
ROUTE_TYPES = (_aten.AtenGemm, _aten.AtenRmsNormLinear, _aten.AtenRmsNormSwigluLinear, _aten.AtenAttention)


def python_hit(cache: dict, head: tuple, tensors: tuple, tail: tuple, tail_types: tuple, capture: bool):
    """An eager call's replay hit, from the key to an ATen route's result - :data:`hit` is this or its C twin
    (tilewright/_native, ``hit``), which returns the same; tests compare them. Returns:

    * None: no replay - an option whose type is not in its ``tail_types`` entry (the same test the op's own key
      function makes: exact types), a call that may not replay (:func:`replay_key`'s None), or no entry;
    * the result of the ATen route stored for the key (:data:`ROUTE_TYPES`) on ``tensors`` - here its
      ``__call__``, in C its ``_steps`` (the same ATen calls as data; its ``__call__`` where it has none);
    * ``(entry, key)`` for any other entry (a kernel :class:`Replay`); ``key[-2]`` says whether autograd records.

    ``capture``: the key starts with ``_aten.capturing(tensors[0])`` (rms_norm_linear's: a CUDA-graph capture keeps
    its kernels); a first tensor of None never replays there. The caller checks ``torch.compiler.is_compiling()``
    first, as for :func:`replay_key`."""
    for item, types in zip(tail, tail_types):
        if type(item) not in types:
            return None
    key = replay_key(head, tensors, tail)
    if key is None or (capture and tensors[0] is None):
        return None
    if capture:
        key = (_aten.capturing(tensors[0]), *key)
    entry = cache.get(key)
    if entry is None:
        return None
    if type(entry) in ROUTE_TYPES:
        return entry(*tensors)
    return entry, key


hit = python_hit  # the C hit once tilewright/_native has loaded it (_adopt_native)


def native_replay_key(device_attr: str = "is_cuda", block: bool = False):
    """The C key bound to this process's objects, or None when the extension is not available (yet:
    ``block=True`` waits for a build in progress; ``_native.status()`` says why). ``device_attr``: the tensor
    attribute that must be true (tests name ``is_cpu`` to compare the two keys on CPU tensors; the binding is the
    module's, so they bind it back to ``is_cuda`` after)."""
    module = _native.load(block)
    if module is None:
        return None
    if _env._environ_bytes is None:
        return None  # (not POSIX: _native does not build there)
    module.configure(_PLAIN, device_attr, _env._environ_bytes, tuple(sorted(_switch_names())), torch._C, cache,
                     router, backends, router._local)
    module.configure_routes(ROUTE_TYPES, _aten)
    return module.replay_key


def native_hit():
    """The C twin of :func:`python_hit`, bound as :func:`native_replay_key` last bound the key (None until the
    extension is loaded)."""
    module = _native.load(False)
    return None if module is None else module.hit


def _adopt_native() -> None:
    """Swap :data:`replay_key` for the C key once the extension is loaded (a build in the background, from the
    first import on a machine, finishes after some calls); stop looking once it is in or cannot come."""
    global replay_key, hit, _native_pending
    if _native.building():
        return
    key = native_replay_key()
    if key is not None:
        replay_key, hit = key, native_hit()
    if key is not None or not _native.building():  # (else: load() has just started the build)
        _native_pending = False


if _native_pending:
    _native.load()  # imports a cached build, or starts building one in the background


def state() -> tuple:
    """Process state every op's full path reads besides its arguments: the router's and the records' environment
    switches, TILEWRIGHT_AUTOTUNE, the ATen route's limit (ops/_aten.py), the tuning cache generation, the router's
    epoch (``router.invalidate()`` bumps it), the backends' readiness epoch (a CUDA family disabled after a failed
    launch stops replaying), a forced backend (``use_backend``), the current device."""
    return (_env.set_env(_env_names or _switch_names()), cache.generation, router.epoch, backends.readiness_epoch,
            router._local.backend, torch._C._cuda_getDevice())


def _switch_names() -> frozenset:
    """The environment switches :func:`state` reads (bytes on POSIX: _env.set_env), computed once."""
    global _env_names
    if _env_names is None:
        names = (*backends.environment(), "TILEWRIGHT_AUTOTUNE", _aten.ENV)
        _env_names = frozenset(n.encode() for n in names) if _env._environ_bytes is not None else frozenset(names)
    return _env_names


class Replay:
    """Allocate the op's outputs (and the scratch buffers its launches pass between them), make the recorded
    launches on the new pointers in order, return the outputs."""

    __slots__ = ("_launches", "_outputs", "_scratch")

    def __init__(self, launches: list[tuple], outputs: list[tuple], scratch: list[tuple] = ()):
        # per launch: (bound, sources, role names, takes tensors, roles it writes whole); a source is (kind, index)
        # with kind 0 an input, 1 an output, 2 a scratch buffer. A launch through torch (the gemm op's cuBLAS path)
        # takes the tensors themselves, a kernel their addresses.
        self._launches = [(bound, sources, roles, getattr(bound, "takes_tensors", False), writes)
                          for bound, sources, roles, writes in launches]
        self._outputs = outputs  # (shape, stride, dtype) of each output
        self._scratch = scratch  # (shape, stride, dtype) of each scratch buffer

    @property
    def bounds(self) -> tuple:
        """The recorded launches, in order (tests look at what a replay holds)."""
        return tuple(bound for bound, *_ in self._launches)

    def impl(self, n_inputs: int):
        """The replay in the op implementation's calling convention: ``impl(*op_args)`` -> tuple of outputs, reading
        the first ``n_inputs`` arguments (tensors at the recorded inputs' addresses, e.g. their 2-D views)."""
        def run(*args):
            return tuple(self(args[0].device, *args[:n_inputs]))
        return run

    def __call__(self, device, *inputs) -> list[torch.Tensor]:
        outs = [torch.empty_strided(shape, stride, dtype=dtype, device=device) for shape, stride, dtype in
                self._outputs]
        scratch = [torch.empty_strided(shape, stride, dtype=dtype, device=device) for shape, stride, dtype in
                   self._scratch]
        pools = (inputs, outs, scratch)
        for bound, sources, roles, takes_tensors, writes in self._launches:
            tensors = [pools[kind][i] for kind, i in sources]
            if takes_tensors:
                bound(*tensors)
            else:
                bound(*[t.data_ptr() for t in tensors])
            if is_recording():  # a caller records its own replay around this one (a public function around its op)
                record(bound, dict(zip(roles, tensors)), writes)
        return outs


def build(launches: list, inputs: dict, outputs: dict, max_launches: int = 1) -> Replay | None:
    """A :class:`Replay` of ``launches`` (in order) whose roles are each in ``inputs`` (``{role: (index, tensor)}``:
    the op's input tensor at that index of the replay's arguments), in ``outputs`` (``{role: (index, tensor)}``: the
    op's returned tensor), or a scratch buffer: a tensor an earlier launch of this call wrote whole (its ``writes``)
    and that is neither. None when anything differs: no launch, an unbound one, a role the op did not name, or a
    role whose tensor is not at the named input's address (a copy the op made - no launch wrote it, so a replay
    could not fill it). ``max_launches``: more than one only for an op whose full path is a designed pipeline of
    recorded launches with no torch op between them that a replay would skip (rms_norm_linear's two passes); every
    other op replays one launch."""
    if not launches or len(launches) > max_launches or any(bound is None for bound, *_ in launches):
        return None
    written_scratch: dict = {}  # data_ptr -> (scratch index, tensor)
    scratch_specs: list = []
    recorded = []
    written = set()
    for bound, roles, *rest in launches:
        writes = rest[0] if rest else ()
        sources = []
        for role, t in roles.items():
            # roles are the kernels' argument names, so two launches may use one name for different tensors (the
            # two-pass norm's a_ptr is x, its GEMM's a_ptr the norm's output): a role is the named input or output
            # only at that tensor's address, else it must be a scratch buffer
            if role in inputs and inputs[role][1] is not None and t.data_ptr() == inputs[role][1].data_ptr():
                sources.append((0, inputs[role][0]))
            elif role in outputs and t.data_ptr() == outputs[role][1].data_ptr():
                i = outputs[role][0]
                sources.append((1, i))
                written.add(i)
            elif t.data_ptr() in written_scratch and written_scratch[t.data_ptr()][1].shape == t.shape and \
                    written_scratch[t.data_ptr()][1].stride() == t.stride():
                sources.append((2, written_scratch[t.data_ptr()][0]))
            elif role in writes:
                written_scratch[t.data_ptr()] = (len(scratch_specs), t)
                scratch_specs.append((tuple(t.shape), t.stride(), t.dtype))
                sources.append((2, len(scratch_specs) - 1))
            else:
                return None
        recorded.append((bound, sources, tuple(roles), tuple(writes)))
    specs = [None] * len(outputs)
    for i, t in outputs.values():
        if t.numel() and i not in written:
            return None  # an output the launches did not write (a torch op made it): a replay would return garbage
        specs[i] = (tuple(t.shape), t.stride(), t.dtype)
    return Replay(recorded, specs, scratch_specs)


def replayed_op(cache: dict, tensors: tuple, roles: tuple, options: tuple, out_roles: tuple, full,
                max_launches: int = 1):
    """The body of a custom op that replays its own signature: ``full()`` (the op's full path, returning its output
    tuple) recorded on a first call, the :class:`Replay` afterwards. ``tensors``: the op's tensor arguments (None
    allowed), ``roles``: the kernel argument each one is (None: not a kernel argument), ``options``: the op's other
    arguments (part of the key), ``out_roles``: the kernel argument each output is. Callers of the op itself - a
    torch.compile'd graph, ``torch.ops.tilewright.*`` - get the replay's cost this way; the public functions keep
    their own replay in front of it (it also skips the dispatcher)."""
    if not eligible(*tensors):
        return full()
    key = (*[sig(t) for t in tensors], *options, state())
    replay = cache.get(key)
    if replay is not None:
        return tuple(replay(tensors[0].device, *tensors))
    return run_recorded(cache, key, full, {r: (i, t) for i, (r, t) in enumerate(zip(roles, tensors)) if r},
                        lambda result: {r: (i, o) for i, (r, o) in enumerate(zip(out_roles, result))}, max_launches)


def run_recorded(cache: dict, key, call, inputs, outputs, max_launches: int = 1, wrap=None):
    """``call()`` (the op's full path) with its launches recorded; stores the :class:`Replay` :func:`build` makes of
    them under ``key`` (when it makes one) and returns ``call()``'s result. ``outputs(result)`` names the outputs'
    roles as :func:`build` takes them; ``inputs`` the inputs' roles, as a dict or a function called after the call (for
    an op whose full path decides which tensor an input role is: rms_norm_linear's folded weight). ``wrap(replay)``, if
    given, makes what is stored of the replay (None: nothing)."""
    with recording() as launches:
        result = call()
    replay = build(launches, inputs() if callable(inputs) else inputs, outputs(result), max_launches)
    if replay is not None and wrap is not None:
        replay = wrap(replay)
    if replay is not None:
        store(cache, key, replay)
    return result
