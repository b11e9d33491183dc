"""Issue 14: the eager hit in one C call (tilewright/_native ``hit``: key, lookup and the ATen route's ops) against
session 37's path (the C key, the lookup and the route's __call__ in Python: ops/_fast.python_hit), same process,
loops interleaved: the B1 x S512 model rows (Llama and ViT-L blocks, eager forward under no_grad and forward +
backward, torch eager in the same rounds) and the host bench's per-call rows (N calls queued without sync).

Prediction (dev-box proxy, tilewright.linear's ATen hit 15 -> 10 us where F.linear takes 5, a noisy box): ~2-3 us
less host per ATen-routed call on the device's CPU in a tight loop, 2-3x that inside a step; Llama B1 eager forward
0.98x -> ~1.03x torch eager, ViT-L B1 0.75x -> ~0.80x (six ATen-routed calls, each ~5-9 us over torch today).

    PYTHONPATH=src python perf/results/h200/host/hit_ab_2026-12-02.py [rounds] > $OUT/hit_ab.txt"""
import sys
import warnings

import torch
import torch.nn.functional as F

import tilewright
from tilewright import _native
from tilewright.bench import model
from tilewright.bench.common import loop_ms_alternating
from tilewright.bench.host import host_us_alternating
from tilewright.ops import _fast

warnings.filterwarnings("ignore")
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
c_key = _fast.native_replay_key(block=True)
print("native:", _native.status(), flush=True)
assert c_key is not None
c_hit = _fast.native_hit()
_fast._native_pending = False
_fast.replay_key = c_key
PY_HIT, C_HIT = _fast.python_hit, c_hit


def keyed(fn, hit):
    def run():
        _fast.hit = hit
        return fn()
    return run


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for tag in ("llama-small", "vit-small"):
    case = [c for c in model.SUITES["default"] if c.tag == tag][0]
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x = model.make_input(case, "cuda", torch.bfloat16)
    with torch.no_grad():
        want = ref(x).float()
        for hit in (PY_HIT, C_HIT):
            _fast.hit = hit
            err = (ours(x).float() - want).abs().max().item()
            assert err < 0.25, (tag, err)

    def fwd(block):
        def run():
            with torch.no_grad():
                block(x)
        return run

    def step(block):
        def run():
            block(x).sum().backward()
        return run

    for kind, make in (("fwd", fwd), ("fwd+bwd", step)):
        fns = [make(ref), keyed(make(ours), PY_HIT), keyed(make(ours), C_HIT)]
        for r in range(rounds):
            ms = loop_ms_alternating(fns, rep_ms=300 if kind == "fwd" else 700)
            print(f"{tag} {kind} round {r}: torch eager {ms[0] * 1e3:.1f} us | tilewright python hit "
                  f"{ms[1] * 1e3:.1f} us ({ms[0] / ms[1]:.3f}x torch) | C hit {ms[2] * 1e3:.1f} us "
                  f"({ms[0] / ms[2]:.3f}x torch; {ms[1] / ms[2]:.3f}x the python hit)", flush=True)
    del ref, ours, x
    torch.cuda.empty_cache()

# per-call host cost, as the host bench measures it (queued calls, no sync)
a = torch.randn(1000, 1536, device="cuda", dtype=torch.bfloat16)
w = torch.randn(3000, 1536, device="cuda", dtype=torch.bfloat16)
r = torch.randn(1000, 3000, device="cuda", dtype=torch.bfloat16)
g = torch.randn(1536, device="cuda", dtype=torch.bfloat16)
q = torch.randn(2, 16, 512, 128, device="cuda", dtype=torch.bfloat16)
ops = {
    "linear": (lambda: tilewright.linear(a, w), lambda: F.linear(a, w)),
    "linear+residual": (lambda: tilewright.linear(a, w, residual=r), lambda: F.linear(a, w) + r),
    "rms_norm_linear": (lambda: tilewright.rms_norm_linear(a, g, w, eps=1e-6),
                        lambda: F.linear(F.rms_norm(a, (1536,), g, 1e-6), w)),
    "flash_attention": (lambda: tilewright.flash_attention(q, q, q, causal=True),
                        lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)),
}
for name, (ours, peer) in ops.items():
    for _ in range(3):
        ours()
    torch.cuda.synchronize()
    for r_ in range(rounds):
        us = host_us_alternating([peer, keyed(ours, PY_HIT), keyed(ours, C_HIT)])
        print(f"host {name} round {r_}: torch {us[0]:.1f} us | python hit {us[1]:.1f} ({us[1] / us[0]:.2f}x torch) | "
              f"C hit {us[2]:.1f} ({us[2] / us[0]:.2f}x torch)", flush=True)
