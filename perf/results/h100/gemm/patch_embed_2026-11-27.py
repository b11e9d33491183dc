"""The ViT prefill's patch embedding: x (8, 2048, 768) @ W^T (768 -> 1024) + pos_embed (2048, 1024), no grad:
tilewright (router's pick, forced triton, forced cuda) vs cuBLAS F.linear + add and bare F.linear, do_bench."""
import os
import torch, triton
import torch.nn.functional as F
import tilewright
os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
x = torch.randn(8, 2048, 768, device="cuda", dtype=torch.bfloat16)
w = torch.randn(1024, 768, device="cuda", dtype=torch.bfloat16) / 768 ** 0.5
pos = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
b = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
t = lambda f: triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median") * 1e3
rows = {
    "cublas F.linear": lambda: F.linear(x, w),
    "cublas F.linear + pos": lambda: F.linear(x, w) + pos,
    "tw linear (auto)": lambda: tilewright.linear(x, w),
    "tw linear + pos (auto)": lambda: tilewright.linear(x, w, residual=pos),
    "tw linear + pos (triton)": lambda: tilewright.linear(x, w, residual=pos, backend="triton"),
    "tw linear + pos (cuda)": lambda: tilewright.linear(x, w, residual=pos, backend="cuda"),
    "tw linear + full residual (auto)": lambda: tilewright.linear(x, w, residual=x.new_ones(8, 2048, 1024)),
}
for name, f in rows.items():
    try:
        f()
        print(f"{name:34s} {t(f):8.1f} us", flush=True)
    except Exception as e:
        print(f"{name:34s} error {type(e).__name__}: {str(e)[:100]}", flush=True)
