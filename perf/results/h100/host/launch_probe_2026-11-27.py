"""Where a bound Triton launch's ~30 us of host go: time each piece of BoundLaunch.__call__ alone (1000 calls, tiny
GEMM so the GPU never limits), beside torch ops as calibration."""
import importlib, statistics, time
import torch
import triton
from triton.runtime import _allocation
import tilewright
from tilewright.triton_kernels import _runtime

gm = importlib.import_module("tilewright.ops.gemm")
dev = "cuda"
a = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)
b = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)
for _ in range(3):
    tilewright.matmul(a, b, backend="triton")
torch.cuda.synchronize()
replay = next(r for r in gm._replays.values())
bound = replay._bound
print("bound:", type(bound).__name__, "direct", getattr(bound, "_direct", None), "scratch", getattr(bound, "_scratch_bytes", None),
      "args", len(bound._template))
out = torch.empty(256, 256, device=dev, dtype=torch.bfloat16)
ptrs = [a.data_ptr(), b.data_ptr(), out.data_ptr()][: len(bound._slots)]

def t(label, fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    s = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        s.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    print(f"{label:<48} {statistics.median(s):7.2f} us")

run = bound._launch
stream = torch._C._cuda_getCurrentRawStream(0)
args = bound._template.copy()
for i, p in zip(bound._slots, ptrs):
    args[i] = p
t("BoundLaunch(*ptrs)", lambda: bound(*ptrs))
t("replay(device, a, b) (alloc + launch)", lambda: replay(a.device, a, b))
t("tilewright.matmul(a, b) (replay hit)", lambda: tilewright.matmul(a, b))
t("torch.matmul(a, b)", lambda: torch.matmul(a, b))
t("torch.mm(a, b, out=out)", lambda: torch.mm(a, b, out=out))
t("out.add_(1)", lambda: out.add_(1))
t("torch.empty_strided", lambda: torch.empty_strided((256, 256), (256, 1), dtype=torch.bfloat16, device=a.device))
t("torch.empty(int8) (scratch alloc)", lambda: torch.empty(bound._scratch_bytes or 1024, device=a.device, dtype=torch.int8))
t("getCurrentRawStream", lambda: torch._C._cuda_getCurrentRawStream(0))
t("knobs hooks .calls", lambda: (triton.knobs.runtime.launch_enter_hook.calls, triton.knobs.runtime.launch_exit_hook.calls))
t("ensure_allocator", _runtime.ensure_allocator)
t("template copy + fill", lambda: [args.copy()])
if bound._direct:
    def c_launch():
        scratch = None
        if bound._scratch_bytes:
            scratch = _allocation._allocator.get()(bound._scratch_bytes, bound._scratch_align, stream)
        run.launch(*bound._grid, stream, bound._function, run.launch_cooperative_grid, run.launch_pdl, scratch, None,
                   bound._packed, None, None, None, *args)
    t("C launch incl scratch alloc", c_launch)
    def c_launch_noscratch():
        run.launch(*bound._grid, stream, bound._function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                   bound._packed, None, None, None, *args)
    if not bound._scratch_bytes:
        t("C launch (no scratch)", c_launch_noscratch)
print("template:", [type(x).__name__ for x in bound._template])
