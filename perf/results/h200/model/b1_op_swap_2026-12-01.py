"""Which tilewright op costs the Llama B1 x S512 eager forward (no_grad) its lead over torch eager: session 36's run put
it at 0.385-0.41 ms a step against torch's 0.34-0.35 (whole_forward_host_llama-small_s36.txt; kernels 0.135 ms, so
host-bound). The tilewright block's forward with one op at a time swapped for the torch code the torch block runs
for it (norm + QKV, RoPE, attention, wo + residual, norm + gate/up, SwiGLU, down + residual), all of them queued
steady-state loops timed interleaved (bench.common.loop_ms_alternating, 7 rounds) - a swap that makes the step faster
names an op whose wrapper costs more host than torch's own ops do.

    PYTHONPATH=src python perf/results/h200/model/b1_op_swap_2026-12-01.py [--kernels] > $OUT/b1_op_swap.txt

``--kernels`` (the second probe): the step with every op swapped but RoPE (is the wrappers' cost additive?), and the
tilewright block with the small-call routes off for the whole step (``TILEWRIGHT_ATEN_BELOW=0`` set and unset
around each step: fused single-launch replays instead of ATen's pairs - fewer launches on a host-bound step).
Session 36's first run: each single swap made the step 5-8% faster (~40 us of ~615), RoPE's 10% slower."""
import os
import sys
import warnings

import torch
import torch.nn.functional as F

import tilewright
from tilewright.bench import model
from tilewright.bench.common import loop_ms_alternating

warnings.filterwarnings("ignore")
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
case = [c for c in model.SUITES["default"] if c.tag == "llama-small"][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16)
c = ours.dims
nq, nkv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim


def forward(blk, swap=""):
    B, S, _ = x.shape
    swaps = {swap} if isinstance(swap, str) else set(swap)
    if "norm_qkv" in swaps:
        qkv = F.linear(F.rms_norm(x, (x.shape[-1],), blk.attn_norm_qkv.norm_weight, c.eps), blk.attn_norm_qkv.weight)
    else:
        qkv = blk.attn_norm_qkv(x)
    heads = qkv.view(B, S, c.n_heads + 2 * c.n_kv_heads, c.head_dim)
    qk, v = heads.split([c.n_heads + c.n_kv_heads, c.n_kv_heads], dim=2)
    if "rotary" in swaps:
        q, k = qk.split([c.n_heads, c.n_kv_heads], dim=2)
        q, k = model.apply_rope(q, blk.rope_cos, blk.rope_sin), model.apply_rope(k, blk.rope_cos, blk.rope_sin)
    else:
        q, k = tilewright.apply_rotary(qk, blk.rope_cos[:, 0], blk.rope_sin[:, 0]).split([c.n_heads, c.n_kv_heads],
                                                                                          dim=2)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if "attention" in swaps:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        o = tilewright.flash_attention(q, k, v, causal=True)
    o = o.transpose(1, 2).reshape(B, S, -1)
    h = x + F.linear(o, blk.wo.weight) if "wo" in swaps else blk.wo(o, residual=x)
    if "norm_gate_up" in swaps:
        gu = F.linear(F.rms_norm(h, (h.shape[-1],), blk.ffn_norm_gate_up.norm_weight, c.eps),
                      blk.ffn_norm_gate_up.weight)
    else:
        gu = blk.ffn_norm_gate_up(h)
    if "swiglu" in swaps:
        gate, up = gu.chunk(2, dim=-1)
        a = F.silu(gate) * up
    else:
        a = tilewright.swiglu(gu)
    return h + F.linear(a, blk.w_down.weight) if "down" in swaps else blk.w_down(a, residual=h)


SWAPS = ("", "norm_qkv", "rotary", "attention", "wo", "norm_gate_up", "swiglu", "down")
if "--kernels" in sys.argv:
    SWAPS = ("", SWAPS[1:2] + SWAPS[3:], "kernels")


def step(s):
    if s != "kernels":
        return forward(ours, s)
    os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
    try:
        return forward(ours, "")
    finally:
        del os.environ["TILEWRIGHT_ATEN_BELOW"]


def label(s):
    return s if isinstance(s, str) else "all-but-rotary"


with torch.no_grad():
    want = ref(x).float()
    for s in SWAPS:
        err = (step(s).float() - want).abs().max().item()
        assert err < 0.25, (s, err)
    fns = [lambda: ref(x)] + [lambda s=s: step(s) for s in SWAPS]
    for r in range(3):
        ms = loop_ms_alternating(fns, rep_ms=150)
        print(f"round {r}: torch block {ms[0] * 1e3:.1f} us | tilewright {ms[1] * 1e3:.1f} us | "
              + " | ".join(f"-{label(s)} {m * 1e3:.1f} ({m / ms[1]:.3f})" for s, m in zip(SWAPS[1:], ms[2:])),
              flush=True)
