"""Python cost of one bound CUDA launch (runtime.launch.BoundCudaLaunch.__call__) with the driver call replaced by a
no-op C function (libc's sched_yield, which ignores cuLaunchKernel's arguments and returns 0), beside that bare ctypes
call: what a replayed CUDA op pays in Python per launch on top of the driver's own launch. The argument list is an
attention forward's: three tensor maps and two pointers bound, nine scalars. Optionally a second source tree's
launch module for an A/B: `PYTHONPATH=src python bound_launch_host_2026-11-29.py [path/to/other/launch.py]`
(session 27, dev box: 11.2-13.6 us before the prebuilt parameter array, 6.9-7.3 us after, the bare call 3.4-3.8 us;
during a CI run 14.9-16.4 / 5.3-8.3 / 2.3-3.1)."""
import ctypes
import importlib.util
import sys
import timeit

import torch

from tilewright.cuda_fallback.runtime import launch as current

torch._C._cuda_getCurrentRawStream = lambda device: 0
torch._C._cuda_getDevice = lambda: 0
noop = ctypes.CDLL(None).sched_yield
noop.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3


def bound_launch(module):
    """A BoundCudaLaunch of ``module`` on the no-op driver, its maps already encoded for the addresses called."""
    drv = module._Driver.__new__(module._Driver)
    drv.lib = type("NoOpLib", (), {"cuLaunchKernel": noop})()
    module._driver = drv
    maps = [module.TensorMap() for _ in range(3)]
    args = maps + [ctypes.c_uint64(1 << 20), ctypes.c_uint64(1 << 21)] + [ctypes.c_int(7) for _ in range(9)]
    slots = [(0, "spec"), (1, "spec"), (2, "spec"), (3, None), (4, None)]
    b = module.BoundCudaLaunch(ctypes.c_void_p(1234), (16, 16, 1), 384, 200000, args, slots, 0)
    for i, m in enumerate(maps):  # the cached map entries: (map, its address) now, the map itself before
        entry = (m, ctypes.addressof(m)) if "_params" in module.BoundCudaLaunch.__slots__ else m
        b._maps[i][4096 * (i + 1)] = entry
    return b


modules = {"current": current}
if len(sys.argv) > 1:
    spec = importlib.util.spec_from_file_location("tilewright.cuda_fallback.runtime.other_launch", sys.argv[1])
    modules["other"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(modules["other"])
launches = {name: bound_launch(m) for name, m in modules.items()}
pointers = (4096, 8192, 12288, 1 << 22, 1 << 23)
n = 20000
for _ in range(3):
    row = [f"{name} {min(timeit.repeat(lambda: b(*pointers), number=n, repeat=5)) / n * 1e6:.2f} us"
           for name, b in launches.items()]
    bare = min(timeit.repeat(lambda: noop(1234, 16, 16, 1, 384, 1, 1, 200000, 0, 0, None), number=n, repeat=5)) / n
    print(", ".join(row) + f", bare ctypes call {bare * 1e6:.2f} us")
