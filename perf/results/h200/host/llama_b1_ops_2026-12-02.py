"""Issue 14, session 41: which call of the Llama B1 x S512 forward costs its host time over torch - each tilewright
call of TilewrightLlamaBlock.forward timed beside the torch code TorchLlamaBlock runs for it, on the step's own
tensors (300 queued calls, no sync, runs interleaved: bench.host.host_us_alternating), without grad and with grad
recorded (inputs and weights require grad, as in a training forward; no backward run), plus what served the call.

    PYTHONPATH=src python perf/results/h200/host/llama_b1_ops_2026-12-02.py > $OUT/llama_b1_ops.txt"""
import warnings

import torch
import torch.nn.functional as F

import tilewright
from tilewright import _native
from tilewright.bench import model
from tilewright.bench.host import host_us_alternating
from tilewright.ops import _fast, attention, gemm

warnings.filterwarnings("ignore")
print(torch.cuda.get_device_name(), torch.__version__, "| native:", _native.load(block=True) is not None, flush=True)
case = [c for c in model.SUITES["default"] if c.tag == "llama-small"][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16)
c = ours.dims
B, S, _ = x.shape
hd = c.head_dim
with torch.no_grad():
    heads = ours.attn_norm_qkv(x).view(B, S, c.n_heads + 2 * c.n_kv_heads, hd)
    qk, v_ = heads.split([c.n_heads + c.n_kv_heads, c.n_kv_heads], dim=2)
    q_, k_ = tilewright.apply_rotary(qk, ours.rope_cos[:, 0], ours.rope_sin[:, 0]).split([c.n_heads, c.n_kv_heads], 2)
    o_ = tilewright.flash_attention(q_.transpose(1, 2), k_.transpose(1, 2), v_.transpose(1, 2), causal=True)
    o_ = o_.transpose(1, 2).reshape(B, S, -1)
    h_ = ours.wo(o_, residual=x)
    a_ = ours.ffn_norm_gate_up(h_)
for grad in (False, True):
    torch.set_grad_enabled(grad)
    leaf = lambda t: t.detach().clone().requires_grad_(grad)  # noqa: E731
    qk, v, o, h, a = leaf(qk), leaf(v_), leaf(o_), leaf(h_), leaf(a_)
    q, k = leaf(q_), leaf(k_)
    qT, kT, vT = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    qkv_w = ours.attn_norm_qkv
    ffn = ours.ffn_norm_gate_up
    calls = {
        "norm_qkv": (lambda: qkv_w(x), lambda: ref.wqkv(ref.attn_norm(x))),
        "rotary": (lambda: tilewright.apply_rotary(qk, ours.rope_cos[:, 0], ours.rope_sin[:, 0]),
                   lambda: (model.apply_rope(q, ref.rope_cos, ref.rope_sin),
                            model.apply_rope(k, ref.rope_cos, ref.rope_sin))),
        "attention": (lambda: tilewright.flash_attention(qT, kT, vT, causal=True),
                      lambda: F.scaled_dot_product_attention(qT, kT, vT, is_causal=True, enable_gqa=True)),
        "wo+res": (lambda: ours.wo(o, residual=x), lambda: x + ref.wo(o)),
        "norm_gate_up+swiglu": (lambda: ffn(h), lambda: (lambda g: F.silu(g[0]) * g[1])(
            ref.w_gate_up(ref.ffn_norm(h)).chunk(2, dim=-1))),
        "down+res": (lambda: ours.w_down(a, residual=h), lambda: h + ref.w_down(a)),
    }
    for name, (mine, peer) in calls.items():
        mine(), mine()
        served = sorted({type(v).__name__ for cache in (gemm._replays, attention._replays) for v in cache.values()})
        for r in range(2):
            us = host_us_alternating([peer, mine], calls=300, runs=7)
            print(f"{'grad' if grad else 'no_grad':7s} {name:20s} round {r}: torch {us[0]:6.1f} us | tilewright "
                  f"{us[1]:6.1f} us (+{us[1] - us[0]:5.1f}) | caches hold {served}", flush=True)
