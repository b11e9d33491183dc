"""Head dim 64 forward: two consumer warpgroups (variant "c", BM 128) against three ("c3" with the intra-warpgroup
overlap, "b3" without; BM 192, round-robin pingpong) and cuDNN, in one process on one GPU:

    PYTHONPATH=src python perf/results/h200/attention/consumers3_ab_2026-11-29.py [variant,variant,...] [--grid]
        [--head-dim 128]

(--grid: 24 rows over S 512-16k, causal or not, MHA / GQA 4 instead of the seven - the per-shape table a
forward-only routing rule at head dim 64 would be read from. --head-dim 128 (added session 31, for the 176- / 192-key
block variants c176 / c192 against c): seven hdim-128 rows instead, the builds and the numerics rows at 128; those
variants' outputs are not expected bit-equal to c's - other key blocks, another order of the online softmax.)

Why three: at D 64 a 64 x 128 key block costs a warpgroup ~512 tensor-core clocks (QK^T + PV) and ~512 MUFU clocks
of exp2 plus the softmax's FMA / ALU work. In a two-warpgroup pingpong one softmax must hide in the other's GEMM slot
(~512 clocks), which it cannot; with three it has two slots.

Per row, bf16: each variant's kernel through `cuda_fallback.attention_sm90.cuda_attention(..., variant=name)` (the
launch the op binds, without the op's dispatch), the public op (`tilewright.flash_attention(backend="cuda")`, the
default variant) and cuDNN (SDPA under SDPBackend.CUDNN_ATTENTION, K / V repeated over a GQA group); CUDA-graph
replays interleaved with the L2 flushed (bench.common.graph_ms_alternating). Then numerics on rows with tails (Sq,
Skv not multiples of 192 / 128): each variant's max |out - ref| and LSE error against an fp32 reference (SDPA's math
backend in fp32), next to torch's own bf16 SDPA (flash) error; and whether each variant's out / LSE equal variant
c's bit for bit (the same key blocks in the same order per row: they should)."""
import dataclasses
import os
import sys
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("TILEWRIGHT_ATEN_BELOW", "0")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import tilewright  # noqa: E402
from tilewright.bench.common import graph_ms_alternating  # noqa: E402
from tilewright.cuda_fallback import attention_sm90 as ca  # noqa: E402
from tilewright.cuda_fallback.runtime import build  # noqa: E402

argv = sys.argv[1:]
HEAD_DIM = int(argv[argv.index("--head-dim") + 1]) if "--head-dim" in argv else 64
if "--head-dim" in argv:
    del argv[argv.index("--head-dim"):argv.index("--head-dim") + 2]
args = [a for a in argv if not a.startswith("--")]
wanted = args[0].split(",") if args else ["c", "c3", "b3"]


def variant_of(spec: str):
    """A variant name, or ``name:field=value`` for that variant with one field replaced (``c3:stages=3``,
    ``c3:exp_fma=4``; added session 30 for the c3 follow-ups)."""
    name, _, change = spec.partition(":")
    if name not in ca.VARIANTS:
        return None
    if not change:
        return ca.VARIANTS[name]
    field, value = change.split("=")
    return dataclasses.replace(ca.VARIANTS[name], name=spec, **{field: int(value)})


specs = {v: variant_of(v) for v in wanted}
variants = [v for v in wanted if specs[v] is not None]
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; variants {variants} "
      f"(missing: {[v for v in wanted if v not in variants]})", flush=True)

# the bf16 builds in parallel first (the launches then hit the build cache)
with ThreadPoolExecutor(8) as ex:
    list(ex.map(lambda a: build.compile_source(ca.SOURCE, "sm_90a", specs[a[0]].defines(HEAD_DIM, a[1], False)),
                [(v, causal) for v in variants for causal in (False, True)]))

# (B, Hq, Hkv, S, D, causal)
ROWS = ((2, 8, 8, 8192, 64, False), (2, 8, 8, 8192, 64, True), (4, 16, 16, 4096, 64, False),
        (4, 16, 16, 2048, 64, True), (2, 32, 8, 4096, 64, True), (8, 16, 16, 1024, 64, False),
        (1, 16, 16, 16384, 64, True))
if HEAD_DIM == 128:
    # the non-causal rows where c runs 1.00x cuDNN, their causal twins, GQA, a short and a long sequence
    ROWS = ((2, 16, 16, 8192, 128, False), (2, 16, 16, 8192, 128, True), (1, 16, 16, 16384, 128, False),
            (1, 16, 16, 16384, 128, True), (4, 32, 8, 4096, 128, False), (8, 16, 16, 2048, 128, False),
            (4, 32, 8, 2048, 128, True))
elif "--grid" in sys.argv:
    # the per-shape table a forward-only routing rule at head dim 64 needs (ops/_aten.cudnn_faster sends every such
    # call to cuDNN today): S from 512 to 16k, causal or not, MHA and GQA 4, B x S = 16k (2^35-2^41 FLOPs a row)
    ROWS = tuple((max(1, 16384 // S), H, H // g, S, 64, causal) for S in (512, 1024, 2048, 4096, 8192, 16384)
                 for causal in (False, True) for H, g in ((16, 1), (32, 4)))


def inputs(B, Hq, Hkv, Sq, Skv, D):
    q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, Skv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return q, k, v


for i, (B, Hq, Hkv, S, D, causal) in enumerate(ROWS):
    torch.manual_seed(i)
    q, k, v = inputs(B, Hq, Hkv, S, S, D)
    g = Hq // Hkv
    kk, vv = (t.repeat_interleave(g, 1) for t in (k, v)) if g > 1 else (k, v)

    def sd():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)

    fns = [(lambda name=name: ca.cuda_attention(q, k, v, causal=causal, variant=specs[name])) for name in variants]
    fns += [lambda: tilewright.flash_attention(q, k, v, causal=causal, backend="cuda"), sd]
    with torch.no_grad():
        ms = graph_ms_alternating(fns, calls=10, replays=9)
    flops = 4 * B * Hq * S * S * D / (2 if causal else 1)
    row = f"B{B}_{Hq}/{Hkv}_S{S}_D{D}_{'causal' if causal else 'full'}"
    parts = " ".join(f"{name} {t:.4f} ({ms[-1] / t:.3f}x, {flops / t / 1e9:.0f} TF/s)"
                     for name, t in zip(variants + ["op"], ms[:-1]))
    print(f"fwd {row}: {parts} | cudnn {ms[-1]:.4f} ({flops / ms[-1] / 1e9:.0f} TF/s)", flush=True)
    del q, k, v, kk, vv
    torch.cuda.empty_cache()

# numerics: tails, GQA, both masks; fp32 reference
for i, (B, Hq, Hkv, Sq, Skv, causal) in enumerate(((1, 4, 4, 3000, 3000, False), (1, 4, 4, 3000, 3000, True),
                                                   (2, 8, 2, 1000, 2333, False), (2, 6, 3, 577, 577, True))):
    torch.manual_seed(100 + i)
    q, k, v = inputs(B, Hq, Hkv, Sq, Skv, HEAD_DIM)
    g = Hq // Hkv
    kk, vv = (t.repeat_interleave(g, 1) for t in (k, v))
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q.float(), kk.float(), vv.float(), is_causal=causal)
    s = (q.float() @ kk.float().transpose(-1, -2)) / HEAD_DIM ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(Sq, Skv, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
    lse_ref = torch.logsumexp(s, -1)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        torch_err = (F.scaled_dot_product_attention(q, kk, vv, is_causal=causal).float() - ref).abs().max().item()
    base = None
    parts = []
    for name in variants:
        out, lse = ca.cuda_attention(q, k, v, causal=causal, variant=specs[name])
        err = (out.float() - ref).abs().max().item()
        lerr = (lse - lse_ref).abs().max().item()
        same = "" if base is None else f", == {variants[0]}: {torch.equal(out, base[0]) and torch.equal(lse, base[1])}"
        base = base or (out, lse)
        parts.append(f"{name} err {err:.2e} lse err {lerr:.2e}{same}")
    print(f"num B{B}_{Hq}/{Hkv}_Sq{Sq}_Skv{Skv}_{'causal' if causal else 'full'}: torch bf16 err {torch_err:.2e} | "
          + " | ".join(parts), flush=True)
