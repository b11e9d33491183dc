"""Guards and generated code of the compiled small Llama blocks (training step), torch vs tilewright."""
import logging, sys, torch
from tilewright.bench import model
which = sys.argv[1]
case = [c for c in model.SUITES["default"] if c.tag == "llama-small"][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16).requires_grad_(True)
blk = torch.compile(ref if which == "torch" else ours)
for _ in range(3):
    blk(x).sum().backward()
torch.cuda.synchronize()
