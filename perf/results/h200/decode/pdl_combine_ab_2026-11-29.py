"""A/B of the combine as a programmatic dependent launch (config pdl_combine, session 31) against the ordinary second
launch, on the decode bench's rows (GQA 32/8, D 128, bf16, contiguous and pages of 16), SDPA cuDNN beside them,
interleaved per row (graph replays, cold L2). Prediction: the split-regime rows whose time is mostly launch latency
(B 1 x 1k-8k, B 8 x 1k) gain 1-1.5 us (B 1 x 1k ~6 us against 7.2); whole-wave rows (one split: no combine) level.

    PYTHONPATH=src python perf/results/h200/decode/pdl_combine_ab_2026-11-29.py   (writes $OUT/pdl_combine_ab.csv)"""
import os
import warnings

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from tilewright.bench.common import graph_ms_alternating
from tilewright.bench.decode import _DEFAULT, _paged
from tilewright.triton_kernels import kvcache_attention as kv

warnings.filterwarnings("ignore")
out_dir = os.environ.get("OUT", ".")
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
res = []
for B, Hq, Hkv, S, D in _DEFAULT:
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    pk, pv, tb = _paged(kc, vc, 16)
    fns = {"two_launch": lambda: kv.kvcache_attention(q, kc, vc, sl, None),
           "pdl": lambda: kv.kvcache_attention(q, kc, vc, sl, None, config={"pdl_combine": True}),
           "paged16": lambda: kv.kvcache_attention(q, pk, pv, sl, tb),
           "paged16_pdl": lambda: kv.kvcache_attention(q, pk, pv, sl, tb, config={"pdl_combine": True})}
    for base, pdl in (("two_launch", "pdl"), ("paged16", "paged16_pdl")):  # same kernels, same order: bit-equal
        want, got = fns[base](), fns[pdl]()
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), pdl
    assert (fns["paged16"]()[0].float() - fns["two_launch"]()[0].float()).abs().max().item() <= 2e-2

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2),
                                                                    vc.transpose(1, 2), enable_gqa=True)
    fns["sdpa_cudnn"] = cudnn
    times = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=9)))
    for name, ms in times.items():
        res.append(dict(B=B, Hq=Hq, Hkv=Hkv, S=S, provider=name, us=ms * 1e3,
                        splits=kv.default_splits(B, Hkv, S, q.device)))
    print(f"B{B} S{S}: " + " ".join(f"{k}={v * 1e3:.2f}us" for k, v in times.items())
          + f" | vs cudnn: pdl {times['sdpa_cudnn'] / times['pdl']:.3f}x, two-launch "
          f"{times['sdpa_cudnn'] / times['two_launch']:.3f}x", flush=True)
    kc = vc = pk = pv = None
    torch.cuda.empty_cache()
import pandas as pd  # noqa: E402

pd.DataFrame(res).to_csv(f"{out_dir}/pdl_combine_ab.csv", index=False)
