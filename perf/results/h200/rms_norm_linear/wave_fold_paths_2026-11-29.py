"""Issue 17, the folded forward without given sums at wave-balanced shapes (session 35: 3000 x 5120 x 5120 on the
192-column in-kernel-sums build 1.080x bare cuBLAS, with the sums given 1.007x): the launches themselves, graph
replays interleaved with the L2 flushed, bf16, the folded weight made once -
  in-kernel sums on the 192 tile (coop128x192s4-xf-roov: the default there) and on the 256 tile (coop128x256s3-xf-roov),
  the sum-of-squares pass + the rstd GEMM on the 192 tile and on the 256 tile,
  the rstd GEMM alone (sums given), bare cuBLAS (F.linear on the unfolded weight),
on issue 17's 3000 x 5120 x 5120, 6000 x 5120 x 5120 (also wave-balanced) and a 256-tile row (8192 x 4096 x 4096)
as the control. Outputs compared with the default's (rows' sums in another order: close, not bit-equal).

    PYTHONPATH=src python perf/results/h200/rms_norm_linear/wave_fold_paths_2026-11-29.py > $OUT/wave_fold_paths.txt"""
import torch
import torch.nn.functional as F

from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import rmsnorm_gemm_sm90 as rn
from tilewright.cuda_fallback import rstd_gemm_sm90 as rg
from tilewright.triton_kernels.rmsnorm_gemm import launch_row_sumsq

EPS = 1e-6
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
for M, N, K in ((3000, 5120, 5120), (6000, 5120, 5120), (8192, 4096, 4096)):
    torch.manual_seed(M + N)
    x = torch.randn(M, K, device="cuda").bfloat16()
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
    g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
    wg = (w.float() * g.float()).bfloat16()
    ss_given = x.float().square().sum(1)
    outs = {}

    def out(name):
        return outs.setdefault(name, (torch.empty(M, N, device="cuda", dtype=torch.bfloat16),
                                      torch.empty(M, device="cuda")))

    def in_kernel(variant):
        y, rstd = out(variant)
        return lambda: rn.launch_cuda_rmsnorm_gemm(x, wg[0], wg.t(), y, rstd, EPS, variant=variant)

    def pre_pass(variant):
        y, rstd = out("pass " + variant)
        ss = torch.empty(M, device="cuda")

        def run():
            launch_row_sumsq(x, ss)
            rg.launch_cuda_rstd_gemm(x, wg.t(), y, ss, rstd, EPS, variant=variant)
        return run

    def given(variant):
        y, rstd = out("given " + variant)
        return lambda: rg.launch_cuda_rstd_gemm(x, wg.t(), y, ss_given, rstd, EPS, variant=variant)

    fns = {"in-kernel 192": in_kernel("coop128x192s4-xf-roov"), "in-kernel 256": in_kernel("coop128x256s3-xf-roov"),
           "pass+rstd 192": pre_pass("coop128x192s4"), "pass+rstd 256": pre_pass("coop128x256s3"),
           "rstd 192 (sums given)": given("coop128x192s4"), "rstd 256 (sums given)": given("coop128x256s3"),
           "cublas": lambda: F.linear(x, w)}
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    base = outs["coop128x192s4-xf-roov"][0].float()
    diffs = {k: (v[0].float() - base).abs().max().item() for k, v in outs.items()}
    with torch.no_grad():
        ms = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=15)))
    cub = ms["cublas"]
    print(f"{M}x{N}x{K} [default folded build {rn.folded_variant(M, N, K)}]: "
          + " | ".join(f"{k} {v * 1e3:.1f} us ({v / cub:.3f}x)" for k, v in ms.items())
          + f" | max |y - in-kernel 192| {max(diffs.values()):.3g}", flush=True)
