"""Issue 14 item 4, the odd row: the direct store of odd-pitch outputs (gemm_sm90.cu TW_STORE_DIRECT, session 43)
against the TMA store on the same output and on an output padded to the 128-byte grid, cuBLAS beside them on the
contiguous output - CUDA-graph replays interleaved, one process. Session 36 measured the TMA store at pitch 5000
1.082-1.102x cuBLAS's time, padded 1.036-1.050x (odd_pitch_probe_s36.txt). Prediction: the direct store within ~1%
of the padded TMA store, i.e. the odd row ~1.05x cuBLAS's time (0.95x its speed). Also: the outputs bit-equal.

    PYTHONPATH=src python perf/results/h200/gemm/direct_store_ab_2026-12-08.py > $OUT/direct_store_ab.txt"""
import torch

from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import gemm_sm90 as cg

print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
direct_rule = cg.direct_store
SHAPES = ((3000, 5000, 4000), (3000, 5000, 4096), (2048, 5000, 4096), (1000, 1000, 1000), (2000, 3000, 1000),
          (16384, 1000, 2048), (8192, 1000, 4096), (4096, 5000, 2048))
for M, N, K in SHAPES:
    torch.manual_seed(M + N + K)
    tile = cg.pick_variant(M, N, K).name
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
    z = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    padded = -(-N // 64) * 64
    outs = {"direct": torch.empty(M, N, device="cuda", dtype=torch.bfloat16),
            "tma same pitch": torch.empty(M, N, device="cuda", dtype=torch.bfloat16),
            f"tma pitch {padded}": torch.empty(M, padded, device="cuda", dtype=torch.bfloat16)[:, :N]}

    def launcher(name, o):
        def run():
            # the store is chosen when a launch is prepared (cached per address): force the TMA store for its output
            cg.direct_store = (lambda out: False) if name == "tma same pitch" else direct_rule
            try:
                cg.launch_cuda_gemm(x, w.t(), o, variant=tile)
            finally:
                cg.direct_store = direct_rule
        return run

    fns = {name: launcher(name, o) for name, o in outs.items()}
    fns["cublas"] = lambda: torch.mm(x, w.t(), out=z)
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    same = all(torch.equal(o, outs["direct"]) for o in outs.values())
    err = max((o.float() - z.float()).abs().max().item() for o in outs.values())
    ms = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=15)))
    print(f"{M}x{N}x{K} [{tile}, direct rule: {direct_rule(outs['direct'])}]: "
          + " | ".join(f"{k} {v * 1e3:.1f} us ({v / ms['cublas']:.3f}x cuBLAS time)" for k, v in ms.items())
          + f" | bit-equal {same} | max |ours - cuBLAS| {err:.3g}", flush=True)
