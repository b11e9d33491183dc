"""A/B of the whole-wave short-sequence rule (kvcache_attention.short_waves: 64-key steps, 2-deep ring) against the
128-key 3-deep ring it replaces, on rows around the one it was chosen on (B 64 x 1k), cuDNN interleaved (graph
replays, cold L2, 3 rounds of the alternating timer). Writes $OUT/short_wave_ab.csv."""
import os, warnings, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from tilewright.triton_kernels import kvcache_attention as kv
from tilewright.bench.common import graph_ms_alternating
warnings.filterwarnings("ignore")
out = os.environ.get("OUT", ".")
print(torch.cuda.get_device_name(), flush=True)
res = []
for B, Hq, Hkv, S in [(64, 32, 8, 1024), (64, 32, 8, 2048), (32, 32, 8, 1024), (128, 32, 8, 1024), (17, 32, 8, 2048),
                      (64, 64, 8, 1024), (24, 32, 8, 512), (64, 32, 8, 4096)]:
    D = 128
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    fns = {"default": lambda: kv.kvcache_attention(q, kc, vc, sl, None),
           "ring128x3": lambda: kv.kvcache_attention(q, kc, vc, sl, None, config=dict(block_n=128, num_stages=3)),
           "ring64x2": lambda: kv.kvcache_attention(q, kc, vc, sl, None, config=dict(block_n=64, num_stages=2))}
    ref = fns["ring128x3"]()[0].float()
    for name, fn in fns.items():
        assert (fn()[0].float() - ref).abs().max().item() <= 2e-2, name

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2),
                                                                    vc.transpose(1, 2), enable_gqa=True)
    fns["sdpa_cudnn"] = cudnn
    rounds = [graph_ms_alternating(list(fns.values()), calls=10, replays=9) for _ in range(3)]
    med = [sorted(r[i] for r in rounds)[1] for i in range(len(fns))]
    times = dict(zip(fns, med))
    for name, ms in times.items():
        res.append(dict(B=B, Hq=Hq, Hkv=Hkv, S=S, provider=name, us=ms * 1e3, vs_cudnn=times["sdpa_cudnn"] / ms,
                        whole_waves=B * Hkv >= kv.num_sms(q.device)))
    print(f"B{B} {Hq}/{Hkv} S{S}: " + " ".join(f"{k}={v * 1e3:.1f}us" for k, v in times.items())
          + f" | 64x2 / 128x3 {times['ring64x2'] / times['ring128x3']:.3f}, default vs cudnn "
          f"{times['sdpa_cudnn'] / times['default']:.3f}x", flush=True)
    del kc, vc; torch.cuda.empty_cache()
import pandas as pd
pd.DataFrame(res).to_csv(f"{out}/short_wave_ab.csv", index=False)
