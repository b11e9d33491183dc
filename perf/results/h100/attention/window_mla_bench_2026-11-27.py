"""Issue 15 rows: a sliding window's cost vs full causal (block skipping), and MLA-shaped Dv != D (192 / 128) vs SDPA's
backends that take it. bf16, H100; forward and forward+backward; do_bench medians."""
import torch, triton
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
import tilewright
print("card", torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
bench = lambda f: triton.testing.do_bench(f, warmup=10, rep=60, return_mode="median")
def rows(B, Hq, Hkv, S, D, Dv, variants):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(B, Hkv, S, Dv, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    do = torch.randn(B, Hq, S, Dv, device="cuda", dtype=torch.bfloat16, generator=g)
    for name, f in variants(q, k, v):
        try:
            f()
            with torch.no_grad():
                fwd = bench(f)
            fb = bench(lambda: torch.autograd.grad(f(), (q, k, v), do))
            print(f"B{B} H{Hq}/{Hkv} S{S} D{D}/{Dv} {name:<34} fwd {fwd:.4f} ms  fwd+bwd {fb:.4f} ms", flush=True)
        except Exception as e:
            print(f"B{B} H{Hq}/{Hkv} S{S} D{D}/{Dv} {name:<34} error {repr(e)[:160]}", flush=True)
def window_variants(q, k, v):
    yield "tilewright causal", lambda: tilewright.flash_attention(q, k, v, causal=True)
    yield "tilewright causal+window(4095,0)", lambda: tilewright.flash_attention(q, k, v, causal=True, window=(4095, 0))
    yield "tilewright causal+window(1023,0)", lambda: tilewright.flash_attention(q, k, v, causal=True, window=(1023, 0))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        pass
    yield "sdpa cudnn causal", lambda: _sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v)
def _sdpa(be, q, k, v, causal=True):
    with sdpa_kernel(be):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
def mla_variants(q, k, v):
    yield "tilewright causal", lambda: tilewright.flash_attention(q, k, v, causal=True)
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        yield f"sdpa {name} causal", lambda be=be: _sdpa(be, q, k, v)
rows(1, 16, 8, 16384, 128, 128, window_variants)
rows(2, 16, 16, 4096, 192, 128, mla_variants)
rows(1, 128, 128, 2048, 192, 128, mla_variants)
