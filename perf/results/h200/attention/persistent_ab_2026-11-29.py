"""Persistent CTAs for the hdim-128 forward (issue 15): variants cp / c176p (c / c176 with TW_PERSISTENT: min(tiles,
SMs) CTAs walk the tiles, the K / V ring running on across a CTA's tiles) against c, c176 and cuDNN, forward only,
CUDA-graph replays interleaved with the L2 flushed (bench.common.graph_ms_alternating). B x S = 16k tokens at S 1k-8k,
both masks, MHA 16 heads and GQA 32 / 8. Each row first checks every variant's out and LSE against c's (max |diff|;
the persistent variants are expected bit-equal to their twins) and cuDNN's out against c's, then times them.
Prepared in session 33 on a CPU; never run there.

    PYTHONPATH=src python perf/results/h200/attention/persistent_ab_2026-11-29.py > $OUT/persistent_ab.txt
    PYTHONPATH=src python perf/results/h200/attention/persistent_ab_2026-11-29.py --prebuild  # compile only (no GPU)

--prebuild compiles, in parallel, every build this A/B and the persistent variants' GPU tests ask for
(tests/cuda/test_attention_sm90_gpu.py -k "cp or c176p or persistent"), so neither spends its time limit in nvcc."""
import argparse
import math
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import torch

from tilewright.cuda_fallback import attention_sm90 as ca
from tilewright.cuda_fallback.runtime import build

D = 128
VARIANTS = ("c", "cp", "c176", "c176p")  # each persistent variant right after its twin
# (B, Hq, Hkv, S, causal): 16k tokens a head group, S 1k-8k (the 2k-4k rows are where c ran 0.96-1.02x cuDNN)
ROWS = [(16384 // S, H, H // g, S, causal) for S in (1024, 2048, 4096, 8192) for causal in (False, True)
        for H, g in ((16, 1), (32, 4))]


def builds() -> list[dict]:
    """The -D sets of the A/B (VARIANTS at head dim 128, both masks) and of the GPU tests of cp / c176p: every head
    dim the variants build at, both masks, bf16 and fp16, and the band builds (an upper edge at an offset:
    bottom-right causal; a window's lower edge; both) that the tests and the variants' first-use self-checks run."""
    out = []
    for name in VARIANTS:
        var = ca.VARIANTS[name]
        for d in var.head_dims:
            out += [var.defines(d, causal, fp16) for causal in (False, True) for fp16 in (False, True)]
            out += [var.defines(d, True, False, window=w, upper_offset=u) for w, u in ((0, 1), (1, 0), (1, 1))]
    return out


def prebuild() -> None:
    """Compile builds() on parallel nvcc processes into the cubin cache (cached ones are skipped)."""
    t0 = time.perf_counter()
    wanted = builds()
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        list(pool.map(lambda d: build.compile_source(ca.SOURCE, "sm_90a", d), wanted))
    print(f"# prebuilt {len(wanted)} builds in {time.perf_counter() - t0:.1f} s", flush=True)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over the finite elements; inf where a and b are not finite at the same elements with the same
    values (a NaN in either counts as a difference)."""
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)) or not torch.equal(a[~torch.isfinite(a)],
                                                                                 b[~torch.isfinite(b)]):
        return float("inf")
    fin = torch.isfinite(a)
    return (a[fin].float() - b[fin].float()).abs().max().item() if fin.any() else 0.0


def one_row(i: int, B: int, Hq: int, Hkv: int, S: int, causal: bool) -> dict:
    """Check and time one row: {provider: ms}, printed with the checks against c."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tilewright.bench.common import graph_ms_alternating

    torch.manual_seed(i)
    q = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    g = Hq // Hkv
    kk, vv = (t.repeat_interleave(g, 1) for t in (k, v)) if g > 1 else (k, v)
    outs = {name: (torch.empty_like(q), torch.empty(B, Hq, S, device="cuda")) for name in VARIANTS}

    def run(name):
        return lambda: ca.launch_attention(q, k, v, *outs[name], causal, None, name)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)

    with torch.no_grad():
        # correctness first: every variant (and cuDNN's out) against c's
        for name in VARIANTS:
            run(name)()
        ref_out, ref_lse = outs["c"]
        checks = []
        for name in VARIANTS[1:]:
            out, lse = outs[name]
            same = torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
            checks.append(f"{name} out {max_diff(out, ref_out):.2e} lse {max_diff(lse, ref_lse):.2e}"
                          + (" (bit-equal)" if same else ""))
        checks.append(f"cudnn out {max_diff(cudnn(), ref_out):.2e}")
        torch.cuda.synchronize()
        t = dict(zip(VARIANTS + ("cudnn",), graph_ms_alternating([run(name) for name in VARIANTS] + [cudnn],
                                                                 calls=10, replays=9)))
    tiles = -(-S // ca.VARIANTS["c"].bm) * Hq * B
    print(f"B{B}_{Hq}/{Hkv}_S{S}_{'causal' if causal else 'full'} ({tiles} tiles): "
          + " ".join(f"{n} {t[n]:.4f} ({t['cudnn'] / t[n]:.3f}x cudnn, {t['c'] / t[n]:.3f}x c)" for n in VARIANTS)
          + f" | cudnn {t['cudnn']:.4f} | cp/c {t['c'] / t['cp']:.3f} c176p/c176 {t['c176'] / t['c176p']:.3f}"
          + f" || check vs c: {'; '.join(checks)}", flush=True)
    return t


def main() -> None:
    from tilewright._env import sm_count

    warnings.filterwarnings("ignore")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {sm_count(torch.device('cuda'))} SMs",
          flush=True)
    prebuild()
    ratios = {name: [] for name in VARIANTS[1:] + ("cudnn",)}
    for i, row in enumerate(ROWS):
        t = one_row(i, *row)
        for name, r in ratios.items():
            r.append(t["c"] / t[name])
        torch.cuda.empty_cache()
    print("# geometric means over the rows, speed against c: "
          + " ".join(f"{n} {math.exp(sum(map(math.log, r)) / len(r)):.3f}" for n, r in ratios.items()), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prebuild", action="store_true", help="compile the builds only (no GPU needed)")
    if parser.parse_args().prebuild:
        prebuild()
    else:
        main()
