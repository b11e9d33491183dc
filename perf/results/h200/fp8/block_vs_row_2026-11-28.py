"""Block-scaled vs row-wise sm_90a FP8 GEMM (issue 19: block >= 0.95x row-wise), cuBLASLt row-wise beside them, with
a cooling gap between providers (the 0935 run showed a provider timed right after the fastest one inherits its
power-limited clocks): per round and provider, 3 warm-up launches, 20 timed by CUDA events, then 0.3 s idle;
5 rounds in rotating order, medians. Block scales from quantize_fp8 (1 x 128 / 128 x 128)."""
import time
import statistics
import torch
import tilewright
from tilewright.cuda_fallback import fp8_gemm_sm90 as f8
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
for M, N, K in [(8192, 8192, 8192), (8192, 28672, 4096), (4096, 4096, 4096), (2048, 7168, 2048)]:
    g = torch.Generator(device="cuda").manual_seed(M + N)
    x, w = torch.randn(M, K, device="cuda", generator=g), torch.randn(N, K, device="cuda", generator=g)
    a8, sx = tilewright.quantize_fp8(x, block=(1, 128))
    w8, sw = tilewright.quantize_fp8(w, block=(128, 128))
    b8 = w8.t()
    sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    swt = sw.t().contiguous()  # (K/128, N/128) row-major, the kernel's scale_b
    sx_col = sx.t().contiguous().t()  # scale_a already column-major: no copy in the launcher
    fns = {"cuda_row": lambda: f8.launch_fp8_gemm(a8, b8, sa, sb, out),
           "cuda_block": lambda: f8.launch_fp8_gemm(a8, b8, sx, swt, out),
           "cuda_block_colmajor": lambda: f8.launch_fp8_gemm(a8, b8, sx_col, swt, out),
           "cublaslt_row": lambda: torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16)}
    times = {k: [] for k in fns}
    names = list(fns)
    for rnd in range(5):
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:
            fn = fns[name]
            for _ in range(3):
                fn()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(20):
                fn()
            e1.record()
            torch.cuda.synchronize()
            times[name].append(e0.elapsed_time(e1) / 20)
            time.sleep(0.3)
    med = {k: statistics.median(v) for k, v in times.items()}
    fl = 2 * M * N * K
    print(f"{M}x{N}x{K}: " + "  ".join(f"{k} {v * 1e3:.1f} us ({fl / v / 1e9:.0f} TF/s)" for k, v in med.items())
          + f" | block / row {med['cuda_row'] / med['cuda_block']:.3f} (column-major scales "
          f"{med['cuda_row'] / med['cuda_block_colmajor']:.3f}), row vs cuBLASLt "
          f"{med['cublaslt_row'] / med['cuda_row']:.3f}", flush=True)
