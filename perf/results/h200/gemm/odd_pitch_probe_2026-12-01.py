"""Issue 14 item 4's `odd` row, second probe: session 36's first probe (odd_shape_probe_s36.txt) put the cost on N = 5000,
not K = 4000 (3000 x 5000 x 4096 1.088x cuBLAS's time on the 192-column tile, 3000 x 5120 x 4096 0.988x - the same 27
column tiles, the same waves). What N = 5000 changes besides the work: the output's rows are 10,000 bytes, so every
row of a 128-byte TMA store box straddles two 128-byte lines and half the rows start mid-sector. Here the same
GEMM stores into outputs whose row pitch is padded (5056 elements: 128-byte rows; 5120) - views of a wider buffer,
the same kernel - and the weight's rows padded likewise, against cuBLAS on the contiguous output.

    PYTHONPATH=src python perf/results/h200/gemm/odd_pitch_probe_2026-12-01.py > $OUT/odd_pitch_probe.txt"""
import torch

from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import gemm_sm90 as cg

print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
for M, N, K in ((3000, 5000, 4000), (3000, 5000, 4096), (2048, 5000, 4096), (4096, 3000, 4096)):
    torch.manual_seed(M + N + K)
    tile = cg.pick_variant(M, N, K).name
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
    z = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    outs = {p: torch.empty(M, p, device="cuda", dtype=torch.bfloat16)[:, :N] for p in (N, -(-N // 64) * 64, -(-N // 256) * 256)}
    fns = {f"out pitch {p}": (lambda o=o: cg.launch_cuda_gemm(x, w.t(), o, variant=tile)) for p, o in outs.items()}
    fns["cublas"] = lambda: torch.mm(x, w.t(), out=z)
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    err = max((o.float() - z.float()).abs().max().item() for o in outs.values())
    ms = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=15)))
    print(f"{M}x{N}x{K} [{tile}]: " + " | ".join(f"{k} {v * 1e3:.1f} us ({v / ms['cublas']:.3f}x cuBLAS time)"
                                               for k, v in ms.items()) + f" | max |ours - cuBLAS| {err:.3g}", flush=True)
