"""Host cost per call of one GEMM op through each registration style (no grad), H100 host."""
import inspect, statistics, time, sys
import torch, torch.nn.functional as F
import tilewright
from tilewright.ops.gemm import gemm_op
import torch._library.custom_ops as co
src = inspect.getsource(co).splitlines()
print("\n".join(f"{i+1}: {l}" for i, l in enumerate(src) if 320 <= i + 1 <= 420))
M, N, K = 512, 2048, 2048
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
b = w.t()
impl = gemm_op._init_fn
args = (a, b, None, None, None, torch.bfloat16, False, None)

lib = torch.library.Library("twx", "DEF")
lib.define("gemm(Tensor a, Tensor b, Tensor? bias, Tensor? residual, str? activation, ScalarType out_dtype, bool save_preact, str? backend) -> (Tensor, Tensor)")
lib.impl("gemm", impl, "CUDA")
lib2 = torch.library.Library("twy", "DEF")
lib2.define("gemm(Tensor a, Tensor b, Tensor? bias, Tensor? residual, str? activation, ScalarType out_dtype, bool save_preact, str? backend) -> (Tensor, Tensor)")
lib2.impl("gemm", impl, "CUDA")
torch.library.register_autograd("twy::gemm", gemm_op._backward_fn, setup_context=gemm_op._setup_context_fn)
lib3 = torch.library.Library("twz", "DEF")
lib3.define("gemm(Tensor a, Tensor b, Tensor? bias, Tensor? residual, str? activation, ScalarType out_dtype, bool save_preact, str? backend) -> (Tensor, Tensor)")
lib3.impl("gemm", impl, "CompositeExplicitAutograd")

variants = {
    "F.linear": lambda: F.linear(a, w),
    "tilewright.linear": lambda: tilewright.linear(a, w),
    "torch.ops.tilewright.gemm": lambda: torch.ops.tilewright.gemm.default(*args),
    "impl direct": lambda: impl(*args),
    "Library CUDA impl": lambda: torch.ops.twx.gemm.default(*args),
    "Library CUDA + register_autograd": lambda: torch.ops.twy.gemm.default(*args),
    "Library CompositeExplicitAutograd": lambda: torch.ops.twz.gemm.default(*args),
}
def host(fn, n=1000):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    h = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return h
for grad in (False, True):
    with torch.set_grad_enabled(grad):
        for name, fn in variants.items():
            try:
                hs = [host(fn) for _ in range(5)]
                print(f"grad={grad} {name:>36}: host {statistics.median(hs):7.1f} us/call  (runs {[round(h, 1) for h in hs]})", flush=True)
            except Exception as e:
                print(f"grad={grad} {name:>36}: failed {repr(e)[:200]}", flush=True)
# compiled single op
with torch.no_grad():
    for name, fn in (("compiled F.linear", torch.compile(lambda x: F.linear(x, w))),
                     ("compiled tilewright.linear", torch.compile(lambda x: tilewright.linear(x, w)))):
        hs = [host(lambda: fn(a)) for _ in range(5)]
        print(f"{name:>36}: host {statistics.median(hs):7.1f} us/call", flush=True)
