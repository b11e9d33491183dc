"""A/B of the boundary-band rule (kvcache_attention.boundary_band: B x Hkv from one to two waves -> ~3 splits a
program and the short ring) against the launch it replaces (unsplit, 128-key 3-deep ring; or the short ring at B 33
x 2k, where the short-wave rule gave it), cuDNN interleaved, 3 rounds of the alternating timer (graph replays, cold
L2), outputs checked against SDPA's math backend in fp32. Writes $OUT/band_ab.csv."""
import os, warnings, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from tilewright.triton_kernels import kvcache_attention as kv
from tilewright.bench.common import graph_ms_alternating
warnings.filterwarnings("ignore")
out = os.environ.get("OUT", ".")
print(torch.cuda.get_device_name(), flush=True)
res = []
for B, S in [(17, 2048), (17, 8192), (17, 32768), (20, 4096), (24, 1024), (24, 8192), (32, 1024), (32, 8192),
             (33, 2048), (16, 2048), (22, 2048), (28, 4096)]:
    Hq, Hkv, D = 32, 8, 128
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    fns = {"default": lambda: kv.kvcache_attention(q, kc, vc, sl, None),
           "unsplit128x3": lambda: kv.kvcache_attention(q, kc, vc, sl, None, num_splits=1,
                                                        config=dict(block_n=128, num_stages=3)),
           "unsplit64x3": lambda: kv.kvcache_attention(q, kc, vc, sl, None, num_splits=1,
                                                       config=dict(block_n=64, num_stages=3))}
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2).float(), kc.transpose(1, 2).float(),
                                                           vc.transpose(1, 2).float(), enable_gqa=True)
    ref = ref.transpose(1, 2)
    for name, fn in fns.items():
        err = (fn()[0].float() - ref).abs().max().item()
        assert err <= 2e-2, (name, B, S, err)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2),
                                                                    vc.transpose(1, 2), enable_gqa=True)
    fns["sdpa_cudnn"] = cudnn
    rounds = [graph_ms_alternating(list(fns.values()), calls=10, replays=9) for _ in range(3)]
    times = dict(zip(fns, [sorted(r[i] for r in rounds)[1] for i in range(len(fns))]))
    splits = kv.default_splits(B, Hkv, S, q.device)
    for name, ms in times.items():
        res.append(dict(B=B, Hq=Hq, Hkv=Hkv, S=S, provider=name, us=ms * 1e3, vs_cudnn=times["sdpa_cudnn"] / ms,
                        default_splits=splits))
    print(f"B{B} S{S} ({B * Hkv} programs, default {splits} splits): " + " ".join(
        f"{k}={v * 1e3:.1f}us" for k, v in times.items()) + f" | default / unsplit128x3 "
        f"{times['default'] / times['unsplit128x3']:.3f}, default vs cudnn {times['sdpa_cudnn'] / times['default']:.3f}x",
        flush=True)
    del kc, vc; torch.cuda.empty_cache()
import pandas as pd
pd.DataFrame(res).to_csv(f"{out}/band_ab.csv", index=False)
