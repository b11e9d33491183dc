"""Decode launch shapes where the contiguous cache is still under SDPA's best or 85% of the copy bandwidth (issue 16;
session 23's bench on H200: B 64 x 1k 0.963x cuDNN at 0.827 of copy bandwidth, B 8 x 8k 0.847): split count x key
block x ring depth x warps, the default and SDPA cuDNN beside them, interleaved per row (graph replays, cold L2). The
whole-wave rows (B x Hkv >= SMs) never split today; only 64-key steps were tried there. Writes $OUT/wave_sweep.csv."""
import os, time, warnings, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from tilewright.triton_kernels import kvcache_attention as kv
from tilewright.bench.common import graph_ms_alternating
from tilewright.bench.decode import copy_bandwidth_gbps
warnings.filterwarnings("ignore")
out = os.environ.get("OUT", ".")
print(torch.cuda.get_device_name(), flush=True)
bw = copy_bandwidth_gbps()
print(f"copy bandwidth {bw:.0f} GB/s", flush=True)
rows = [(64, 32, 8, 1024), (64, 32, 8, 8192), (8, 32, 8, 8192), (64, 32, 8, 32768)]
res, t0 = [], time.time()
for B, Hq, Hkv, S in rows:
    D = 128
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    ref = kv.kvcache_attention(q, kc, vc, sl, None)[0].float()
    names, fns = ["default"], [lambda: kv.kvcache_attention(q, kc, vc, sl, None)]
    dflt = kv.default_splits(B, Hkv, S, q.device)
    for sp in sorted({1, 2, 3, 4, dflt, 2 * dflt}):
        for bn in (64, 128):
            for st in (2, 3, 4):
                for w in (4, 8):
                    if S / sp < bn:
                        continue
                    cfg = dict(block_n=bn, num_warps=w, num_stages=st)
                    fn = (lambda cfg=cfg, sp=sp: kv.kvcache_attention(q, kc, vc, sl, None, num_splits=sp, config=cfg))
                    try:
                        err = (fn()[0].float() - ref).abs().max().item()
                    except Exception as e:  # noqa: BLE001 - e.g. out of shared memory
                        print(f"  s{sp} {bn}x{st}w{w}: {type(e).__name__}", flush=True)
                        continue
                    if err > 2e-2:
                        print(f"  s{sp} {bn}x{st}w{w}: max err {err:.3e} - skipped", flush=True)
                        continue
                    names.append(f"s{sp}_{bn}x{st}w{w}")
                    fns.append(fn)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2),
                                                                    vc.transpose(1, 2), enable_gqa=True)
    names.append("sdpa-cudnn"); fns.append(cudnn)
    times = dict(zip(names, graph_ms_alternating(fns, calls=10, replays=9)))
    gbytes = 2 * B * S * Hkv * D * 2 / 1e9
    for k, v in times.items():
        res.append(dict(B=B, Hq=Hq, Hkv=Hkv, S=S, config=k, us=v * 1e3, vs_cudnn=times["sdpa-cudnn"] / v,
                        bw_frac=gbytes / (v * 1e-3) / bw, default_splits=dflt))
    best = min((k for k in times if k != "sdpa-cudnn"), key=times.get)
    print(f"B{B} S{S}: default {times['default'] * 1e3:.1f} us ({times['sdpa-cudnn'] / times['default']:.3f}x cudnn, "
          f"{gbytes / (times['default'] * 1e-3) / bw:.3f} bw), best {best} {times[best] * 1e3:.1f} us "
          f"({times['sdpa-cudnn'] / times[best]:.3f}x, {gbytes / (times[best] * 1e-3) / bw:.3f} bw), cudnn "
          f"{times['sdpa-cudnn'] * 1e3:.1f}; top5 " + ", ".join(f"{k} {times[k] * 1e3:.1f}" for k in
                                                               sorted(times, key=times.get)[:5])
          + f"; t={time.time() - t0:.0f}s", flush=True)
    del kc, vc; torch.cuda.empty_cache()
import pandas as pd
pd.DataFrame(res).to_csv(f"{out}/wave_sweep.csv", index=False)
