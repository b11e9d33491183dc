import torch, torch.nn.functional as F
import tilewright
q = torch.randn(2, 2048, 16, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
k, v = (torch.randn(2, 2048, 4, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True) for _ in "kv")
do = torch.randn_like(q)
gs = []
for _ in range(3):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    gs.append(torch.autograd.grad(o, (q, k, v), do))
o = tilewright.flash_attention(q, k, v, causal=True)
tw = torch.autograd.grad(o, (q, k, v), do)
for i, n in enumerate("qkv"):
    print(n, "sdpa run-to-run equal:", torch.equal(gs[0][i], gs[1][i]), torch.equal(gs[0][i], gs[2][i]),
          "max diff", (gs[0][i] - gs[1][i]).abs().max().item(), "| tw vs sdpa", (tw[i] - gs[0][i]).abs().max().item(),
          "max", gs[0][i].abs().max().item())
