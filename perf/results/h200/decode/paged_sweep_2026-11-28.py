"""Paged decode launch shapes on H200 (issue 16: paged within 5% of contiguous; session 23's bench put pages of 16
5-11% over contiguous on most rows once the contiguous split regime took 128-key steps): block_n x ring depth x
split count for pages of 16 and 256, the contiguous default beside them and SDPA cuDNN, interleaved per row (graph
replays, cold L2). Also the whole-wave contiguous row B 64 x 1k with 64-key steps (the paged default ran it 2-4%
faster). Prints per row and page size: default, best, contiguous; writes $OUT/paged_sweep.csv."""
import os, time, warnings, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from tilewright.triton_kernels import kvcache_attention as kv
from tilewright.bench.common import graph_ms_alternating
from tilewright.bench.decode import _paged
warnings.filterwarnings("ignore")
out = os.environ.get("OUT", ".")
sms = torch.cuda.get_device_properties(0).multi_processor_count
print(f"{torch.cuda.get_device_name()}: {sms} SMs", flush=True)
rows = [(1, 32, 8, 1024), (1, 32, 8, 8192), (1, 32, 8, 32768), (1, 32, 8, 131072), (8, 32, 8, 1024),
        (8, 32, 8, 4096), (8, 32, 8, 8192), (8, 32, 8, 32768), (8, 64, 8, 32768), (64, 32, 8, 1024),
        (64, 32, 8, 8192)]
res, t0 = [], time.time()
for B, Hq, Hkv, S in rows:
    D = 128
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    ref = kv.kvcache_attention(q, kc, vc, sl, None)[0].float()
    names, fns = ["contiguous"], [lambda: kv.kvcache_attention(q, kc, vc, sl, None)]
    if B * Hkv >= sms:
        for st in (3, 4):
            names.append(f"contiguous_64x{st}")
            fns.append(lambda st=st: kv.kvcache_attention(q, kc, vc, sl, None,
                                                          config=dict(block_n=64, num_warps=4, num_stages=st)))
    dc = kv.default_splits(B, Hkv, S, q.device)
    dp = kv.default_splits(B, Hkv, S, q.device, paged=True)
    keep = []
    for page in (16, 256):
        pk, pv, tb = _paged(kc, vc, page)
        keep.append((pk, pv, tb))
        names.append(f"p{page}_default")
        fns.append(lambda pk=pk, pv=pv, tb=tb: kv.kvcache_attention(q, pk, pv, sl, tb))
        for bn, st in ((64, 3), (64, 4), (128, 2), (128, 3)):
            for sp in sorted({dc, dp, 2 * dc}):
                if S / sp < bn:
                    continue
                cfg = dict(block_n=bn, num_warps=4, num_stages=st)
                fn = (lambda pk=pk, pv=pv, tb=tb, cfg=cfg, sp=sp: kv.kvcache_attention(q, pk, pv, sl, tb,
                                                                                     num_splits=sp, config=cfg))
                err = (fn()[0].float() - ref).abs().max().item()
                if err > 2e-2:
                    print(f"  p{page} {bn}x{st}s{sp}: max err {err:.3e} - skipped", flush=True)
                    continue
                names.append(f"p{page}_{bn}x{st}s{sp}")
                fns.append(fn)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2),
                                                                    vc.transpose(1, 2), enable_gqa=True)
    names.append("sdpa-cudnn"); fns.append(cudnn)
    times = dict(zip(names, graph_ms_alternating(fns, calls=10, replays=9)))
    for k, v in times.items():
        res.append(dict(B=B, Hq=Hq, Hkv=Hkv, S=S, config=k, us=v * 1e3, vs_contiguous=v / times["contiguous"],
                        splits_contig=dc, splits_paged=dp))
    line = f"B{B} {Hq}/{Hkv} S{S}: contiguous {times['contiguous'] * 1e3:.1f} us, cudnn {times['sdpa-cudnn'] * 1e3:.1f}"
    for page in (16, 256):
        mine = {k: v for k, v in times.items() if k.startswith(f"p{page}_")}
        best = min(mine, key=mine.get)
        line += (f" | p{page} default {mine[f'p{page}_default'] / times['contiguous']:.3f}x contig, best {best} "
                 f"{mine[best] / times['contiguous']:.3f}x")
    for k in ("contiguous_64x3", "contiguous_64x4"):
        if k in times:
            line += f" | {k} {times[k] / times['contiguous']:.3f}x"
    print(line + f"; t={time.time() - t0:.0f}s", flush=True)
    del kc, vc, keep; torch.cuda.empty_cache()
import pandas as pd
pd.DataFrame(res).to_csv(f"{out}/paged_sweep.csv", index=False)
