"""Forward-only attention below 4096 keys at head dims 128 and 96: tilewright's sm_90a kernels (backend forced) against
SDPA on cuDNN, over batch x heads, GQA or not, key lengths on and off the 128-key block grid, both masks - graph
replays interleaved, L2 flushed, and the route the public op took on each row.

Why: session 36's grouped-query grid (gqa_route_{96,128}_s36.txt) put the kernels at 1.01-1.30x cuDNN on every causal
row of 2048 / 3000 keys with B x Hq <= 128 and on every row of 3000 keys without the mask (1.09-1.12x), where the
rule (ops/_aten.forward_keeps_kernels) routes cuDNN; session 32's rows (B 8-16, MHA and 32/8) put them at 0.80-0.98x.
This grid separates the three candidates - grouped-query heads, the number of CTAs (B x Hq x query blocks), and key
lengths that are no multiple of 128 (3000 = 23.4 blocks) - before the rule changes.

    PYTHONPATH=src python perf/results/h200/attention/forward_route_grid_2026-12-01.py [--head-dim 96] > out.txt

``--tails``: the second grid - rows without the mask at key lengths on and off the 128 grid (1000-3900), and 3000 /
2048 keys against 2048 / 3000 query rows (which length's tail matters).

Each line: the row, the op's route, the op's / the forced kernels' time as a ratio to cuDNN's (> 1: faster than
cuDNN), cuDNN's time (ms); a CSV of the same goes to ``$OUT/forward_route_grid_d<D>.csv`` when OUT is set."""
import csv
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.ops import _aten, attention as attention_ops

warnings.filterwarnings("ignore")
D = int(sys.argv[sys.argv.index("--head-dim") + 1]) if "--head-dim" in sys.argv else 128
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, head dim {D}", flush=True)
ROWS = [(B, H, Hkv, S, S, causal) for S in (1024, 1536, 2048, 2560, 3000, 3584)
        for H, Hkv in ((16, 16), (32, 8), (28, 4)) for B in (1, 2, 4, 8) for causal in (False, True)]
TAG = ""
if "--tails" in sys.argv:
    TAG = "_tails"
    ROWS = [(B, H, Hkv, S, S, False) for S in (1000, 1100, 1600, 2000, 2100, 2112, 2176, 2500, 2900, 3100, 3500, 3900)
            for B, H, Hkv in ((1, 16, 16), (4, 16, 16), (2, 32, 8))]
    ROWS += [(B, H, Hkv, sq, skv, False) for sq, skv in ((3000, 2048), (2048, 3000), (3000, 3072), (3072, 3000))
             for B, H, Hkv in ((4, 16, 16), (2, 32, 8))]
out_dir = os.environ.get("OUT")
rows_out = []
with torch.no_grad():
    for i, (B, Hq, Hkv, Sq, Skv, causal) in enumerate(ROWS):
        torch.manual_seed(i)
        q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hkv, Skv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        gqa = Hq != Hkv

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        attention_ops._replays.clear()
        tilewright.flash_attention(q, k, v, causal=causal)
        route = "sdpa" if any(type(r) is _aten.AtenAttention for r in attention_ops._replays.values()) else "kernels"
        fns = [lambda: tilewright.flash_attention(q, k, v, causal=causal),
               lambda: tilewright.flash_attention(q, k, v, causal=causal, backend="cuda"), cudnn]
        ms = graph_ms_alternating(fns, calls=10, replays=7)
        name = f"B{B}_{Hq}/{Hkv}_S{Sq}" + (f"/{Skv}" if Skv != Sq else "") + f"_{'causal' if causal else 'full'}"
        print(f"{name}: op [{route}] {ms[2] / ms[0]:.3f}x | kernels {ms[2] / ms[1]:.3f}x | cudnn {ms[2]:.4f} ms",
              flush=True)
        rows_out.append(dict(B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Skv=Skv, causal=int(causal), head_dim=D, route=route,
                             op_ms=ms[0], kernels_ms=ms[1], cudnn_ms=ms[2]))
        del q, k, v
        torch.cuda.empty_cache()
if out_dir:
    with open(os.path.join(out_dir, f"forward_route_grid{TAG}_d{D}.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows_out[0]))
        w.writeheader()
        w.writerows(rows_out)
