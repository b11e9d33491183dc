"""A/B of the decode combine inside the split kernel (config fused_combine) against the second launch, on the
decode bench's rows (GQA 32/8, D 128, bf16, contiguous and pages of 16), SDPA cuDNN beside them, interleaved per row
(graph replays, cold L2). Written in session 22, not yet run: `PYTHONPATH=src python perf/results/h200/decode/
fused_combine_ab.py` on one GPU; prints a line per row and writes $OUT/fused_combine_ab.csv."""
import os, warnings, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from tilewright.triton_kernels import kvcache_attention as kv
from tilewright.bench.common import graph_ms_alternating
from tilewright.bench.decode import _DEFAULT, _paged
warnings.filterwarnings("ignore")
out_dir = os.environ.get("OUT", ".")
print(torch.cuda.get_device_name(), flush=True)
res = []
for B, Hq, Hkv, S, D in _DEFAULT:
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    pk, pv, tb = _paged(kc, vc, 16)
    fns = {"two_launch": lambda: kv.kvcache_attention(q, kc, vc, sl, None),
           "fused": lambda: kv.kvcache_attention(q, kc, vc, sl, None, config={"fused_combine": True}),
           "paged16_two_launch": lambda: kv.kvcache_attention(q, pk, pv, sl, tb),
           "paged16_fused": lambda: kv.kvcache_attention(q, pk, pv, sl, tb, config={"fused_combine": True})}
    want = fns["two_launch"]()[0].float()
    for name, fn in fns.items():
        assert (fn()[0].float() - want).abs().max().item() <= 2e-2, name

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2),
                                                                    vc.transpose(1, 2), enable_gqa=True)
    fns["sdpa_cudnn"] = cudnn
    times = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=9)))
    for name, ms in times.items():
        res.append(dict(B=B, Hq=Hq, Hkv=Hkv, S=S, provider=name, us=ms * 1e3, splits=kv.default_splits(B, Hkv, S, q.device)))
    print(f"B{B} S{S}: " + " ".join(f"{k}={v * 1e3:.1f}us" for k, v in times.items())
          + f" | fused vs cudnn {times['sdpa_cudnn'] / times['fused']:.3f}x, two-launch {times['sdpa_cudnn'] / times['two_launch']:.3f}x",
          flush=True)
    kc = vc = pk = pv = None  # free the row's caches before the next row allocates its own
    torch.cuda.empty_cache()
import pandas as pd
pd.DataFrame(res).to_csv(f"{out_dir}/fused_combine_ab.csv", index=False)
