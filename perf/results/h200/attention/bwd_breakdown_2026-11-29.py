"""Where fwd + bwd time goes on the GQA rows that trail cuDNN (issue 15): per (row, heads-per-CTA setting), the
public op's fwd + bwd wall time (triton do_bench median, settings interleaved over ROUNDS rounds: the spread between
rounds is part of the answer) and a torch.profiler breakdown of one warm fwd + bwd step into its kernels (mean GPU us
per kernel name over STEPS steps) beside the step's wall time - so host time (wall - sum of kernels, on a step that
is not overlapped) and each kernel's share are separate. cuDNN (K / V repeated) in the same process.
Run: PYTHONPATH=src python bwd_breakdown_2026-11-29.py > out.csv (lines: kind,row,setting,name,value)."""
import contextlib
import os
import statistics
import time

os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = "1"
import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import tilewright
from tilewright.cuda_fallback import attention_bwd_sm90 as cb
from tilewright.ops import attention as ops_attention

ROWS = ((1, 28, 4, 3000, 96, True), (1, 28, 4, 3000, 128, True), (1, 32, 8, 2048, 128, True),
        (2, 32, 8, 1024, 128, True), (1, 32, 8, 1024, 128, True))
ROUNDS, STEPS = int(os.environ.get("ROUNDS", 3)), 10
torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
for (B, Hq, Hkv, S, D, causal) in ROWS:
    row = f"B{B}_{Hq}/{Hkv}_S{S}_D{D}_{'causal' if causal else 'full'}"
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    kk = k.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()
    vv = v.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()
    group = Hq // Hkv
    settings = ["rule"] + [str(h) for h in sorted({group, 4, 3, 2, 1} & set(range(1, group + 1)), reverse=True)]

    def fb(fn, *args):
        def run():
            torch.autograd.grad(fn(*args), args, do)
        return run

    tw = fb(lambda q, k, v: tilewright.flash_attention(q, k, v, causal=causal), q, k, v)
    sd = fb(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, kk, vv)

    def use(setting):
        if setting == "rule":
            os.environ.pop(cb.SPLIT_ENV, None)
        else:
            os.environ[cb.SPLIT_ENV] = setting
        ops_attention._cuda_plans.clear()

    for r in range(ROUNDS):
        for s in settings:
            use(s)
            print(f"bench,{row},{s},round{r},{triton.testing.do_bench(tw, warmup=30, rep=200, return_mode='median'):.4f}",
                  flush=True)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            print(f"bench,{row},cudnn,round{r},{triton.testing.do_bench(sd, warmup=30, rep=200, return_mode='median'):.4f}",
                  flush=True)
    for s in settings + ["cudnn"]:
        if s != "cudnn":
            use(s)
        ctx = sdpa_kernel(SDPBackend.CUDNN_ATTENTION) if s == "cudnn" else contextlib.nullcontext()
        with ctx:
            fn = sd if s == "cudnn" else tw
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            walls = []
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(STEPS):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    fn()
                    torch.cuda.synchronize()
                    walls.append((time.perf_counter() - t0) * 1e6)
        print(f"wall,{row},{s},step_us,{statistics.median(walls):.1f}", flush=True)
        total = 0.0
        for e in prof.key_averages():
            if e.device_type == torch.autograd.DeviceType.CUDA and e.count:
                us = e.device_time_total / STEPS
                total += us
                print(f"kernel,{row},{s},{e.key[:90].replace(',', ';')},{us:.1f}", flush=True)
        print(f"kernels,{row},{s},sum_us,{total:.1f}", flush=True)
    os.environ.pop(cb.SPLIT_ENV, None)
    del q, k, v, kk, vv, do
