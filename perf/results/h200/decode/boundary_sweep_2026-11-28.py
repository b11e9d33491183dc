"""Decode rows whose B x Hkv lands just past the SM count (session 25's A/B: B 17 x 8 heads x 2k, 136 programs on 132
SMs, ran 0.66x cuDNN - one wave and four programs): split count x launch shape, the default and SDPA cuDNN beside
them, interleaved per row (graph replays, cold L2). Writes $OUT/boundary_sweep.csv."""
import os, time, warnings, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from tilewright.triton_kernels import kvcache_attention as kv
from tilewright.bench.common import graph_ms_alternating
warnings.filterwarnings("ignore")
out = os.environ.get("OUT", ".")
print(torch.cuda.get_device_name(), flush=True)
rows = [(17, 2048), (17, 8192), (20, 4096), (24, 1024), (24, 8192), (33, 2048), (40, 8192), (48, 4096), (16, 2048)]
res, t0 = [], time.time()
for B, S in rows:
    Hq, Hkv, D = 32, 8, 128
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    ref = kv.kvcache_attention(q, kc, vc, sl, None)[0].float()
    names, fns = ["default"], [lambda: kv.kvcache_attention(q, kc, vc, sl, None)]
    for sp in (1, 2, 3, 4, 6, 8):
        for bn, st in ((128, 3), (64, 2), (64, 3)):
            if S / sp < bn:
                continue
            cfg = dict(block_n=bn, num_warps=4, num_stages=st)
            fn = (lambda cfg=cfg, sp=sp: kv.kvcache_attention(q, kc, vc, sl, None, num_splits=sp, config=cfg))
            if (fn()[0].float() - ref).abs().max().item() > 2e-2:
                print(f"  s{sp} {bn}x{st}: wrong - skipped", flush=True)
                continue
            names.append(f"s{sp}_{bn}x{st}")
            fns.append(fn)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2),
                                                                    vc.transpose(1, 2), enable_gqa=True)
    names.append("sdpa-cudnn"); fns.append(cudnn)
    times = dict(zip(names, graph_ms_alternating(fns, calls=10, replays=9)))
    for k, v in times.items():
        res.append(dict(B=B, Hq=Hq, Hkv=Hkv, S=S, config=k, us=v * 1e3, vs_cudnn=times["sdpa-cudnn"] / v))
    best = min((k for k in times if k != "sdpa-cudnn"), key=times.get)
    print(f"B{B} S{S} ({B * Hkv} programs unsplit): default {times['default'] * 1e3:.1f} us "
          f"({times['sdpa-cudnn'] / times['default']:.3f}x cudnn), best {best} {times[best] * 1e3:.1f} "
          f"({times['sdpa-cudnn'] / times[best]:.3f}x); by split (128x3): " + ", ".join(
              f"s{sp} {times[f's{sp}_128x3'] * 1e3:.1f}" for sp in (1, 2, 3, 4, 6, 8) if f"s{sp}_128x3" in times)
          + f"; t={time.time() - t0:.0f}s", flush=True)
    del kc, vc; torch.cuda.empty_cache()
import pandas as pd
pd.DataFrame(res).to_csv(f"{out}/boundary_sweep.csv", index=False)
