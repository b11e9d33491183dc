"""DTensor arguments (ops/_dtensor.py), CPU tier: a fake two-rank process group (no communication) and a 1-D device
mesh on CPU. Each case hands the op inputs already in a strategy's placements - so DTensor runs it on rank 0's
local shards without moving data - and checks the output's placement and its local shard against the same op on
the full tensors, sliced the way the placement says. What needs real collectives (redistribution, the two-GPU
training runs) belongs to the multi-GPU tier.
"""
import pytest
import torch

import tilewright

dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard  # noqa: E402

R = Replicate()


@pytest.fixture(scope="module")
def mesh():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield init_device_mesh("cpu", (2,))
    finally:
        dist.destroy_process_group()


def dt(t, mesh, placement):
    """``t`` (the full tensor, the same on every rank) as a DTensor of rank 0's shard under ``placement``."""
    return DTensor.from_local(t if placement == R else t.chunk(2, dim=placement.dim)[0], mesh, [placement],
                              run_check=False, shape=t.shape, stride=t.stride())


def local(x):
    return x.to_local()


def half(t, dim):
    return t.chunk(2, dim=dim)[0]


def close(got, want):
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-3, atol=2e-3)


@pytest.fixture(autouse=True, params=["local", "dtensor"])
def route(request, monkeypatch):
    """Every case twice: tensor-parallel projections on the rank's shards (the default, ops/_dtensor.py
    tensor_parallel_*), and through DTensor's dispatch with the sharding rules (``TILEWRIGHT_TP_LOCAL=0``)."""
    monkeypatch.setenv("TILEWRIGHT_ATEN_BELOW", "0")
    monkeypatch.setenv("TILEWRIGHT_TP_LOCAL", "1" if request.param == "local" else "0")
    return request.param


def _gemm_inputs(M=8, K=16, N=32, dtype=torch.float16):
    torch.manual_seed(0)
    return (torch.randn(M, K, dtype=dtype), torch.randn(N, K, dtype=dtype) / 4, torch.randn(N, dtype=dtype),
            torch.randn(M, N, dtype=dtype))


def test_linear_column_parallel_with_the_whole_epilogue(mesh):
    """Weight sharded over output features (ColwiseParallel): bias and residual follow, the fused GELU + residual
    epilogue is exact on every shard."""
    x, w, b, r = _gemm_inputs()
    y = tilewright.linear(dt(x, mesh, R), dt(w, mesh, Shard(0)), dt(b, mesh, Shard(0)), residual=dt(r, mesh, Shard(1)),
                          activation="gelu")
    assert isinstance(y, DTensor) and y.placements == (Shard(1),)
    close(local(y), half(tilewright.linear(x, w, b, residual=r, activation="gelu"), 1))


def test_uneven_shards_keep_the_global_shape(mesh):
    """N = 31 output features over two ranks (16 + 15) column-parallel, K = 23 over two (12 + 11) row-parallel: the
    output's global shape is the full one and rank 0's shard its first chunk, on both routes."""
    torch.manual_seed(9)
    x, w, b = torch.randn(8, 24, dtype=torch.float16), torch.randn(31, 24, dtype=torch.float16) / 4, \
        torch.randn(31, dtype=torch.float16)
    y = tilewright.linear(dt(x, mesh, R), dt(w, mesh, Shard(0)), dt(b, mesh, Shard(0)), activation="relu")
    assert y.shape == (8, 31) and y.placements == (Shard(1),)
    close(local(y), half(tilewright.linear(x, w, b, activation="relu"), 1))
    x2, w2 = torch.randn(8, 23, dtype=torch.float16), torch.randn(16, 23, dtype=torch.float16) / 4
    y = tilewright.linear(dt(x2, mesh, Shard(1)), dt(w2, mesh, Shard(1)))
    assert y.shape == (8, 16) and y.placements == (Partial(),)
    close(local(y), half(x2, 1) @ half(w2, 1).t())


def test_linear_row_parallel_gives_partial_sums(mesh):
    """Input and weight sharded over K (RowwiseParallel) without an epilogue: each rank's partial product, reduced
    by DTensor when the result is used."""
    x, w, _, _ = _gemm_inputs()
    y = tilewright.linear(dt(x, mesh, Shard(1)), dt(w, mesh, Shard(1)))
    assert y.placements == (Partial(),)
    close(local(y), half(x, 1) @ half(w, 1).t())


def test_linear_row_parallel_never_fuses_the_epilogue_into_partial_sums(mesh):
    """With a bias or an activation, a K-sharded product has no strategy: the op must not return act(partial) +
    bias as a Partial placement (the sum over ranks would add the bias twice and apply GELU to partial sums)."""
    x, w, b, _ = _gemm_inputs()
    for kwargs in ({"bias": dt(b, mesh, R)}, {"activation": "relu"}):
        y = tilewright.linear(dt(x, mesh, Shard(1)), dt(w, mesh, Shard(1)), **kwargs)
        assert not any(isinstance(p, Partial) for p in y.placements), kwargs


def _tilewright_ops_seen_with_dtensors(fn):
    """The tilewright ops that reached DTensor's dispatch while ``fn`` (forward and backward) ran."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    seen = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "tilewright" and any(isinstance(a, DTensor) for a in tree_leaves((args, kwargs))):
                seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Watch():
        fn()
    return seen


def test_tensor_parallel_projections_skip_dtensor_dispatch(mesh, route):
    """Column-parallel linear / rms_norm_linear and row-parallel linear with its epilogue, forward and backward:
    on the local route no tilewright op sees a DTensor (DTensor's dispatch of a custom op and of its backward cost
    0.2-1.2 ms of host a call); on the DTensor route every one does. Values and placements are the other tests'."""
    x, w, b, r = _gemm_inputs()
    g = torch.rand(16, dtype=torch.float16) + 0.5

    def column():
        wd = dt(w, mesh, Shard(0)).requires_grad_(True)
        y = tilewright.linear(dt(x, mesh, R).requires_grad_(True), wd, dt(b, mesh, Shard(0)), activation="gelu")
        z = tilewright.rms_norm_linear(dt(x, mesh, R), dt(g, mesh, R).requires_grad_(True), wd)
        (y.to_local().sum() + z.to_local().sum()).backward()

    def row():
        wd = dt(w, mesh, Shard(1)).requires_grad_(True)
        y = tilewright.linear(dt(x, mesh, Shard(1)).requires_grad_(True), wd, dt(b, mesh, R), residual=dt(r, mesh, R))
        assert y.placements == (R,)
        y.to_local().sum().backward()

    for case in (column, row):
        seen = _tilewright_ops_seen_with_dtensors(case)
        assert (not seen) if route == "local" else seen, (case.__name__, seen)


def test_calls_differing_only_in_options_are_not_confused(mesh, monkeypatch):
    """DTensor caches a strategy - and the argument list it hands the local op - per call signature; torch's
    register_sharding left non-tensor arguments out of that key for ops without an int argument, so a GELU call
    after a plain one with the same tensors ran without the GELU, and a backward that needed dx after one that did
    not returned an empty dx. Both on DTensor's route (the local route never asks DTensor)."""
    monkeypatch.setenv("TILEWRIGHT_TP_LOCAL", "0")
    x, w, b, _ = _gemm_inputs(M=8, K=16, N=24)  # a shape no other case uses: this case's calls are the first
    xd, wd, bd = dt(x, mesh, R), dt(w, mesh, Shard(0)), dt(b, mesh, Shard(0))
    for activation in (None, "gelu", "relu"):
        y = tilewright.linear(xd, wd, bd, activation=activation)
        close(local(y), half(tilewright.linear(x, w, b, activation=activation), 1))
    g = torch.rand(16, dtype=torch.float16) + 0.5
    for x_grad in (False, True):
        xg = dt(x, mesh, R).requires_grad_(x_grad)
        gd = dt(g, mesh, R).requires_grad_(True)
        tilewright.rms_norm_linear(xg, gd, wd.detach().requires_grad_(True)).to_local().sum().backward()
        assert (xg.grad is not None) == x_grad and gd.grad is not None
        if x_grad:
            xf = x.clone().requires_grad_(True)
            tilewright.rms_norm_linear(xf, g, half(w, 0)).sum().backward()
            close(local(xg.grad), xf.grad)


def test_linear_rows_sharded(mesh):
    """Sequence / data parallel: rows of x sharded, weight replicated."""
    x, w, b, _ = _gemm_inputs()
    y = tilewright.linear(dt(x, mesh, Shard(0)), dt(w, mesh, R), dt(b, mesh, R), activation="silu")
    assert y.placements == (Shard(0),)
    close(local(y), half(tilewright.linear(x, w, b, activation="silu"), 0))


def test_linear_column_parallel_weight_gradient(mesh):
    """Backward through the op on DTensors: the gradient of a column-sharded weight is its own shard's gradient
    (computed locally; no collective needed for it)."""
    x, w, b, _ = _gemm_inputs()
    wd = dt(w, mesh, Shard(0)).requires_grad_(True)
    y = tilewright.linear(dt(x, mesh, R), wd, dt(b, mesh, Shard(0)), activation="gelu")
    y.sum().backward()
    assert wd.grad.placements == (Shard(0),)
    wf = w.clone().requires_grad_(True)
    tilewright.linear(x, wf, b, activation="gelu").sum().backward()
    close(local(wd.grad), half(wf.grad, 0))


def test_attention_heads_sharded(mesh):
    """Heads sharded (GQA 4 / 2 -> 2 / 1 per rank): output and LSE sharded the same way, values of the local heads."""
    torch.manual_seed(1)
    q = torch.randn(1, 4, 16, 16, dtype=torch.float16)
    k, v = torch.randn(1, 2, 16, 16, dtype=torch.float16), torch.randn(1, 2, 16, 16, dtype=torch.float16)
    out, lse = tilewright.flash_attention(dt(q, mesh, Shard(1)), dt(k, mesh, Shard(1)), dt(v, mesh, Shard(1)),
                                          causal=True, return_lse=True)
    assert out.placements == (Shard(1),) and lse.placements == (Shard(1),)
    want, want_lse = tilewright.flash_attention(q, k, v, causal=True, return_lse=True)
    close(local(out), half(want, 1))
    close(local(lse), half(want_lse, 1))


def test_attention_batch_sharded_backward(mesh):
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 2, 16, 16, dtype=torch.float16) for _ in range(3))
    qd, kd, vd = (dt(t, mesh, Shard(0)).requires_grad_(True) for t in (q, k, v))
    out = tilewright.flash_attention(qd, kd, vd)
    assert out.placements == (Shard(0),)
    out.sum().backward()
    qf, kf, vf = (t.clone().requires_grad_(True) for t in (q, k, v))
    tilewright.flash_attention(qf, kf, vf).sum().backward()
    for got, want in ((qd, qf), (kd, kf), (vd, vf)):
        assert got.grad.placements == (Shard(0),)
        close(local(got.grad), half(want.grad, 0))


def test_swiglu_rows_sharded(mesh):
    torch.manual_seed(3)
    x = torch.randn(6, 2, 16, dtype=torch.float16)
    y = tilewright.swiglu(dt(x, mesh, Shard(0)))
    assert y.placements == (Shard(0),)
    close(local(y), half(tilewright.swiglu(x), 0))


def test_rotary_heads_sharded(mesh):
    torch.manual_seed(4)
    x = torch.randn(1, 8, 4, 16, dtype=torch.float16)
    cos, sin = torch.rand(8, 8, dtype=torch.float16), torch.rand(8, 8, dtype=torch.float16)
    y = tilewright.apply_rotary(dt(x, mesh, Shard(2)), dt(cos, mesh, R), dt(sin, mesh, R))
    assert y.placements == (Shard(2),)
    close(local(y), half(tilewright.apply_rotary(x, cos, sin), 2))


def test_rms_norm_linear_column_parallel_and_rows_sharded(mesh):
    torch.manual_seed(5)
    x, w, b, _ = _gemm_inputs()
    g = torch.rand(16, dtype=torch.float16) + 0.5
    y = tilewright.rms_norm_linear(dt(x, mesh, R), dt(g, mesh, R), dt(w, mesh, Shard(0)), dt(b, mesh, Shard(0)))
    assert y.placements == (Shard(1),)
    want = tilewright.rms_norm_linear(x, g, w, b)
    close(local(y), half(want, 1))
    y = tilewright.rms_norm_linear(dt(x, mesh, Shard(0)), dt(g, mesh, R), dt(w, mesh, R), dt(b, mesh, R))
    assert y.placements == (Shard(0),)
    close(local(y), half(want, 0))


def test_rms_norm_linear_column_parallel_backward_moves_no_data(mesh):
    """Column-parallel backward: du = dy @ W over the rank's output features is a Partial sum, so dx and dg come
    back Partial (reduced where used, as torch's ColwiseParallel input gradient is) and dW stays the rank's shard -
    no collective inside the backward. A missing strategy showed on two GPUs as an all-to-all, an all-gather and
    a reduce-scatter per call (tensor-parallel training at 0.57x torch's tokens/s)."""
    from torch.distributed.tensor.debug import CommDebugMode

    torch.manual_seed(7)
    x, w, b, _ = _gemm_inputs()
    g = torch.rand(16, dtype=torch.float16) + 0.5
    xd, gd, wd = dt(x, mesh, R).requires_grad_(), dt(g, mesh, R).requires_grad_(), dt(w, mesh, Shard(0))
    wd.requires_grad_()
    y = tilewright.rms_norm_linear(xd, gd, wd, dt(b, mesh, Shard(0)))
    with CommDebugMode() as comm:
        y.to_local().sum().backward()  # (ColwiseParallel's local output: the gradient arrives column-sharded)
    assert comm.get_total_counts() == 0, comm.get_comm_counts()
    assert xd.grad.placements == (Partial(),) and gd.grad.placements == (Partial(),)
    assert wd.grad.placements == (Shard(0),)
    # rank 0's share: the gradients of the half model (its output features only)
    xf, gf, wf = (t.clone().requires_grad_(True) for t in (x, g, half(w, 0)))
    tilewright.rms_norm_linear(xf, gf, wf, half(b, 0)).sum().backward()
    close(local(xd.grad), xf.grad)
    close(local(gd.grad), gf.grad)
    close(local(wd.grad), wf.grad)


@pytest.mark.parametrize("rowwise", [False, True])
def test_scaled_mm_column_rows_and_k_sharded(mesh, rowwise):
    """FP8 GEMM on DTensors: column-parallel with the bias and a rowwise scale_b following, rows sharded with a
    rowwise scale_a, and K-sharded into Partial sums (no bias); each shard equal to the full op sliced."""
    torch.manual_seed(8)
    M, K, N = 8, 32, 16
    a = (torch.randn(M, K) * 2).to(torch.float8_e4m3fn)
    b = torch.randn(N, K).to(torch.float8_e4m3fn).t()  # K-major
    sa = torch.rand(M if rowwise else 1) + 0.5
    sb = torch.rand(N if rowwise else 1) + 0.5
    bias = torch.randn(N, dtype=torch.bfloat16)
    want = tilewright.scaled_mm(a, b, sa, sb, bias=bias)
    per = lambda placement: placement if rowwise else R
    y = tilewright.scaled_mm(dt(a, mesh, R), dt(b, mesh, Shard(1)), dt(sa, mesh, R), dt(sb, mesh, per(Shard(0))),
                             bias=dt(bias, mesh, Shard(0)))
    assert y.placements == (Shard(1),)
    close(local(y), half(want, 1))
    y = tilewright.scaled_mm(dt(a, mesh, Shard(0)), dt(b, mesh, R), dt(sa, mesh, per(Shard(0))), dt(sb, mesh, R),
                             bias=dt(bias, mesh, R))
    assert y.placements == (Shard(0),)
    close(local(y), half(want, 0))
    y = tilewright.scaled_mm(dt(a, mesh, Shard(1)), dt(b, mesh, Shard(0)), dt(sa, mesh, R), dt(sb, mesh, R))
    assert y.placements == (Partial(),)
    close(local(y), tilewright.scaled_mm(half(a, 1), half(b, 0), sa, sb))


# --------------------------------------------------------------------------------------------- modules
class _MLP(torch.nn.Module):
    def __init__(self, device=None):
        super().__init__()
        kw = {"dtype": torch.float16, "device": device}
        self.norm_up = tilewright.nn.RMSNormLinear(16, 32, **kw)
        self.down = tilewright.nn.Linear(16, 16, bias=False, **kw)  # after swiglu's 32 -> 16

    def forward(self, x):
        return self.down(tilewright.swiglu(self.norm_up(x)))


def test_parallelize_module_colwise_rowwise(mesh):
    """torch's tensor-parallel plan on tilewright.nn.Linear (an nn.Linear subclass): ColwiseParallel shards the
    up projection's weight over output features, RowwiseParallel the down projection's over input features; the
    rank's result is its partial product (the fake process group's all-reduce leaves it as is)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(6)
    up = tilewright.nn.Linear(16, 32, activation="gelu", dtype=torch.float16)
    down = tilewright.nn.Linear(32, 16, bias=False, dtype=torch.float16)
    model = torch.nn.Sequential(up, down)
    ref_up, ref_down = up.weight.detach().clone(), down.weight.detach().clone()
    ref_bias = up.bias.detach().clone()
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
    assert up.weight.placements == (Shard(0),) and down.weight.placements == (Shard(1),)
    x = torch.randn(2, 4, 16, dtype=torch.float16)
    y = model(x)
    h = tilewright.linear(x, ref_up, ref_bias, activation="gelu")
    close(y, half(h, -1) @ half(ref_down, 1).t())
    y.float().sum().backward()
    assert up.weight.grad.placements == (Shard(0),) and down.weight.grad.placements == (Shard(1),)


@pytest.mark.parametrize("bias", [False, True])
def test_rms_norm_linear_module_column_parallel(mesh, bias):
    """tilewright.distributed.ColwiseParallel on an RMSNormLinear module (torch's style refuses anything but
    nn.Linear / nn.Embedding): weight and bias Shard(0), norm weight Replicate; the rank's output columns equal the
    full module's; the weight's gradient is its shard's, the norm weight's a Partial sum (rank 0's share here: the
    fake process group reduces nothing)."""
    from torch.distributed.tensor.parallel import parallelize_module

    from tilewright.distributed import ColwiseParallel

    torch.manual_seed(10)
    module = tilewright.nn.RMSNormLinear(16, 32, bias=bias, dtype=torch.float16)
    with torch.no_grad():
        module.norm_weight.copy_(torch.rand(16, dtype=torch.float16) + 0.5)
    full = {name: p.detach().clone() for name, p in module.named_parameters()}
    parallelize_module(module, mesh, ColwiseParallel())
    assert module.weight.placements == (Shard(0),) and module.norm_weight.placements == (R,)
    assert not bias or module.bias.placements == (Shard(0),)
    x = torch.randn(2, 4, 16, dtype=torch.float16)
    y = module(x)
    assert not isinstance(y, DTensor)  # (use_local_output, as for nn.Linear)
    want = tilewright.rms_norm_linear(x, full["norm_weight"], full["weight"], full.get("bias"))
    close(y, half(want, -1))
    y.float().sum().backward()
    assert module.weight.grad.placements == (Shard(0),) and module.norm_weight.grad.placements == (Partial(),)
    gf, wf = full["norm_weight"].clone().requires_grad_(True), half(full["weight"], 0).clone().requires_grad_(True)
    bf = half(full["bias"], 0) if bias else None
    tilewright.rms_norm_linear(x, gf, wf, bf).float().sum().backward()
    close(local(module.weight.grad), wf.grad)
    close(local(module.norm_weight.grad), gf.grad)


def test_colwise_style_still_takes_a_plain_linear(mesh):
    """The extended style partitions any other module as torch's ColwiseParallel does."""
    from torch.distributed.tensor.parallel import parallelize_module

    from tilewright.distributed import ColwiseParallel

    lin = tilewright.nn.Linear(16, 32, dtype=torch.float16)
    parallelize_module(lin, mesh, ColwiseParallel())
    assert lin.weight.placements == (Shard(0),) and lin.bias.placements == (Shard(0),)
    with pytest.raises(NotImplementedError):
        parallelize_module(torch.nn.LayerNorm(16), mesh, ColwiseParallel())


def test_fully_shard_tilewright_modules(mesh):
    """FSDP2 on tilewright modules: parameters sharded as DTensors, a forward and backward, DTensor gradients and
    state_dict entries; no 'returned a view tensor' warning (the ops' outputs are not views:
    ops/_checks.output_view)."""
    import warnings

    from torch.distributed.fsdp import fully_shard

    model = _MLP()
    for layer in (model.norm_up, model.down):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert all(isinstance(p, DTensor) and p.placements == (Shard(0),) for p in model.parameters())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = model(torch.randn(2, 3, 16, dtype=torch.float16))
        y.float().sum().backward()
    assert not [w for w in caught if "view tensor" in str(w.message)], [str(w.message) for w in caught]
    assert y.shape == (2, 3, 16)
    assert all(isinstance(p.grad, DTensor) for p in model.parameters())
    assert all(isinstance(v, DTensor) for v in model.state_dict().values())


def test_meta_device_build_then_reset_parameters():
    """Deferred initialisation (FSDP2's meta-device recipe): build on meta, to_empty, reset_parameters - the
    modules' initialisation matches a direct build's distribution (norm weight ones, weight / bias within nn.Linear's
    bounds), and a state_dict round trip restores the values exactly."""
    model = _MLP(device="meta")
    assert all(p.is_meta for p in model.parameters())
    model.to_empty(device="cpu")
    for m in model.modules():
        if hasattr(m, "reset_parameters") and m is not model:
            m.reset_parameters()
    assert torch.equal(model.norm_up.norm_weight, torch.ones(16, dtype=torch.float16))
    bound = 1 / 16 ** 0.5
    assert model.norm_up.weight.abs().max() <= bound and model.norm_up.bias.abs().max() <= bound
    assert model.norm_up.weight.std() > bound / 4  # initialised, not left at to_empty's garbage or zeros
    other = _MLP()
    other.load_state_dict(model.state_dict())
    x = torch.randn(2, 16, dtype=torch.float16)
    assert torch.equal(other(x), model(x))


def test_op_outputs_are_not_views():
    """A 3-D call's output is the op's own output reshaped, not a view of it (like F.linear's): an in-place add on
    it keeps gradients right."""
    torch.manual_seed(7)
    x = torch.randn(2, 3, 16, requires_grad=True)
    w = (torch.randn(8, 16) / 4).requires_grad_(True)
    y = tilewright.linear(x, w, activation="gelu")
    assert not y._is_view()
    y.add_(1.0)
    y.float().square().sum().backward()
    xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    yr = torch.nn.functional.gelu(xr @ wr.t())
    yr.add_(1.0)
    yr.float().square().sum().backward()
    close(x.grad, xr.grad)
    close(w.grad, wr.grad)


_FIRST_CONTACT_COMPILED = r'''
import os
os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
os.environ["TILEWRIGHT_TP_LOCAL"] = "0"
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
import tilewright

dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
mesh = init_device_mesh("cpu", (2,))
def dt(t, p):
    return DTensor.from_local(t if p == Replicate() else t.chunk(2, dim=p.dim)[0], mesh, [p], run_check=False,
                              shape=t.shape, stride=t.stride())
torch.manual_seed(0)
x, g = torch.randn(8, 16, dtype=torch.float16), torch.rand(16, dtype=torch.float16) + 0.5
w, b = torch.randn(32, 16, dtype=torch.float16) / 4, torch.randn(32, dtype=torch.float16)
ss = x.float().square().sum(-1)
with torch.no_grad():
    y = torch.compile(lambda *a: tilewright.rms_norm_linear(*a), backend="aot_eager", fullgraph=True)(
        dt(x, Shard(0)), dt(g, Replicate()), dt(w, Replicate()), dt(b, Replicate()))
    want = tilewright.rms_norm_linear(x, g, w, b)
assert y.placements == (Shard(0),), y.placements
torch.testing.assert_close(y.to_local().float(), want[:4].float(), rtol=2e-3, atol=2e-3)
dist.destroy_process_group()
print("ok")
'''


def test_a_compiled_no_grad_call_is_the_first_dtensor_contact():
    """In a fresh process, the first DTensor call torch.compile traces without gradients: its graph calls the inference
    op (ops/rms_norm_linear.py), whose sharding strategy must be registered on that first sight as every other op's
    (through call_op) - it was not, and tracing failed with "no sharding strategy registered"."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(
        tilewright.__file__)), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-c", _FIRST_CONTACT_COMPILED], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
