"""Issue 16's paged rows (pages of 16 within 5% of contiguous wanted; session 34: 1.04-1.12x contiguous on the short
B 1 / 2 / 8 x 1k-4k rows, where a split has one or two steps and the first step's K / V loads wait on its table
entries): the paged launch's split count, keys a step, warps and ring depth around the short split band's shape,
with the entries prefetched (the default), the whole table row preloaded (TABLE_ROW_PREFETCH) and the in-step
lookup, against the contiguous default and cuDNN, graph replays interleaved with the L2 flushed. A paged setting within 5% of contiguous on every row it applies to would be
the paged rule; none such says the table's round trip is the floor at these lengths.

    PYTHONPATH=src python perf/results/h200/decode/paged_short_rows_2026-11-29.py > $OUT/paged_short_rows.txt"""
import itertools
import warnings

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from tilewright.bench.common import graph_ms_alternating
from tilewright.bench.decode import _paged
from tilewright.triton_kernels import kvcache_attention as kv

warnings.filterwarnings("ignore")
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
for B, S in itertools.product((1, 2, 8), (1024, 2048, 4096)):
    Hq, Hkv, D = 32, 8, 128
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    pk, pv, tb = _paged(kc, vc, 16)
    band = kv.launch_shape(B, Hkv, S, 128, q.device, rows=Hq // Hkv)
    want = kv.kvcache_attention(q, kc, vc, sl, None)[0].float()
    variants = {"contiguous": lambda: kv.kvcache_attention(q, kc, vc, sl, None),
                "paged_default": lambda: kv.kvcache_attention(q, pk, pv, sl, tb),
                "paged_in_step": lambda: kv.kvcache_attention(q, pk, pv, sl, tb, config={"page_prefetch": False}),
                # TABLE_ROW_PREFETCH (session 34, CPU-checked bit-equal): the row loaded beside the length
                "paged_row": lambda: kv.kvcache_attention(q, pk, pv, sl, tb, config={"table_row_prefetch": True})}
    for splits, bn, warps, stages in itertools.product(sorted({max(1, band.splits // 4), max(1, band.splits // 2),
                                                               band.splits}), (16, 32, 64), (2, 4), (2, 3, 4)):
        if S // splits < bn:
            continue
        config = {"block_n": bn, "num_warps": warps, "num_stages": stages}
        name = f"paged_s{splits}_n{bn}_w{warps}_st{stages}"
        fn = (lambda s=splits, c=config: kv.kvcache_attention(q, pk, pv, sl, tb, num_splits=s, config=c))
        err = (fn()[0].float() - want).abs().max().item()
        assert err <= 2e-2, (name, err)
        variants[name] = fn
        if warps == 2 and stages == 3:  # the row prefetch at the band's warps and ring
            row = {**config, "table_row_prefetch": True}
            variants[name + "_row"] = (lambda s=splits, c=row: kv.kvcache_attention(q, pk, pv, sl, tb, num_splits=s,
                                                                                     config=c))

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2),
                                                                    vc.transpose(1, 2), enable_gqa=True)
    variants["sdpa_cudnn"] = cudnn
    names = list(variants)
    ms = dict(zip(names, graph_ms_alternating([variants[n] for n in names], calls=10, replays=7)))
    paged = [n for n in names if n.startswith("paged")]
    best = min(paged, key=ms.get)
    c = ms["contiguous"]
    print(f"B{B} S{S} (band {tuple(band)}): contiguous {c * 1e3:.2f} us ({ms['sdpa_cudnn'] / c:.3f}x cudnn), "
          f"paged default {ms['paged_default'] / c:.3f}x contiguous, in-step {ms['paged_in_step'] / c:.3f}x, row "
          f"prefetch {ms['paged_row'] / c:.3f}x, best "
          f"{best} {ms[best] / c:.3f}x ({ms['sdpa_cudnn'] / ms[best]:.3f}x cudnn)", flush=True)
    for n in sorted(paged, key=ms.get)[:5]:
        print(f"    {n:28s} {ms[n] * 1e3:7.2f} us", flush=True)
