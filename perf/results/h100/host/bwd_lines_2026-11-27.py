"""Line-level host time of the GEMM op's backward (an instrumented copy of ops/gemm._backward and plain_gemm),
linear 1000 x 3000 x 1536 with and without a residual; forwards made beforehand, 30 backwards queued per run."""
import importlib, statistics, time
import torch
import tilewright
from tilewright import router
from tilewright.ops import _fast
from tilewright.ops._checks import dense_grad
from tilewright.ops._eager import call_op

g = importlib.import_module("tilewright.ops.gemm")
T = {}


def tick(label, t0):
    t1 = time.perf_counter_ns()
    e = T.setdefault(label, [0, 0])
    e[0] += t1 - t0
    e[1] += 1
    return t1


def plain_gemm(a, b, out_dtype, backend):
    t = time.perf_counter_ns()
    key = None
    if not torch.is_grad_enabled() and _fast.eligible(a, b):
        t = tick("pg.eligible", t)
        key = ("plain", _fast.sig(a), _fast.sig(b), out_dtype, backend, _fast.state())
        t = tick("pg.key", t)
        replay = g._replays.get(key)
        t = tick("pg.get", t)
        if replay is not None:
            r = replay(a.device, a, b)[0]
            tick("pg.replay", t)
            return r
    return call_op(g.gemm_op, a, b, None, None, None, out_dtype, False, backend)[0]


def _backward(ctx, grad_out, grad_preact):
    t = time.perf_counter_ns()
    a, b, preact = ctx.saved_tensors
    t = tick("saved_tensors", t)
    grad_out = dense_grad(grad_out)
    t = tick("dense_grad", t)
    dz = grad_out
    if grad_preact is not None and grad_preact.numel():
        dz = dz + grad_preact
    dz = dz.to(a.dtype)
    t = tick("dz.to", t)
    da = db = dres = None
    needs = ctx.needs_input_grad
    t = tick("needs_input_grad", t)
    if needs[0]:
        bt = b.t()
        t = tick("b.t", t)
        be = router.backward_backend("gemm", ctx.backend, dz, bt, None, None)
        t = tick("backward_backend", t)
        da = plain_gemm(dz, bt, a.dtype, be)
        t = tick("plain_gemm dA", t)
    if needs[1]:
        at = a.t()
        be = router.backward_backend("gemm", ctx.backend, at, dz, None, None)
        t = tick("backward_backend", t)
        db = plain_gemm(at, dz, b.dtype, be)
        t = tick("plain_gemm dB", t)
    if ctx.res_shape is not None and needs[3]:
        dres = grad_out.reshape(ctx.res_shape).to(ctx.res_dtype)
        t = tick("dres", t)
    return da, db, None, dres, None, None, None, None


g.gemm_op._backward_fn = _backward
importlib.import_module("tilewright.ops._eager")._functions.clear()
orig_call = _fast.Replay.__call__


def replay_call(self, device, *inputs):
    t = time.perf_counter_ns()
    outs = [torch.empty_strided(shape, stride, dtype=dtype, device=device) for shape, stride, dtype in self._outputs]
    t = tick("R.alloc", t)
    tensors = [outs[i] if is_out else inputs[i] for is_out, i in self._sources]
    ptrs = tensors if self._takes_tensors else [x.data_ptr() for x in tensors]
    t = tick("R.ptrs", t)
    self._bound(*ptrs)
    t = tick(f"R.launch {type(self._bound).__name__}", t)
    return outs


_fast.Replay.__call__ = replay_call

dev, dt = "cuda", torch.bfloat16
M, N, K = 1000, 3000, 1536
x = torch.randn(M, K, device=dev, dtype=dt, requires_grad=True)
w = (torch.randn(N, K, device=dev, dtype=dt) / K**0.5).requires_grad_()
res = torch.randn(M, N, device=dev, dtype=dt, requires_grad=True)
dy = torch.randn(M, N, device=dev, dtype=dt)
for env in ("1", "0"):
    import os
    os.environ["TILEWRIGHT_CUBLAS"] = env
    for name, f in (("linear", lambda: tilewright.linear(x, w)),
                    ("linear+residual", lambda: tilewright.linear(x, w, residual=res))):
        for _ in range(5):
            f().backward(dy)
        tot = []
        for r in range(12):
            ys = [f() for _ in range(30)]
            torch.cuda.synchronize()
            if r == 2:
                T.clear()
            t0 = time.perf_counter_ns()
            for y in ys:
                y.backward(dy)
            tt = (time.perf_counter_ns() - t0) / 30 / 1e3
            torch.cuda.synchronize()
            if r >= 2:
                tot.append(tt)
        n = 300
        print(f"== {name} TILEWRIGHT_CUBLAS={env}: backward {statistics.median(tot):.1f} us/call")
        for label, (ns, cnt) in sorted(T.items(), key=lambda kv: -kv[1][0]):
            print(f"   {label:<28} {ns / n / 1e3:8.2f} us/call ({cnt / n:.1f})")
        # calibration: torch's own
    for _ in range(3):
        torch.nn.functional.linear(x, w).backward(dy)
    tot = []
    for r in range(12):
        ys = [torch.nn.functional.linear(x, w) for _ in range(30)]
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for y in ys:
            y.backward(dy)
        tot.append((time.perf_counter_ns() - t0) / 30 / 1e3)
        torch.cuda.synchronize()
    print(f"== torch F.linear backward {statistics.median(tot):.1f} us/call")
