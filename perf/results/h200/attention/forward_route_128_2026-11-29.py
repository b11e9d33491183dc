"""The public forward (no backend named, torch.no_grad) at head dim 128 after session 32's routing rule
(ops/_aten.forward_keeps_kernels: cuDNN's SDPA below 4096 keys, the kernels - c176 where it pays - above), against
SDPA on cuDNN and the forced CUDA kernel, graph replays interleaved, L2 flushed; the route each row took.

    PYTHONPATH=src python perf/results/h200/attention/forward_route_128_2026-11-29.py > $OUT/forward_route_128.txt

``--head-dim 96`` (any multiple of 8 the kernels take) measures another head dim on the same rows; ``--gqa-grid``
replaces the rows with grouped-query ones below 4096 keys (session 35's bench: the forced kernels 1.11 / 1.18x cuDNN
at 1 x 28/4 x 3000 x 96, full / causal, where the rule routes cuDNN): 28/4, 32/8 and 16/2 heads, B 1 and 4, S 2048
and 3000, both masks."""
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.ops import _aten, attention as attention_ops

warnings.filterwarnings("ignore")
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
D = int(sys.argv[sys.argv.index("--head-dim") + 1]) if "--head-dim" in sys.argv else 128
print(f"# head dim {D}", flush=True)
ROWS = [(max(1, 16384 // S), H, H // g, S, S, causal) for S in (1024, 2048, 4096, 8192)
        for causal in (False, True) for H, g in ((16, 1), (32, 4))]
ROWS += [(4, 16, 16, 512, 4096, False), (8, 16, 16, 256, 2048, False)]
if "--gqa-grid" in sys.argv:
    ROWS = [(B, H, Hkv, S, S, causal) for S in (2048, 3000) for H, Hkv in ((28, 4), (32, 8), (16, 2)) for B in (1, 4)
            for causal in (False, True)]
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
        op = tilewright.flash_attention(q, k, v, causal=causal)
        route = "sdpa" if any(type(r) is _aten.AtenAttention for r in attention_ops._replays.values()) else "kernels"
        err = (op.float() - cudnn().float()).abs().max().item()
        fns = [lambda: tilewright.flash_attention(q, k, v, causal=causal),
               lambda: tilewright.flash_attention(q, k, v, causal=causal, backend="cuda"), cudnn]
        ms = graph_ms_alternating(fns, calls=10, replays=9)
        print(f"B{B}_{Hq}/{Hkv}_Sq{Sq}_Skv{Skv}_{'causal' if causal else 'full'}: op [{route}] {ms[0]:.4f} "
              f"({ms[2] / ms[0]:.3f}x cudnn) | kernels {ms[1]:.4f} ({ms[2] / ms[1]:.3f}x) | cudnn {ms[2]:.4f} "
              f"| max |op - cudnn| {err:.2e}", flush=True)
        del q, k, v
        torch.cuda.empty_cache()
