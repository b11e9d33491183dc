"""The attention training step the session-27 host scripts time (bwd_breakdown, bwd_host_profile, bwd_host_gc
`_2026-11-29.py`, run from this folder's path so this module is importable): one row's inputs, tilewright's and
cuDNN's forward + backward steps on them, and the per-step host / wall clock of queued steps."""
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilewright


def row_name(B, Hq, Hkv, S, D, causal) -> str:
    return f"B{B}_{Hq}/{Hkv}_S{S}_D{D}_{'causal' if causal else 'full'}"


class Step:
    """Fresh bf16 q, k, v (requiring grad), dO, and K / V repeated over the GQA group for cuDNN; ``tw()`` / ``sd()``:
    one forward + backward (torch.autograd.grad of the three inputs) through tilewright.flash_attention / SDPA's
    cuDNN backend."""

    def __init__(self, B, Hq, Hkv, S, D, causal):
        self.causal = causal
        self.q, self.k, self.v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                                  for H in (Hq, Hkv, Hkv))
        self.do = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
        self.kk = self.k.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()
        self.vv = self.v.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()

    def tw(self):
        q, k, v = self.q, self.k, self.v
        torch.autograd.grad(tilewright.flash_attention(q, k, v, causal=self.causal), (q, k, v), self.do)

    def sd(self):
        q, kk, vv = self.q, self.kk, self.vv
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.autograd.grad(F.scaled_dot_product_attention(q, kk, vv, is_causal=self.causal), (q, kk, vv),
                                self.do)


def per_step_us(fn, steps: int) -> tuple[float, float]:
    """(host, wall) us per step of ``steps`` calls of ``fn`` queued without a sync (host: until the last call
    returns; wall: until the GPU finished). Host-bound when the two are equal."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    host = (time.perf_counter() - t0) / steps * 1e6
    torch.cuda.synchronize()
    return host, (time.perf_counter() - t0) / steps * 1e6
