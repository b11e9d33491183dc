"""Issue 14: the replay key in C (tilewright/_native) against the Python key, in the same process, loops interleaved:
the B1 x S512 model rows (Llama and ViT-L blocks, eager forward under no_grad and forward + backward, torch eager
in the same rounds) and the host bench's per-call rows (N calls queued without sync).

Prediction (dev-box proxy, /tmp: tilewright.linear's ATen-route hit +34 -> +21 us over F.linear after a model's other
calls, +17 -> +10 in a tight loop): ~10-15 us less host per wrapped op in a step; Llama B1 eager forward 0.83x ->
~0.95-1.0x torch eager.

    PYTHONPATH=src python perf/results/h200/host/native_key_ab_2026-12-01.py > $OUT/native_key_ab.txt"""
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
python_key = _fast.python_replay_key
_fast._native_pending = False


def keyed(fn, key):
    def run():
        _fast.replay_key = key
        return fn()
    return run


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for tag in ("llama-small", "vit-small"):
    case = [c for c in model.SUITES["default"] if c.tag == tag][0]
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x = model.make_input(case, "cuda", torch.bfloat16)
    with torch.no_grad():
        want = ref(x).float()
        for key in (python_key, c_key):
            _fast.replay_key = key
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
        fns = [make(ref), keyed(make(ours), python_key), keyed(make(ours), c_key)]
        for r in range(rounds):
            ms = loop_ms_alternating(fns, rep_ms=300 if kind == "fwd" else 700)
            print(f"{tag} {kind} round {r}: torch eager {ms[0] * 1e3:.1f} us | tilewright python key "
                  f"{ms[1] * 1e3:.1f} us ({ms[0] / ms[1]:.3f}x torch) | C key {ms[2] * 1e3:.1f} us "
                  f"({ms[0] / ms[2]:.3f}x torch; {ms[1] / ms[2]:.3f}x the python key)", flush=True)
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
        us = host_us_alternating([peer, keyed(ours, python_key), keyed(ours, c_key)])
        print(f"host {name} round {r_}: torch {us[0]:.1f} us | python key {us[1]:.1f} ({us[1] / us[0]:.2f}x torch) | "
              f"C key {us[2]:.1f} ({us[2] / us[0]:.2f}x torch)", flush=True)
