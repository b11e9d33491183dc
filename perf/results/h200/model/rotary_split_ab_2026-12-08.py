"""Issue 14, the compiled Llama block's rotary embedding (session 43): q and k rotated in calls of their own under
torch.compile (the bench block's traced path since this session, "tw_compile") against one call on their joint
(B, S, Hq + Hkv, D) view ("tw_compile_joint", the block's forward before), at both sizes, forward (no_grad) and
forward + backward; torch eager, torch.compile and the eager tilewright block (one call, unchanged) beside them.
Session 42 measured the B1 forward alone: joint 0.980x torch.compile, split 1.006x (9 rounds of 200 steps).
Each provider's queued loop of STEPS steps (no sync inside) timed ROUNDS rounds in rotating order, medians; max |diff|
of each block's output against the torch block's.
Run from the repository root: `PYTHONPATH=src python perf/results/h200/model/rotary_split_ab_2026-12-08.py`."""
import os
import statistics
import sys
import time
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_steps import case_inputs, step_of  # noqa: E402

import tilewright  # noqa: E402
from tilewright.bench import model  # noqa: E402

ROUNDS = 9
STEPS = {"llama-small": 100, "llama-prefill": 10}
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
model._raise_recompile_limit()


def joint_forward(self, x):
    """The bench block's forward before this session: one apply_rotary call on the joint q/k view, traced too."""
    B, S, _ = x.shape
    c = self.dims
    heads = self.attn_norm_qkv(x).view(B, S, c.n_heads + 2 * c.n_kv_heads, c.head_dim)
    qk, v = heads.split([c.n_heads + c.n_kv_heads, c.n_kv_heads], dim=2)
    q, k = tilewright.apply_rotary(qk, self.rope_cos[:, 0], self.rope_sin[:, 0]).split([c.n_heads, c.n_kv_heads],
                                                                                        dim=2)
    o = tilewright.flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    h = self.wo(o.transpose(1, 2).reshape(B, S, -1), residual=x)
    return self.w_down(self.ffn_norm_gate_up(h), residual=h)


t_start = time.time()
for tag in ("llama-small", "llama-prefill"):
    case, ref, ours, x = case_inputs(tag)
    joint = model.build_blocks(case, "cuda", torch.bfloat16)[1]
    joint.load_state_dict(ours.state_dict())
    joint.forward = types.MethodType(joint_forward, joint)
    providers = {"torch_eager": ref, "torch_compile": torch.compile(ref), "tw_eager": ours,
                 "tw_compile": torch.compile(ours), "tw_compile_joint": torch.compile(joint)}
    with torch.no_grad():
        want = ref(x).double()
        for name, blk in providers.items():
            print(f"{tag} {name:18s} max |diff| vs torch eager {(blk(x).double() - want).abs().max().item():.3g}",
                  flush=True)
    for mode in ("fwd", "fwd+bwd"):
        for name, blk in providers.items():  # warm-up: compile, tune, record replays
            for _ in range(3):
                step_of(blk, x, mode)()
        torch.cuda.synchronize()
        times = {n: [] for n in providers}
        names = list(providers)
        for r in range(ROUNDS):
            for name in names[r % len(names):] + names[:r % len(names)]:
                step = step_of(providers[name], x, mode)
                step()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(STEPS[tag]):
                    step()
                torch.cuda.synchronize()
                times[name].append((time.perf_counter() - t0) / STEPS[tag] * 1e3)
        med = {n: statistics.median(v) for n, v in times.items()}
        print(f"{tag} {mode}: " + ", ".join(f"{n} {t:.4f} ms" for n, t in med.items()), flush=True)
        for n in names[2:]:
            spread = (max(times[n]) - min(times[n])) / med[n]
            print(f"   {n:18s} {med['torch_eager'] / med[n]:.3f}x eager, {med['torch_compile'] / med[n]:.3f}x "
                  f"compile (rounds' spread {spread:.1%})", flush=True)
        print(f"   split / joint (compiled): {med['tw_compile_joint'] / med['tw_compile']:.3f}x; "
              f"t={time.time() - t_start:.0f}s", flush=True)
