"""Issue 14, what the gated-linear GEMM (tilewright.swiglu_linear) gives the Llama B8 inference forward: the model
bench's tilewright block with its session-39 MLP ("tw_eager" / "tw_compile": rms_norm_linear - the folded norm GEMM -
then tilewright.swiglu) against the same block whose MLP input is F.rms_norm's output (a pass that writes the
normalised copy) projected and gated by swiglu_linear in one GEMM ("glu"), and the same through
rms_norm_linear(..., activation="swiglu") (tilewright's norm pass, then that GEMM: "glu_norm"). Same weights, one
process, forward under no_grad; eager and compiled; torch eager / torch.compile beside them. Each provider's queued
loop of 20 steps (no sync inside) timed 7 rounds in rotating order, medians. Also max |diff| of each block's output
against the torch block's. (The first run, model/swiglu_linear_ab_s40.txt, had "tw_eager" as the bench block itself,
which then was the session-39 MLP; the second, _pp_s40, this file's explicit pair.)
Run from the repository root: `PYTHONPATH=src python perf/results/h200/model/swiglu_linear_ab_2026-12-02.py`."""
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_steps import case_inputs, step_of  # noqa: E402

import tilewright  # noqa: E402
from tilewright.bench.model import TilewrightLlamaBlock  # noqa: E402

ROUNDS, STEPS = 7, 20
print(torch.cuda.get_device_name(), torch.__version__, flush=True)


class GluBlock(torch.nn.Module):
    """The tilewright block with its MLP's gate/up GEMM and SwiGLU as one swiglu_linear call (no_grad calls only)."""

    def __init__(self, base: TilewrightLlamaBlock, mode: str):
        super().__init__()
        self.base, self.mode = base, mode

    def forward(self, x):
        b = self.base
        c = b.dims
        B, S, _ = x.shape
        heads = b.attn_norm_qkv(x).view(B, S, c.n_heads + 2 * c.n_kv_heads, c.head_dim)
        qk, v = heads.split([c.n_heads + c.n_kv_heads, c.n_kv_heads], dim=2)
        q, k = tilewright.apply_rotary(qk, b.rope_cos[:, 0], b.rope_sin[:, 0]).split([c.n_heads, c.n_kv_heads], dim=2)
        o = tilewright.flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        h = b.wo(o.transpose(1, 2).reshape(B, S, -1), residual=x)
        m = b.ffn_norm_gate_up
        if self.mode == "glu_norm":  # tilewright's norm pass and the gated GEMM in one call
            a = tilewright.rms_norm_linear(h, m.norm_weight, m.weight, eps=c.eps, activation="swiglu")
        elif self.mode == "glu":
            a = tilewright.swiglu_linear(F.rms_norm(h, (c.d_model,), m.norm_weight, c.eps), m.weight)
        else:  # the pair: the norm-fused GEMM (folded in inference), then the SwiGLU pass
            a = tilewright.swiglu(tilewright.rms_norm_linear(h, m.norm_weight, m.weight, eps=c.eps))
        return b.w_down(a, residual=h)


t_start = time.time()
case, ref, ours, x = case_inputs("llama-prefill")
pair, glu, glu_norm = (GluBlock(ours, m) for m in ("pair", "glu", "glu_norm"))
providers = {"torch_eager": ref, "torch_compile": torch.compile(ref), "tw_eager": pair, "tw_eager_glu": glu,
             "tw_eager_glu_norm": glu_norm, "tw_compile": torch.compile(pair), "tw_compile_glu": torch.compile(glu),
             "tw_compile_glu_norm": torch.compile(glu_norm)}
with torch.no_grad():
    want = ref(x).double()
    for name, blk in providers.items():
        print(f"  {name:16s} max |diff| vs torch eager {(blk(x).double() - want).abs().max().item():.3g}", flush=True)
for name, blk in providers.items():  # warm-up: compile, tune, record replays
    for _ in range(3):
        step_of(blk, x, "fwd")()
torch.cuda.synchronize()
times = {n: [] for n in providers}
names = list(providers)
for r in range(ROUNDS):
    for name in names[r % len(names):] + names[:r % len(names)]:
        step = step_of(providers[name], x, "fwd")
        step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
        times[name].append((time.perf_counter() - t0) / STEPS * 1e3)
med = {n: statistics.median(v) for n, v in times.items()}
print("llama-prefill fwd: " + ", ".join(f"{n} {t:.3f} ms" for n, t in med.items()), flush=True)
for n in names[2:]:
    print(f"   {n:16s} {med['torch_eager'] / med[n]:.3f}x eager, {med['torch_compile'] / med[n]:.3f}x compile",
          flush=True)
for v in ("glu", "glu_norm"):
    print(f"   {v} / as-is: eager {med['tw_eager'] / med[f'tw_eager_{v}']:.3f}x, compiled "
          f"{med['tw_compile'] / med[f'tw_compile_{v}']:.3f}x; t={time.time() - t_start:.0f}s", flush=True)
