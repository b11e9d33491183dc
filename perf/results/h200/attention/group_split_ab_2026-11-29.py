"""A/B of the dK / dV kernel's GQA group split (heads_per_cta) through the public op: forward + backward of
tilewright (TILEWRIGHT_ATEN_BELOW=0: no SDPA route; TILEWRIGHT_CUDA_ATTN_BWD=1) at each heads-per-CTA setting -
the whole group, the rule's pick, and the others - and cuDNN (K / V repeated for GQA) in the same process; medians of
triton's do_bench, settings interleaved over two rounds. One line per (row, setting): row, setting, ms, cuDNN ms."""
import os

os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = "1"
import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilewright
from tilewright.cuda_fallback import attention_bwd_sm90 as cb
from tilewright.ops import attention as ops_attention

ROWS = ((1, 28, 4, 3000, 96, True), (1, 32, 8, 2048, 128, True), (1, 32, 4, 4096, 128, True),
        (2, 32, 8, 1024, 128, True), (1, 16, 2, 8192, 128, True), (1, 28, 4, 3000, 128, False))
torch.manual_seed(0)
sms = torch.cuda.get_device_properties(0).multi_processor_count
for (B, Hq, Hkv, S, D, causal) in ROWS:
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    kk = k.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()
    vv = v.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()
    group = Hq // Hkv
    os.environ.pop(cb.SPLIT_ENV, None)
    rule = cb.heads_per_cta(-(-S // 128) * Hkv * B, group, sms)
    settings = sorted({group, rule, 1, 2, 3, 4} & set(range(1, group + 1)), reverse=True)

    def fb(fn, *args):
        def run():
            torch.autograd.grad(fn(*args), args, do)
        return run

    tw = lambda q, k, v: tilewright.flash_attention(q, k, v, causal=causal)  # noqa: E731
    sd = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    times = {h: [] for h in settings}
    cudnn = []
    for _ in range(2):
        for h in settings:
            os.environ[cb.SPLIT_ENV] = str(h)
            ops_attention._cuda_plans.clear()
            times[h].append(triton.testing.do_bench(fb(tw, q, k, v), warmup=30, rep=200, return_mode="median"))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            cudnn.append(triton.testing.do_bench(fb(sd, q, kk, vv), warmup=30, rep=200, return_mode="median"))
    c = min(cudnn)
    for h in settings:
        tag = f"{h}{'*' if h == rule else ''}{' (whole)' if h == group else ''}"
        print(f"B{B}_{Hq}/{Hkv}_S{S}_D{D}_{'causal' if causal else 'full'},heads {tag},{min(times[h]):.4f},{c:.4f},"
              f"{c / min(times[h]):.3f}x", flush=True)
    del q, k, v, kk, vv, do
os.environ.pop(cb.SPLIT_ENV, None)
