"""Compiled Llama B8 S2048 fwd+bwd: GPU kernels of torch.compile(torch block) vs torch.compile(tilewright block)."""
import torch
from torch.profiler import profile, ProfilerActivity
from tilewright.bench import model
model._raise_recompile_limit()
case = [c for c in model.SUITES["default"] if c.tag == "llama-prefill"][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16).requires_grad_(True)
for name, blk in (("torch_compile", torch.compile(ref, dynamic=False)), ("tw_compile", torch.compile(ours, dynamic=False))):
    for _ in range(3):
        blk(x).sum().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            blk(x).sum().backward()
        torch.cuda.synchronize()
    ev = [e for e in p.key_averages() if e.device_type.name == "CUDA" and e.self_device_time_total > 0]
    tot = sum(e.self_device_time_total for e in ev) / 5 / 1e3
    print(f"== {name}: GPU kernel time per step {tot:.3f} ms", flush=True)
    for e in sorted(ev, key=lambda e: -e.self_device_time_total)[:22]:
        print(f"  {e.self_device_time_total / 5 / 1e3:8.3f} ms  x{e.count // 5:3d}  {e.key[:110]}")
