"""Issue 16's short decode rows (>= 1.2x SDPA wanted; B 1 x 1k ran 1.16x cuDNN with the PDL combine): split count,
keys a step, warps and ring depth around the default on B 1 / 2 / 8 x 1k / 2k / 4k (GQA 32/8, D 128, bf16, contiguous
and pages of 16), cuDNN's SDPA beside, CUDA-graph replays interleaved with the L2 flushed. The 2026-11-28 sweep held
the split count at its default (16 at B 1) - the combine's share at 1k keys (16 partials of 64 keys) is untested.

    PYTHONPATH=src python perf/results/h200/decode/short_rows_splits_2026-11-29.py > $OUT/short_rows_splits.txt"""
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
    default = kv.default_splits(B, Hkv, S, q.device)
    want = kv.kvcache_attention(q, kc, vc, sl, None)[0].float()
    variants = {"default": lambda: kv.kvcache_attention(q, kc, vc, sl, None),
                "paged16": lambda: kv.kvcache_attention(q, pk, pv, sl, tb)}
    for splits, bn, warps, stages in itertools.product(sorted({max(1, default // 4), max(1, default // 2), default,
                                                               default * 2}), (32, 64), (2, 4), (2, 3)):
        if S // splits < bn:
            continue
        config = {"block_n": bn, "num_warps": warps, "num_stages": stages}
        name = f"s{splits}_n{bn}_w{warps}_st{stages}"
        fn = (lambda s=splits, c=config: kv.kvcache_attention(q, kc, vc, sl, None, num_splits=s, config=c))
        err = (fn()[0].float() - want).abs().max().item()
        assert err <= 2e-2, (name, err)
        variants[name] = fn

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2),
                                                                    vc.transpose(1, 2), enable_gqa=True)
    variants["sdpa_cudnn"] = cudnn
    names = list(variants)
    ms = dict(zip(names, graph_ms_alternating([variants[n] for n in names], calls=10, replays=7)))
    best = min((n for n in names if n not in ("sdpa_cudnn", "paged16")), key=ms.get)
    print(f"B{B} S{S} (default splits {default}): default {ms['default'] * 1e3:.2f} us "
          f"({ms['sdpa_cudnn'] / ms['default']:.3f}x cudnn), paged16 {ms['paged16'] * 1e3:.2f} "
          f"({ms['paged16'] / ms['default']:.3f}x contiguous), best {best} {ms[best] * 1e3:.2f} "
          f"({ms['sdpa_cudnn'] / ms[best]:.3f}x), cudnn {ms['sdpa_cudnn'] * 1e3:.2f}", flush=True)
    for n in sorted(names, key=ms.get)[:6]:
        print(f"    {n:24s} {ms[n] * 1e3:7.2f} us", flush=True)
