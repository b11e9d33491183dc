"""Why the compiled Llama B1 forward runs 0.95-0.98x torch.compile (session 42): the generated code of both graphs
and the wall per step of variants of the tilewright block's traced rotary embedding, interleaved in one process.

The B1 forward is host-bound (GPU kernels 0.102 ms under a ~0.23 ms wall, session 41's profile) and the tilewright
graph launched one Triton kernel more than torch's (13 vs 12): the traced rotary formula's output and the attention's
layout copies. Variants (the traced formula only; monkeypatched into ops.rotary before each block is traced):
  cur      the shipped formula: fp32 halves, torch.cat, one cast
  rope     the torch block's formula: x * cos + cat(-x2, x1) * sin on full-width tables, in x's dtype
  split    the shipped formula, the block calling apply_rotary on q and k separately (user-side variant)
Writes <out>/code_<name>.py (inductor's output code) and prints kernels per graph and the wall per step.

    python b1_compiled_code_s42.py OUT_DIR
"""
import statistics
import sys
import time
import types

import torch
from torch._inductor.utils import run_and_get_code

import tilewright
from tilewright.bench import model
from tilewright.ops import rotary

out_dir = sys.argv[1]
model._raise_recompile_limit()
case = [c for c in model.SUITES["default"] if c.tag == "llama-small"][0]
x = model.make_input(case, "cuda", torch.bfloat16)
print(torch.cuda.get_device_name(), torch.__version__, case, flush=True)
shipped = rotary._rotate_torch


def rope_formula(x, cos, sin, rotary_dim, backward):
    S = x.shape[1]
    half = rotary_dim // 2
    c, s = cos[:, :S, None, :], sin[:, :S, None, :]
    if c.shape[-1] == half:
        c, s = torch.cat([c, c], dim=-1), torch.cat([s, s], dim=-1)
    r = x[..., :rotary_dim]
    a, z = r[..., :half], r[..., half:]
    rotated = torch.cat([z, -a], dim=-1) if backward else torch.cat([-z, a], dim=-1)
    o = r * c + rotated * s
    return o if rotary_dim == x.shape[-1] else torch.cat([o, x[..., rotary_dim:]], dim=-1)


def split_forward(self, x):
    B, S, _ = x.shape
    c = self.dims
    heads = self.attn_norm_qkv(x).view(B, S, c.n_heads + 2 * c.n_kv_heads, c.head_dim)
    q, k, v = heads.split([c.n_heads, c.n_kv_heads, c.n_kv_heads], dim=2)
    cos, sin = self.rope_cos[:, 0], self.rope_sin[:, 0]
    q, k = tilewright.apply_rotary(q, cos, sin), tilewright.apply_rotary(k, cos, sin)
    o = tilewright.flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    h = self.wo(o.transpose(1, 2).reshape(B, S, -1), residual=x)
    return self.w_down(self.ffn_norm_gate_up(h), residual=h)


providers = {}
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
providers["torch_compile"] = (torch.compile(ref, dynamic=False), None)
for name, formula in (("cur", shipped), ("rope", rope_formula), ("split", shipped)):
    blk = model.build_blocks(case, "cuda", torch.bfloat16)[1]
    if name == "split":
        blk.forward = types.MethodType(split_forward, blk)
    providers["tw_" + name] = (torch.compile(blk, dynamic=False), formula)

want = ref(x)
for name, (fn, formula) in providers.items():
    rotary._rotate_torch = formula or shipped
    with torch.no_grad():
        got, codes = run_and_get_code(fn, x)
    rotary._rotate_torch = shipped
    text = "\n\n# ======== next graph\n\n".join(codes)
    with open(f"{out_dir}/code_{name}.py", "w") as f:
        f.write(text)
    launches = text.count(".run(") + text.count("extern_kernels.") + text.count("torch.ops.aten.")
    err = model.rel_err(got, want)
    print(f"{name:14s} graphs {len(codes)}  triton defs {text.count('@triton.jit')}  '.run(' {text.count('.run(')}"
          f"  extern {text.count('extern_kernels.')}  aten {text.count('torch.ops.aten.')}  tilewright "
          f"{text.count('torch.ops.tilewright.')}  launches~{launches}  rel err vs torch eager {err:.2e}", flush=True)

walls = {name: [] for name in providers}
with torch.no_grad():
    for name, (fn, _) in providers.items():
        for _ in range(20):
            fn(x)
    torch.cuda.synchronize()
    for _ in range(9):
        for name, (fn, _) in providers.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                fn(x)
            torch.cuda.synchronize()
            walls[name].append((time.perf_counter() - t0) / 200 * 1e6)
base = statistics.median(walls["torch_compile"])
for name, w in walls.items():
    med = statistics.median(w)
    print(f"{name:14s} wall/step median {med:7.1f} us  (min {min(w):6.1f}, max {max(w):6.1f})  "
          f"torch.compile / it {base / med:.3f}x")
