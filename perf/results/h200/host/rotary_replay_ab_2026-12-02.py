"""Issue 14: apply_rotary's eager replay (ops/rotary.py, session 38) against its full path, same process, loops
interleaved: host per call (N queued calls, no sync) at the Llama B1 x S512 layer's call - the q and k heads of the
QKV output, (1, 512, 20, 128) strided, Llama tables (512, 128) - and the Llama B1 eager forward (no_grad) with the
replay on / off beside torch eager's block.

Prediction (floor: the full path is ~15 Python checks, two table views, the op's dispatch and the launch's own
signature key, the replay one key and one bound launch): ~15-25 us less host a call on the device's CPU; the Llama
B1 eager forward ~3-5% faster.

    PYTHONPATH=src python perf/results/h200/host/rotary_replay_ab_2026-12-02.py [rounds] > $OUT/rotary_ab.txt"""
import sys
import warnings

import torch

import tilewright
from tilewright import _native
from tilewright.bench import model
from tilewright.bench.common import loop_ms_alternating
from tilewright.bench.host import host_us_alternating

warnings.filterwarnings("ignore")
op_rotary = sys.modules["tilewright.ops.rotary"]
print(torch.cuda.get_device_name(), torch.__version__, "| native:", _native.load(block=True) is not None, flush=True)
replay_key = op_rotary._replay_key


def with_replay(fn, on: bool):
    def run():
        if on:
            op_rotary._replay_key = replay_key
        else:
            op_rotary._replay_key = lambda *args: None
            op_rotary._replays.clear()
        return fn()
    return run


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.set_grad_enabled(False)
case = [c for c in model.SUITES["default"] if c.tag == "llama-small"][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16)
heads = ours.attn_norm_qkv(x).view(1, 512, 24, 128)
qk = heads.split([20, 4], dim=2)[0]
cos, sin = ours.rope_cos[:, 0], ours.rope_sin[:, 0]
call = lambda: tilewright.apply_rotary(qk, cos, sin)  # noqa: E731
a, b = with_replay(call, False)(), with_replay(call, True)()
assert torch.equal(a, b) and torch.equal(with_replay(call, True)(), a) and len(op_rotary._replays) == 1
for r in range(rounds):
    us = host_us_alternating([with_replay(call, False), with_replay(call, True)])
    print(f"host apply_rotary round {r}: full path {us[0]:.1f} us | replay {us[1]:.1f} us ({us[0] - us[1]:+.1f})",
          flush=True)
fns = [lambda: ref(x), with_replay(lambda: ours(x), False), with_replay(lambda: ours(x), True)]
for r in range(rounds):
    ms = loop_ms_alternating(fns, rep_ms=300)
    print(f"llama-small fwd round {r}: torch eager {ms[0] * 1e3:.1f} us | tilewright, rotary full path "
          f"{ms[1] * 1e3:.1f} us ({ms[0] / ms[1]:.3f}x torch) | rotary replay {ms[2] * 1e3:.1f} us "
          f"({ms[0] / ms[2]:.3f}x torch; {ms[1] / ms[2]:.3f}x)", flush=True)
