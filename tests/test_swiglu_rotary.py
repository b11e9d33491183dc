"""swiglu and apply_rotary (ops/swiglu.py, ops/rotary.py; triton_kernels/swiglu.py, rotary.py): forward and backward
against float64 references within 2x the error of torch's own same-dtype formula, both input forms, strided inputs
(the halves of one gate_up tensor, the q and k heads of a fused qkv output), tails that are not block multiples,
partial rotation, half- and full-width tables, per-batch tables; bad inputs raise naming the argument; the custom ops
pass opcheck and trace under torch.compile; both kernels compile for sm_90 without spills. On the CPU the kernels run
under the interpreter (fp16 / fp32: its bf16 rounding is not the device's); the GPU tier (bf16) is
tests/test_swiglu_rotary_gpu.py."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilewright
from tilewright.ops.rotary import rotary_op
from tilewright.ops.swiglu import swiglu_backward_op, swiglu_op

DEV = "cuda" if torch.cuda.is_available() else "cpu"
# The interpreter rounds fp32 -> bf16 toward zero (the device rounds to nearest): bf16 is the GPU tier's
DTYPES = [torch.float16, torch.float32]


def _rand(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype).to(DEV)


def _err(got, want):
    return (got.double() - want).abs().max().item() if got.numel() else 0.0


def _swiglu_torch(gate, up):
    return F.silu(gate) * up


# ------------------------------------------------------------------------------------------------------------------
# swiglu
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead,F_", [((3, 5), 7), ((37,), 130), ((2, 1), 1), ((0,), 8)])
@pytest.mark.parametrize("two_tensors", [False, True])
def test_swiglu_forward_and_backward_match_float64(dtype, lead, F_, two_tensors):
    x = _rand((*lead, 2 * F_), dtype, 0, scale=3.0)
    dy = _rand((*lead, F_), dtype, 1)
    if two_tensors:
        gate = x[..., :F_].clone().requires_grad_()
        up = x[..., F_:].clone().requires_grad_()
        y = tilewright.swiglu(gate, up)
        y.backward(dy)
        grads = [gate.grad, up.grad]
    else:
        xg = x.clone().requires_grad_()
        y = tilewright.swiglu(xg)
        y.backward(dy)
        grads = [xg.grad[..., :F_], xg.grad[..., F_:]]
    assert y.shape == (*lead, F_) and y.dtype == dtype
    xd = x.double().requires_grad_()
    ref = _swiglu_torch(*xd.chunk(2, dim=-1))
    ref.backward(dy.double())
    # torch's own same-dtype formula against the same reference: the yardstick
    xt = x.clone().requires_grad_()
    own = _swiglu_torch(*xt.chunk(2, dim=-1))
    own.backward(dy)
    floor = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    assert _err(y, ref) <= max(2 * _err(own, ref), floor)
    for got, want, mine in zip(grads, xd.grad.chunk(2, dim=-1), xt.grad.chunk(2, dim=-1)):
        assert torch.isfinite(got).all()
        assert _err(got, want) <= max(2 * _err(mine, want), floor)


def test_swiglu_reads_strided_halves_in_place():
    """gate and up as column slices of wider rows, and a transposed (non-unit last stride) input."""
    base = _rand((9, 50), torch.float32, 2)
    gate, up = base[:, 3:20], base[:, 25:42]  # row stride 50, unit columns
    torch.testing.assert_close(tilewright.swiglu(gate, up), _swiglu_torch(gate, up))
    xt = _rand((12, 7), torch.float32, 3).t()  # (7, 12), last stride 7
    torch.testing.assert_close(tilewright.swiglu(xt), _swiglu_torch(*xt.chunk(2, dim=-1)))


def test_swiglu_gradient_of_an_expanded_loss():
    x = _rand((4, 6), torch.float32, 4).requires_grad_()
    tilewright.swiglu(x).sum().backward()
    xd = x.detach().double().requires_grad_()
    _swiglu_torch(*xd.chunk(2, -1)).sum().backward()
    assert _err(x.grad, xd.grad) < 1e-5


@pytest.mark.parametrize("args,err,match", [
    (lambda: (torch.randn(4, 5),), ValueError, "x: the last dim"),
    (lambda: (torch.randn(4, 6), torch.randn(4, 5)), ValueError, "up: expected x's shape"),
    (lambda: (torch.randn(4, 6), torch.randn(4, 6, dtype=torch.float64)), TypeError, "up: dtype"),
    (lambda: (torch.randn(4, 6).int(),), TypeError, "x: dtype"),
    (lambda: ([1.0, 2.0],), TypeError, "x: expected a torch.Tensor"),
    (lambda: (torch.randn(4, 6), [1.0]), TypeError, "up: expected a torch.Tensor"),
])
def test_swiglu_bad_inputs_raise_naming_the_argument(args, err, match):
    with pytest.raises(err, match=match):
        tilewright.swiglu(*args())


def test_swiglu_double_backward_raises_a_clear_error():
    x = _rand((3, 8), torch.float32, 5).requires_grad_()
    (g,) = torch.autograd.grad(tilewright.swiglu(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


def test_swiglu_ops_pass_opcheck_and_compile():
    x = _rand((5, 12), torch.float32, 6).requires_grad_()
    up = _rand((5, 6), torch.float32, 7)
    torch.library.opcheck(swiglu_op, (x.detach(), None))
    torch.library.opcheck(swiglu_op, (x.detach()[:, :6], up))
    torch.library.opcheck(swiglu_backward_op, (up, x.detach(), None))
    compiled = torch.compile(lambda t: tilewright.swiglu(t) * 2, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), 2 * _swiglu_torch(*x.chunk(2, -1)))
    # the op itself traced (what a graph that calls torch.ops.tilewright.swiglu gets)
    traced = torch.compile(lambda t: torch.ops.tilewright.swiglu(t, None), fullgraph=True, backend="aot_eager")
    out = traced(x)
    out.sum().backward()
    torch.testing.assert_close(out, _swiglu_torch(*x.chunk(2, -1)))


# ------------------------------------------------------------------------------------------------------------------
# apply_rotary
# ------------------------------------------------------------------------------------------------------------------
def _tables(S, width, dtype, batch=None, full=False, seed=10):
    """cos / sin of random angles; full=True duplicates them as Llama's cat([freqs, freqs]) tables do, unless the
    halves are meant to differ (then full tables of independent angles: the kernel must read each half's own)."""
    shape = (S, width) if batch is None else (batch, S, width)
    ang = _rand(shape, torch.float32, seed, scale=3.0).cpu()
    if full:
        half = ang[..., : width // 2]
        ang = torch.cat([half, half], dim=-1)
    return ang.cos().to(dtype).to(DEV), ang.sin().to(dtype).to(DEV)


def _rotary_reference(x, cos, sin, R):
    """float64 rotate-half with each half's own table columns (half tables: the same for both)."""
    S = x.shape[1]
    c = (cos if cos.dim() == 3 else cos[None])[:, :S, None, :].double()
    s = (sin if sin.dim() == 3 else sin[None])[:, :S, None, :].double()
    if c.shape[-1] == R // 2:
        c, s = torch.cat([c, c], -1), torch.cat([s, s], -1)
    xr = x[..., :R]
    rot = torch.cat([-xr[..., R // 2:], xr[..., : R // 2]], dim=-1)
    return torch.cat([xr * c + rot * s, x[..., R:]], dim=-1)


def _rotary_torch_same_dtype(x, cos, sin, R):
    """The eager formula models write (Llama's apply_rotary_pos_emb), in x's dtype: the yardstick."""
    S = x.shape[1]
    c = (cos if cos.dim() == 3 else cos[None])[:, :S, None, :]
    s = (sin if sin.dim() == 3 else sin[None])[:, :S, None, :]
    if c.shape[-1] == R // 2:
        c, s = torch.cat([c, c], -1), torch.cat([s, s], -1)
    xr = x[..., :R]
    rot = torch.cat([-xr[..., R // 2:], xr[..., : R // 2]], dim=-1)
    return torch.cat([xr * c + rot * s, x[..., R:]], dim=-1)


CASES = [  # (B, S, H, D, R or None, table width, batched tables, independent full halves)
    (2, 5, 3, 16, None, 8, False, False),  # half tables, all features
    (1, 7, 4, 16, None, 16, False, True),  # full tables, halves with their own angles
    (2, 3, 2, 32, 16, 16, True, False),  # partial rotation, full tables per batch
    (3, 4, 5, 24, 20, 10, False, False),  # partial, half tables, non-power-of-two halves
    (1, 1, 1, 2, None, 1, False, False),  # smallest
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_rotary_forward_and_backward_match_float64(dtype, case):
    B, S, H, D, R, W, batched, independent = case
    Rv = R or D
    x = _rand((B, S, H, D), dtype, 11)
    cos, sin = _tables(S + 2, W, dtype, batch=B if batched else None, full=(W == Rv and not independent))
    dy = _rand((B, S, H, D), dtype, 12)
    xg = x.clone().requires_grad_()
    out = tilewright.apply_rotary(xg, cos, sin, rotary_dim=R)
    out.backward(dy)
    assert out.shape == x.shape and out.dtype == dtype and out.is_contiguous()
    xd = x.double().requires_grad_()
    ref = _rotary_reference(xd, cos, sin, Rv)
    ref.backward(dy.double())
    xt = x.clone().requires_grad_()
    own = _rotary_torch_same_dtype(xt, cos, sin, Rv)
    own.backward(dy)
    floor = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    assert _err(out, ref) <= max(2 * _err(own, ref), floor)
    assert _err(xg.grad, xd.grad) <= max(2 * _err(xt.grad, xd.grad), floor)


def test_rotary_rotates_the_q_and_k_heads_of_a_fused_qkv_output_in_one_call():
    """A (B, S, (Hq + 2 Hkv) D) projection viewed as heads; the first Hq + Hkv heads rotate as one strided tensor."""
    B, S, Hq, Hkv, D = 2, 6, 4, 2, 16
    qkv = _rand((B, S, (Hq + 2 * Hkv) * D), torch.float32, 13)
    cos, sin = _tables(S, D, torch.float32, full=True)
    qk = qkv.view(B, S, Hq + 2 * Hkv, D)[:, :, : Hq + Hkv]
    assert not qk.is_contiguous()
    got = tilewright.apply_rotary(qk, cos, sin)
    want = _rotary_reference(qk.double(), cos, sin, D)
    assert _err(got, want) < 1e-5


def test_rotary_is_its_own_inverse_run_backward_and_has_a_double_backward():
    x = _rand((1, 4, 2, 8), torch.float32, 14).requires_grad_()
    cos, sin = _tables(4, 4, torch.float32)
    out = tilewright.apply_rotary(x, cos, sin)
    back = rotary_op(out.detach(), cos[None], sin[None], 8, True)  # rotating back recovers x
    torch.testing.assert_close(back, x.detach(), atol=1e-5, rtol=1e-5)
    (g,) = torch.autograd.grad((out * out).sum(), x, create_graph=True)
    g.sum().backward()  # rotation is orthogonal: d/dx sum(out^2) = 2x, whose gradient is 2
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(x=torch.randn(2, 3, 4)), ValueError, "x: expected 4-D"),
    (dict(cos=torch.randn(3, 7)), ValueError, "sin: expected cos's shape"),
    (dict(cos=torch.randn(2, 4), sin=torch.randn(2, 4)), ValueError, "cos: holds 2 positions"),
    (dict(cos=torch.randn(3, 3, 4), sin=torch.randn(3, 3, 4)), ValueError, "cos: a 3-D table"),
    (dict(cos=torch.randn(3, 6), sin=torch.randn(3, 6)), ValueError, "cos: table width 6"),
    (dict(rotary_dim=7), ValueError, "rotary_dim: must be even"),
    (dict(rotary_dim=10), ValueError, "rotary_dim: must be even"),
    (dict(rotary_dim=4.0), TypeError, "rotary_dim: expected an int"),
    (dict(cos=torch.randn(3, 4, dtype=torch.float64), sin=torch.randn(3, 4, dtype=torch.float64)), TypeError,
     "cos: dtype"),
    (dict(cos=torch.randn(3, 4, requires_grad=True)), ValueError, "treated as constants"),
])
def test_rotary_bad_inputs_raise_naming_the_argument(kwargs, err, match):
    args = dict(x=torch.randn(2, 3, 2, 8), cos=torch.randn(3, 4), sin=torch.randn(3, 4))
    args.update(kwargs)
    rd = args.pop("rotary_dim", None)
    with pytest.raises(err, match=match):
        tilewright.apply_rotary(args["x"], args["cos"], args["sin"], rotary_dim=rd)


def test_rotary_op_passes_opcheck_and_compiles():
    x = _rand((2, 3, 2, 8), torch.float32, 15).requires_grad_()
    cos, sin = _tables(3, 4, torch.float32)
    torch.library.opcheck(rotary_op, (x.detach(), cos[None], sin[None], 8, False))
    compiled = torch.compile(lambda t: tilewright.apply_rotary(t, cos, sin) + 1, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), _rotary_reference(x.double(), cos, sin, 8).float() + 1)
    traced = torch.compile(lambda t: torch.ops.tilewright.rotary(t, cos[None], sin[None], 8, False), fullgraph=True,
                           backend="aot_eager")
    out = traced(x)
    out.sum().backward()
    torch.testing.assert_close(out, _rotary_reference(x.detach().double(), cos, sin, 8).float())


@pytest.mark.parametrize("limit,expect_op", [(1 << 30, False), (0, True)])
def test_compiled_graphs_hold_the_ops_from_the_size_limit_up(monkeypatch, limit, expect_op):
    """Under torch.compile a call under COMPILED_ELEMENTWISE_MIN elements emits the torch formula (inductor fuses
    it), a larger one keeps the tilewright op in the graph; both give the same values."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    from tilewright.ops import _aten

    monkeypatch.setattr(_aten, "COMPILED_ELEMENTWISE_MIN", limit)
    seen = []

    def forward_compiler(gm, example_inputs):  # the ATen-level graph inductor would get (ops/_opaque.py)
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=forward_compiler)

    x = _rand((4, 12), torch.float32, 16)
    q = _rand((1, 3, 2, 8), torch.float32, 17)
    cos, sin = _tables(3, 4, torch.float32)
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: (tilewright.swiglu(a), tilewright.apply_rotary(b, cos, sin)), backend=backend,
                      fullgraph=True)
    y, r = f(x, q)
    torch.testing.assert_close(y, _swiglu_torch(*x.chunk(2, -1)))
    torch.testing.assert_close(r, _rotary_reference(q.double(), cos, sin, 8).float())
    assert any("tilewright.swiglu" in t for t in seen) == expect_op
    assert any("tilewright.rotary" in t for t in seen) == expect_op


def test_eager_swiglu_takes_the_torch_formula_only_for_small_cuda_calls_with_the_aten_route_on(monkeypatch):
    """The eager route's decision (ops/_aten.swiglu_formula_eager): a CUDA input under COMPILED_ELEMENTWISE_MIN
    elements with the ATen route on; never a CPU tensor, a large one, TILEWRIGHT_ATEN_BELOW=0 or a forced backend.
    (The tensor is a stand-in: this box has no CUDA tensor; the GPU tier runs the real call.)"""
    from types import SimpleNamespace

    from tilewright.ops import _aten

    small = SimpleNamespace(numel=lambda: _aten.COMPILED_ELEMENTWISE_MIN - 1, is_cuda=True)
    large = SimpleNamespace(numel=lambda: _aten.COMPILED_ELEMENTWISE_MIN, is_cuda=True)
    cpu = SimpleNamespace(numel=lambda: 8, is_cuda=False)
    monkeypatch.delenv("TILEWRIGHT_ATEN_BELOW", raising=False)
    assert _aten.swiglu_formula_eager(small)
    assert not _aten.swiglu_formula_eager(large) and not _aten.swiglu_formula_eager(cpu)
    with tilewright.use_backend("triton"):
        assert not _aten.swiglu_formula_eager(small)
    monkeypatch.setenv("TILEWRIGHT_ATEN_BELOW", "0")
    assert not _aten.swiglu_formula_eager(small)


# ------------------------------------------------------------------------------------------------------------------
# sm_90 builds (what the device's launches compile to): spill-free
# ------------------------------------------------------------------------------------------------------------------
def test_both_kernels_compile_for_sm90_without_spills():
    from tilewright.triton_kernels.aot import compile_reports

    sw = {"gate_ptr": "*bf16", "up_ptr": "*bf16", "dy_ptr": "*bf16", "out_ptr": "*bf16", "dup_ptr": "*bf16",
          "M": "i32", "F": "i32", "stride_gm": "i32", "stride_um": "i32", "stride_dym": "i32", "stride_om": "i32",
          "stride_dum": "i32"}
    rot = {"x_ptr": "*bf16", "cos_ptr": "*bf16", "sin_ptr": "*bf16", "out_ptr": "*bf16", "S": "i32", "H": "i32",
           "stride_xb": "i32", "stride_xs": "i32", "stride_xh": "i32", "stride_ob": "i32", "stride_os": "i32",
           "stride_oh": "i32", "stride_cb": "i32", "stride_cs": "i32"}
    jobs = [dict(kernel="tilewright.triton_kernels.swiglu:_swiglu_kernel", signature=sw, num_warps=4,
                 constexprs=dict(BACKWARD=bwd, BLOCK_M=2, BLOCK_F=1024), name=f"swiglu_bwd{int(bwd)}",
                 divisible_by_16=list(sw)) for bwd in (False, True)]
    jobs += [dict(kernel="tilewright.triton_kernels.rotary:_rotary_kernel", signature=rot, num_warps=4,
                  constexprs=dict(HALF=64, PASS=0, FULL_TABLES=full, BACKWARD=bwd, BLOCK_H=32, BLOCK_HALF=64,
                                  BLOCK_PASS=1), name=f"rotary_full{int(full)}_bwd{int(bwd)}",
                  divisible_by_16=list(rot)) for full in (False, True) for bwd in (False, True)]
    for rep in compile_reports(jobs):
        assert rep.spill_bytes == 0, rep.name
        assert rep.registers > 0, rep.name
