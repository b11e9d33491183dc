"""Where the 176-key blocks (variant c176) beat c at head dim 128: a grid over lengths, masks, MHA / GQA and short
query blocks against long caches, c / c176 / the public op (backend="cuda": the rule's pick) / cuDNN, forward only,
CUDA-graph replays interleaved with the L2 flushed. Session 32 routed c176 from one seven-row run (no mask >= 2048
keys, causal >= 8192); this grid is what a finer rule would be read from.

    PYTHONPATH=src python perf/results/h200/attention/wide_key_rule_2026-11-29.py > $OUT/wide_key_rule.txt"""
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import attention_sm90 as ca

warnings.filterwarnings("ignore")
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
D = 128
# (B, Hq, Hkv, Sq, Skv, causal): B x S = 16k tokens at S 1k-16k, both masks, MHA and GQA 4; then short query blocks
# against long key ranges (chunked prefill, bottom-right alignment is the op's; here top-left as SDPA's)
ROWS = [(max(1, 16384 // S), H, H // g, S, S, causal) for S in (1024, 2048, 4096, 8192, 16384)
        for causal in (False, True) for H, g in ((16, 1), (32, 4))]
ROWS += [(4, 16, 16, 512, 4096, False), (4, 32, 8, 1024, 8192, False), (8, 16, 16, 256, 2048, False)]
for i, (B, Hq, Hkv, Sq, Skv, causal) in enumerate(ROWS):
    torch.manual_seed(i)
    q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, Skv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    g = Hq // Hkv
    kk, vv = (t.repeat_interleave(g, 1) for t in (k, v)) if g > 1 else (k, v)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)

    fns = [lambda: ca.cuda_attention(q, k, v, causal=causal, variant="c"),
           lambda: ca.cuda_attention(q, k, v, causal=causal, variant="c176"),
           lambda: tilewright.flash_attention(q, k, v, causal=causal, backend="cuda"), cudnn]
    with torch.no_grad():
        ms = graph_ms_alternating(fns, calls=10, replays=9)
    pick = ca.pick_variant(D, causal, Sq, Skv).name
    print(f"B{B}_{Hq}/{Hkv}_Sq{Sq}_Skv{Skv}_{'causal' if causal else 'full'}: c {ms[2 - 2]:.4f} ({ms[3] / ms[0]:.3f}x) "
          f"c176 {ms[1]:.4f} ({ms[3] / ms[1]:.3f}x) c176/c {ms[0] / ms[1]:.3f} | op [{pick}] {ms[2]:.4f} "
          f"({ms[3] / ms[2]:.3f}x) | cudnn {ms[3]:.4f}", flush=True)
    del q, k, v, kk, vv
    torch.cuda.empty_cache()
