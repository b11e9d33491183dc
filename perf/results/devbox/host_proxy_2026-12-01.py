"""Issue 14's host path on the 2-core dev box (no GPU): what tilewright.linear's replay hit costs over F.linear when
the call runs alone in a tight loop and when it runs after a model's other calls (an nn.Sequential of 8 modules
between two timed calls: cold caches), and what three alternatives to its key would cost - a one-pass eligibility +
signatures function, a one-function inlined key, a per-weight memo of the route (dev-box prototypes, not landed).
CPU tensors stand in for CUDA ones: the replay's eligibility test is copied with ``is_cpu`` for ``is_cuda`` (the
same attribute cost) and the current device faked, so the hit path is the one a CUDA call takes to its ATen route
(AtenGemm: F.linear). Median of per-call samples, the cases interleaved.

    PYTHONPATH=src TRITON_INTERPRET=0 python perf/results/devbox/host_proxy_2026-12-01.py"""
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import tilewright
from tilewright import backends, router
from tilewright._env import interpreting
from tilewright.autotune import cache as tuning_cache
from tilewright.ops import _aten, _fast, gemm
from tilewright.ops._eager import _PLAIN, traced

torch._C._cuda_getDevice = lambda: 0


def eligible(*tensors):  # ops/_fast.eligible with is_cpu for is_cuda
    if traced():
        return False
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or not t.is_cpu):
            return False
    return not interpreting()


_fast.eligible = eligible
torch.set_grad_enabled(False)
x, w = torch.randn(4, 8), torch.randn(8, 8)
tilewright.linear(x, w)
assert type(gemm._replays[gemm._replay_key(x, w, None, None, None, None, None, "linear")]) is _aten.AtenGemm


def signatures(*tensors):  # eligibility and the signatures in one pass
    if traced() or interpreting():
        return None
    out = []
    for t in tensors:
        if t is None:
            out.append(None)
        elif type(t) in _PLAIN and t.is_cpu:
            ptr = t.data_ptr()
            out.append((t.shape, t.stride(), t.dtype, t.get_device(), ptr % 16, ptr % 128 == 0))
        else:
            return None
    return tuple(out)


def eligible_and_sigs():  # what _replay_key does today for those parts
    if not _fast.eligible(x, w, None, None):
        return None
    s = _fast.sig
    return (s(x), s(w), s(None), s(None))


env, names, _C = os.environ._data, _fast._env_names, torch._C
inlined_cache = {}


def inlined_key(x, w):
    if _C._is_torch_function_mode_enabled() or _C._len_torch_dispatch_stack() or _C._are_functorch_transforms_active():
        return None
    px, pw = x.data_ptr(), w.data_ptr()
    return ("linear", x.shape, x.stride(), x.dtype, x.get_device(), px & 127, w.shape, w.stride(), w.dtype,
            w.get_device(), pw & 127, _C.is_grad_enabled() and (x.requires_grad or w.requires_grad),
            bool(env.keys() & names), tuning_cache.generation, router.epoch, backends.readiness_epoch,
            router._local.backend)


inlined_cache[inlined_key(x, w)] = F.linear


def inlined(x, w):
    return inlined_cache.get(inlined_key(x, w))(x, w, None)


memo = dict(weight=w, wmeta=(w.shape, w.dtype), xmeta=(x.shape, x.stride(), x.dtype, x.get_device()),
            env=bool(env.keys() & names), epoch=(router.epoch, None), route=_aten.AtenGemm(True, None))


def memo_linear(x, weight):
    m = memo
    if (m["weight"] is weight and type(x) in _PLAIN and not traced()
            and (x.shape, x.stride(), x.dtype, x.get_device()) == m["xmeta"] and (weight.shape, weight.dtype) == m["wmeta"]
            and (_C.is_grad_enabled() and (x.requires_grad or weight.requires_grad)) is False
            and bool(env.keys() & names) == m["env"] and (router.epoch, router._local.backend) == m["epoch"]):
        return m["route"](x, weight, None, None)
    return tilewright.linear(x, weight)


blk = nn.Sequential(*[nn.Linear(8, 8) for _ in range(6)], nn.RMSNorm(8), nn.SiLU())
xs = torch.randn(4, 8)
cases = {"F.linear": lambda: F.linear(x, w), "tilewright.linear": lambda: tilewright.linear(x, w),
         "eligible+sigs (today) + F.linear": lambda: (eligible_and_sigs(), F.linear(x, w)),
         "one-pass signatures + F.linear": lambda: (signatures(x, w, None, None), F.linear(x, w)),
         "inlined key + lookup + F.linear": lambda: inlined(x, w),
         "per-weight route memo": lambda: memo_linear(x, w)}
pc = time.perf_counter_ns
for after_other_calls in (False, True):
    fns = list(cases.values())
    samples = [[] for _ in fns]
    for it in range(6000):
        for j in range(len(fns)):
            k = (it + j) % len(fns)
            if after_other_calls:
                blk(xs)
            t = pc()
            fns[k]()
            samples[k].append(pc() - t)
    base = statistics.median(samples[0]) / 1e3
    print(("after a model's other calls" if after_other_calls else "tight loop") + ": " + " | ".join(
        f"{name} {statistics.median(s) / 1e3:.2f} us (+{statistics.median(s) / 1e3 - base:.2f})"
        for name, s in zip(cases, samples)), flush=True)
