"""Issue 19, block-scaled FP8 (sm_90a): block builds against the row-wise build and cuBLASLt row-wise
(torch._scaled_mm), one H200. Provider sets (first argument; default ``ahead``):
* ``ahead``: the block build with its scales copied ahead into shared memory (BLOCK_AHEAD_VARIANT,
  TW_FP8_SCALE_AHEAD=2; `cuda_block_fix1`: one k-block ahead) against the register-load block build (`cuda_block`).
  Run in session 27's first call (`block_fix_ab_2026-11-29_0318.csv`), when the copies were read before the wgmma
  wait.
* ``stage``: the block scales copied into each pipeline stage by a producer warp (BLOCK_STAGE_VARIANT,
  TW_FP8_SCALE_STAGE, 5 stages; the default since session 29) against the copied-ahead build (`cuda_block_ahead`:
  BLOCK_AHEAD_VARIANT, 6 stages) - run 2026-11-29 07:04 and 08:28 (`block_fix_ab_2026-11-29_0704_stage.csv`,
  `_0828_stage.csv`); since the descriptors are formed once a stage (session 29) with a diagnostic row-wise provider
  at 5 stages (`cuda_row5`): the block build's remaining gap at 8192^3 (0.927) against the sixth stage it lacks.
  Run 2026-11-29 11:19 (`block_fix_ab_stage_2026-11-29_1119.csv`): row-wise at 5 stages as fast as at 6 (0.995-1.004)
  but 1.049x at 8192 x 28672 x 4096 - hence
* ``stages``: the ring depth of both builds on seven shapes: row-wise 6 (ACCURATE_VARIANT) / 5 / 4, block 5
  (BLOCK_STAGE_VARIANT) / 4.
A set ``order`` ran once (2026-11-29, `block_fix_ab_2026-11-29_0913_order.csv`, with the wgmma descriptors formed
once a stage in every build): the two consumers issuing their k-blocks in turns (named barriers), row-wise and with
block scales in the stages, 2.3-4.0% slower than the free-running builds; the switch and the set are gone.
A former set, ``promote``, is gone with the variants it timed: the 2026-11-29 06:00 run
(`block_fix_ab_promote_2026-11-29_0605.csv`) of the lean scale path at the k-block's top (`cuda_block_v2`, block /
row-wise 0.906-0.964x) and before the wgmma wait (`cuda_block_v2w`, 0.847-0.957x) against that build
(`cuda_block_ahead`, 0.809-0.921x); the first is today's BLOCK_AHEAD_VARIANT (gemm_sm90.cu's header).

Timing: every provider runs on the same fp8 operands (block-quantized, so the tensor cores see the same bits - FP8
power, and so the clocks, depend on them) with scales of its own kind; each provider's 20 launches are one CUDA
graph (no host time in the measurement), 5 rounds in rotating order, one warm-up replay and one timed replay per
round, then 0.25 s idle (a provider timed right after the fastest one inherits its power-limited clocks); medians.
Block providers get scale_a column-major (the kernel's layout: no copy in the launcher).
Error: x and w with a few 100x 128 x 128 blocks; row-wise providers on per-row quantized operands, block providers
on quantize_fp8's 1 x 128 / 128 x 128 ones. err_e2e: max |out - x @ w^T| (float64, unquantized); err_kernel: max
|out - the float64 product of the provider's own dequantized operands|; same_as_block: output bit-equal to the set's
first block provider (the variants change where and how the scales are read, not the arithmetic).
Output: one CSV line per (shape, provider), then '#' summary lines. Run: PYTHONPATH=src python <this file> [set]."""
import dataclasses
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import tilewright
from tilewright.cuda_fallback import fp8_gemm_sm90 as f8
from tilewright.cuda_fallback.runtime import build
from tilewright.reference import scaled_mm_reference

T0 = time.time()
SHAPES = [(8192, 8192, 8192), (8192, 28672, 4096), (4096, 4096, 4096), (2048, 7168, 2048)]
CALLS, ROUNDS, IDLE_S = 20, 5, 0.25
E4M3 = torch.float8_e4m3fn
# per set, the block providers (the first: the bit-equality reference)
SETS = {"ahead": {"cuda_block": f8.ACCURATE_VARIANT.with_operands(3, (1, 1)), "cuda_block_fix": f8.BLOCK_AHEAD_VARIANT,
                  "cuda_block_fix1": dataclasses.replace(f8.BLOCK_AHEAD_VARIANT, scale_ahead=1)},
        "stage": {"cuda_block_ahead": f8.BLOCK_AHEAD_VARIANT, "cuda_block_stage": f8.BLOCK_STAGE_VARIANT},
        "stages": {"cuda_block_stage": f8.BLOCK_STAGE_VARIANT,
                   "cuda_block_stage4": dataclasses.replace(f8.BLOCK_STAGE_VARIANT, stages=4)}}
SET = sys.argv[1] if len(sys.argv) > 1 else "ahead"
BLOCK_VARIANTS = SETS[SET]
BLOCK = tuple(BLOCK_VARIANTS)
# row-wise providers beside cuda_row: with the ``stage`` set, the row-wise build at the stage build's 5 stages - how
# much of the block / row-wise gap is the sixth stage that the stages' scale slots leave no room for
ROW_EXTRA = {"cuda_row5": dataclasses.replace(f8.ACCURATE_VARIANT, stages=5)} if SET in ("stage", "stages") else {}
if SET == "stages":  # the ring depth of both builds: 6 / 5 / 4 row-wise, 5 / 4 block
    ROW_EXTRA["cuda_row4"] = dataclasses.replace(f8.ACCURATE_VARIANT, stages=4)
    SHAPES += [(4096, 14336, 4096), (16384, 8192, 2048), (3000, 5120, 5120)]
ROW = ("cuda_row", "cublaslt_row", *ROW_EXTRA)
VARIANTS = {"cuda_row": f8.ACCURATE_VARIANT, **ROW_EXTRA, **BLOCK_VARIANTS}
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
# the builds in parallel (the launches' own build calls then hit the cache): e4m3 x e4m3, K-major, bf16 out
with ThreadPoolExecutor(len(VARIANTS)) as ex:
    list(ex.map(lambda v: build.compile_source(f8.SOURCE, "sm_90a", v.defines(False, False, False)),
                VARIANTS.values()))
print(f"# builds {time.time() - T0:.1f} s", flush=True)


def with_outlier_blocks(t: torch.Tensor, g: torch.Generator, count: int = 4) -> torch.Tensor:
    """``t`` with ``count`` random 128 x 128 blocks scaled by 100."""
    rb, cb = t.shape[0] // 128, t.shape[1] // 128
    for i in torch.randint(0, rb * cb, (count,), device="cuda", generator=g).tolist():
        t[(i // cb) * 128:(i // cb + 1) * 128, (i % cb) * 128:(i % cb + 1) * 128] *= 100
    return t


def quantize_rows(t: torch.Tensor):
    """Per-row e4m3 quantization (scale = row amax / 448): (q, (rows, 1) fp32 scale)."""
    s = (t.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 448.0).float()
    return (t / s).clamp(-448, 448).to(E4M3), s


print("shape,provider,us,tflops,x_row,err_e2e,err_kernel,same_as_block", flush=True)
summary = []
for M, N, K in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    x = with_outlier_blocks(torch.randn(M, K, device="cuda", generator=g), g)
    w = with_outlier_blocks(torch.randn(N, K, device="cuda", generator=g) / K ** 0.5, g)
    a_blk, sa_blk = tilewright.quantize_fp8(x, block=(1, 128))
    q_w, sw = tilewright.quantize_fp8(w, block=(128, 128))
    b_blk, sb_blk = q_w.t(), sw.t().contiguous()  # b (K, N) column-major; scale_b (K/128, N/128)
    sa_col = sa_blk.t().contiguous().t()  # scale_a column-major: the launcher passes it as it is
    a_row, sa_row = quantize_rows(x)
    q_wr, sw_row = quantize_rows(w)
    b_row, sb_row = q_wr.t(), sw_row.t().contiguous()  # (1, N)
    ops = {k: (a_row, b_row, sa_row, sb_row) for k in ROW}
    ops.update({k: (a_blk, b_blk, sa_col, sb_blk) for k in BLOCK})

    def run(name, a, b, sa, sb, out):
        if name == "cublaslt_row":
            return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        return f8.launch_fp8_gemm(a, b, sa, sb, out, variant=VARIANTS[name])

    # ---- timing: same fp8 bits for everyone, each provider's own kind of scales
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    timed = {k: (a_blk, b_blk, sa_row, sb_row) for k in ROW}
    timed.update({k: (a_blk, b_blk, sa_col, sb_blk) for k in BLOCK})
    graphs = {}
    for name, args in timed.items():
        run(name, *args, out)  # compile / load / prepare outside the capture
        torch.cuda.synchronize()
        graphs[name] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[name]):
            for _ in range(CALLS):
                run(name, *args, out)
    names = list(graphs)
    times = {k: [] for k in names}
    for rnd in range(ROUNDS):
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:
            graphs[name].replay()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            graphs[name].replay()
            e1.record()
            torch.cuda.synchronize()
            times[name].append(e0.elapsed_time(e1) / CALLS)
            time.sleep(IDLE_S)
    del graphs
    us = {k: statistics.median(v) * 1e3 for k, v in times.items()}

    # ---- error: each provider on its own quantization
    ref = x.double() @ w.double().t()
    outs, err_kernel = {}, {}
    for name, (a, b, sa, sb) in ops.items():
        outs[name] = run(name, a, b, sa, sb, torch.empty(M, N, device="cuda", dtype=torch.bfloat16)).double()
    for names_k in (ROW, BLOCK):
        own = scaled_mm_reference(*ops[names_k[0]], None, torch.float64, torch.float64)
        for name in names_k:
            err_kernel[name] = (outs[name] - own).abs().max().item()
        del own
    fl = 2 * M * N * K
    for name in names:
        e2e = (outs[name] - ref).abs().max().item()
        same = torch.equal(outs[name], outs[BLOCK[0]]) if name in BLOCK else ""
        print(f"{M}x{N}x{K},{name},{us[name]:.1f},{fl / us[name] / 1e6:.0f},{us['cuda_row'] / us[name]:.3f},"
              f"{e2e:.4g},{err_kernel[name]:.4g},{same}", flush=True)
    ratios = ", ".join(f"{k} {us['cuda_row'] / us[k]:.3f}" for k in BLOCK)
    extra = "".join(f"; {k} / row {us['cuda_row'] / us[k]:.3f}" for k in ROW_EXTRA)
    summary.append(f"# {M}x{N}x{K}: block / row: {ratios}; row vs cuBLASLt {us['cublaslt_row'] / us['cuda_row']:.3f}"
                   f"{extra}; max |ref| {ref.abs().max().item():.4g}")
    del ref, outs, x, w
    torch.cuda.empty_cache()
print("\n".join(summary))
print(f"# total {time.time() - T0:.1f} s", flush=True)
