"""Why session 35's attention bench (do_bench: eager calls, events, L2 flushed) and its graph-replay probe disagree
on cuDNN (4 x 32/32 x 4096 causal: bench cuDNN 0.93 ms, graph 1.17 ms; ours 1.15 / 1.18): each provider timed both
ways in one process, and cuDNN's kernel names eager and under graph capture.

    PYTHONPATH=src python perf/results/h200/attention/cudnn_graph_vs_eager_2026-11-29.py > $OUT/cudnn_modes.txt"""
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import tilewright
from tilewright.bench.common import graph_ms_alternating, time_ms_alternating

warnings.filterwarnings("ignore")
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
for B, Hq, Hkv, S, causal in ((4, 32, 32, 4096, True), (4, 32, 8, 4096, False), (4, 16, 16, 4096, True)):
    q = torch.randn(B, Hq, S, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, S, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)

    fns = [lambda: tilewright.flash_attention(q, k, v, causal=causal, backend="cuda"), cudnn]
    with torch.no_grad():
        for fn in fns:
            fn()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            cudnn()
            torch.cuda.synchronize()
        eager_names = sorted({e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"})
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
            cudnn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            g.replay()
            torch.cuda.synchronize()
        graph_names = sorted({e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"})
        eager = time_ms_alternating(fns)
        graph = graph_ms_alternating(fns, calls=10, replays=9)
    print(f"B{B}_{Hq}/{Hkv}_S{S}_{'causal' if causal else 'full'}: do_bench ours {eager[0] * 1e3:.1f} cudnn "
          f"{eager[1] * 1e3:.1f} ({eager[1] / eager[0]:.3f}x) | graph ours {graph[0] * 1e3:.1f} cudnn {graph[1] * 1e3:.1f} "
          f"({graph[1] / graph[0]:.3f}x)\n  cudnn eager kernels {eager_names}\n  cudnn graph kernels {graph_names}",
          flush=True)
    del q, k, v
    torch.cuda.empty_cache()
