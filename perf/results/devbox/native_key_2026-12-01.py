"""Issue 14 on the 2-core dev box (no GPU): the replay key's cost, C (tilewright/_native) against Python
(ops/_fast.python_replay_key), on CPU tensors standing in for CUDA ones (the C key bound with ``is_cpu``, the Python
key's eligibility is ``_fast.eligibility("is_cpu")``; the current device faked) - the key of a linear call (x, weight, no bias, no
residual) and of an attention call (q, k, v). Best of 7 repeats of 20,000 calls each (timeit).

    PYTHONPATH=src TRITON_INTERPRET=0 python perf/results/devbox/native_key_2026-12-01.py"""
import timeit

import torch

from tilewright.ops import _fast

torch._C._cuda_getDevice = lambda: 0
_fast.eligible = _fast.eligibility("is_cpu")
_fast._native_pending = False
c_key = _fast.native_replay_key("is_cpu", block=True)
python_key = _fast.python_replay_key
x, w = torch.randn(4, 8), torch.nn.Parameter(torch.randn(8, 8))
cases = {"linear": (("linear",), (x, w, None, None), ("gelu", None, None)),
         "attention": ((), (x, x, x), (True, None, None, "top_left", None))}
for name, args in cases.items():
    assert python_key(*args) == c_key(*args) is not None
    for label, key in (("python", python_key), ("C", c_key)):
        t = min(timeit.repeat(lambda: key(*args), number=20000, repeat=7)) / 20000 * 1e6
        print(f"{name:9s} {label:6s} key {t:5.2f} us", flush=True)
