"""Two questions from session 35's interleaved attention bench (head dim 128, forward only):
1. GQA 4 x 32/8 x 4096: the router's pick (provider "tilewright") ran 1.01x cuDNN, the forced CUDA forward 0.94x -
   which kernel does each call run (profiler names), and how fast is each with graph replays?
2. Causal 4096: the kernels ran 0.81x cuDNN at 4 x 32/32 (the rule keeps them from 4096 causal, measured 1.04-1.07x
   in session 32 on 4 x 16 rows): c / c176 / cp against cuDNN (SDPA as users call it: enable_gqa) on four rows.
Graph replays interleaved, L2 flushed.

    PYTHONPATH=src python perf/results/h200/attention/route_probe_2026-11-29.py > $OUT/route_probe.txt"""
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import attention_sm90 as ca

warnings.filterwarnings("ignore")
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
D = 128
ROWS = [(4, 32, 8, 4096, False), (4, 32, 8, 4096, True), (4, 32, 32, 4096, True), (4, 16, 16, 4096, True),
        (8, 16, 16, 2048, True), (2, 16, 16, 8192, True)]


def kernels(fn):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name[:60] for e in prof.events() if e.device_type.name == "CUDA"})


for i, (B, Hq, Hkv, S, causal) in enumerate(ROWS):
    torch.manual_seed(i)
    q = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)

    fns = {"routed": lambda: tilewright.flash_attention(q, k, v, causal=causal),
           "forced": lambda: tilewright.flash_attention(q, k, v, causal=causal, backend="cuda"),
           "c": lambda: ca.cuda_attention(q, k, v, causal=causal, variant="c"),
           "c176": lambda: ca.cuda_attention(q, k, v, causal=causal, variant="c176"),
           "cp": lambda: ca.cuda_attention(q, k, v, causal=causal, variant="cp"), "cudnn": cudnn}
    with torch.no_grad():
        for name in ("routed", "forced"):
            fns[name]()
            print(f"  {name}: {kernels(fns[name])}", flush=True)
        ms = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=9)))
    print(f"B{B}_{Hq}/{Hkv}_S{S}_{'causal' if causal else 'full'} [pick {ca.pick_variant(D, causal, S, S).name}]: "
          + " ".join(f"{n} {t * 1e3:.1f}us ({ms['cudnn'] / t:.3f}x)" for n, t in ms.items()), flush=True)
    del q, k, v
    torch.cuda.empty_cache()
