"""Issue 17 (b): the rows' sums of squares handed from a residual GEMM to the RMSNorm after it (written in session
33, not yet run). CUDA graphs, L2 flushed, providers interleaved (bench.common.graph_ms_alternating); inference
(no_grad); TILEWRIGHT_RMS_FOLDED=capture so the folded forward runs inside the graphs, as in the earlier op tables.

A. Upstream: ``linear(a, W, residual=h, return_sumsq=True)`` against the same call without sums (prediction: <= 1.01x -
   the sums are ~2 instructions a stored value in the epilogue), against the call plus a pass over its output, and
   torch's F.linear + add. Checked first: y bit-equal to the plain call's, sums within 1e-5 of y's own.
B. Consumer: ``rms_norm_linear(h, g, W, sumsq=ss)`` on issue 17's rows against the op without sums, the eager and
   compiled unfused pair and the bare cuBLAS GEMM (target: <= 1.01x the bare GEMM), errors vs float64.
C. The hand-off as a user writes it (o_proj with the residual, then the next norm + projection): tilewright with and
   without the sums, torch eager and compiled.
"""
import os

os.environ.setdefault("TILEWRIGHT_RMS_FOLDED", "capture")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

import tilewright  # noqa: E402
from tilewright.bench.common import graph_ms_alternating  # noqa: E402
from tilewright.ops.gemm import row_sumsq  # noqa: E402

EPS = 1e-6
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
gen = torch.Generator(device="cuda").manual_seed(0)


def rnd(*shape, scale=1.0):
    return (torch.randn(*shape, device="cuda", generator=gen) * scale).bfloat16()


print("A. residual GEMM with sums (us; ratios to the plain call)", flush=True)
with torch.no_grad():
    for M, N, K in [(8192, 4096, 4096), (8192, 4096, 14336), (16384, 2048, 2048), (4096, 4096, 4096),
                    (2048, 4096, 4096), (16384, 2048, 5632)]:
        a, w, h = rnd(M, K), rnd(N, K, scale=K ** -0.5), rnd(M, N)
        y, ss = tilewright.linear(a, w, residual=h, return_sumsq=True)
        y0 = tilewright.linear(a, w, residual=h)
        same = torch.equal(y, y0)
        err = ((ss.double() - y.double().square().sum(-1)).abs() / y.double().square().sum(-1)).max().item()
        t = graph_ms_alternating([lambda: tilewright.linear(a, w, residual=h),
                                  lambda: tilewright.linear(a, w, residual=h, return_sumsq=True),
                                  lambda: row_sumsq(tilewright.linear(a, w, residual=h)),
                                  lambda: F.linear(a, w) + h])
        print(f"{M}x{N}x{K}: plain {t[0]*1e3:.1f} sums {t[1]*1e3:.1f} ({t[1]/t[0]:.3f}) plain+pass {t[2]*1e3:.1f} "
              f"({t[2]/t[0]:.3f}) torch {t[3]*1e3:.1f} (tw plain / torch {t[0]/t[3]:.3f}) | y equal {same} "
              f"sums rel err {err:.1e}", flush=True)

print("B. rms_norm_linear with given sums (us; op+sums / bare cuBLAS is the target)", flush=True)
pair = lambda x, g, w: F.linear(F.rms_norm(x, (x.shape[-1],), g, EPS), w)  # noqa: E731
cpair = torch.compile(pair)
with torch.no_grad():
    for M, N, K in [(8192, 4096, 4096), (8192, 6144, 4096), (2048, 14336, 4096), (16384, 3072, 2048),
                    (16384, 11264, 2048), (3000, 5120, 5120), (128, 4096, 4096)]:
        x, g, w = rnd(M, K), (1 + 0.1 * torch.randn(K, device="cuda", generator=gen)).bfloat16(), rnd(N, K, scale=K ** -0.5)
        ss = x.float().square().sum(-1)
        for _ in range(3):
            cpair(x, g, w)
        ref = (x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + EPS) * g.double()) @ w.double().t()
        errs = [((f().double() - ref).norm() / ref.norm()).item() for f in
                (lambda: tilewright.rms_norm_linear(x, g, w, eps=EPS, sumsq=ss),
                 lambda: tilewright.rms_norm_linear(x, g, w, eps=EPS), lambda: pair(x, g, w))]
        t = graph_ms_alternating([lambda: pair(x, g, w), lambda: cpair(x, g, w),
                                  lambda: tilewright.rms_norm_linear(x, g, w, eps=EPS),
                                  lambda: tilewright.rms_norm_linear(x, g, w, eps=EPS, sumsq=ss),
                                  lambda: F.linear(x, w)])
        print(f"{M}x{N}x{K}: eager {t[0]*1e3:.1f} compiled {t[1]*1e3:.1f} op {t[2]*1e3:.1f} op+sums {t[3]*1e3:.1f} "
              f"bare {t[4]*1e3:.1f} | op+sums vs eager {t[0]/t[3]:.3f} vs compiled {t[1]/t[3]:.3f} /bare "
              f"{t[3]/t[4]:.3f} (op /bare {t[2]/t[4]:.3f}) | rel err sums {errs[0]:.2e} op {errs[1]:.2e} "
              f"torch {errs[2]:.2e}", flush=True)

print("C. the hand-off: o_proj(attn, residual=h) -> norm -> next projection (us)", flush=True)


def torch_step(attn, h, wo, g, wn):
    h2 = F.linear(attn, wo) + h
    return h2, F.linear(F.rms_norm(h2, (h2.shape[-1],), g, EPS), wn)


ctorch = torch.compile(torch_step)
with torch.no_grad():
    for M, D, N in [(8192, 4096, 6144), (8192, 4096, 28672), (16384, 2048, 11264)]:
        attn, h, wo = rnd(M, D), rnd(M, D), rnd(D, D, scale=D ** -0.5)
        g, wn = (1 + 0.1 * torch.randn(D, device="cuda", generator=gen)).bfloat16(), rnd(N, D, scale=D ** -0.5)

        def tw_sums():
            h2, ss = tilewright.linear(attn, wo, residual=h, return_sumsq=True)
            return h2, tilewright.rms_norm_linear(h2, g, wn, eps=EPS, sumsq=ss)

        def tw_plain():
            h2 = tilewright.linear(attn, wo, residual=h)
            return h2, tilewright.rms_norm_linear(h2, g, wn, eps=EPS)

        for _ in range(3):
            ctorch(attn, h, wo, g, wn)
        a_out, b_out = tw_sums()[1], tw_plain()[1]
        t = graph_ms_alternating([lambda: torch_step(attn, h, wo, g, wn), lambda: ctorch(attn, h, wo, g, wn),
                                  tw_plain, tw_sums])
        print(f"{M}x{D}->{N}: eager {t[0]*1e3:.1f} compiled {t[1]*1e3:.1f} tw {t[2]*1e3:.1f} tw+sums {t[3]*1e3:.1f} | "
              f"tw+sums vs eager {t[0]/t[3]:.3f} vs compiled {t[1]/t[3]:.3f} vs tw {t[2]/t[3]:.3f} | max |sums - "
              f"plain| {(a_out.float() - b_out.float()).abs().max().item():.3g}", flush=True)
