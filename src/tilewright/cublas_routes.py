"""Where the router hands a plain GEMM to cuBLAS: a measured table and the predicate the GEMM records consult.

Why: the gemm op's "torch" record (``a @ b``: cuBLAS on a GPU) is an eligible backend like Triton and the CUDA kernels,
and a user must never get a GEMM slower than the one torch would have run. On the H100 the tilewright kernels meet
cuBLAS on large problems (0.96-1.04x on the model benches' 16384-row GEMMs) but not everywhere: weight-gradient
(transposed A) GEMMs with K = 16384 and 1-3k rows ran at 0.85-0.87x, and mid-sized GEMMs (M around 500-3000,
non-power-of-two N and K) at 0.58-0.82x (``perf/results/h100/gemm/cublas_routes_2026-11-27.csv``, do_bench with L2
flushed, the router's pick against ``torch.mm`` in one process). There a plain GEMM (no activation, no residual; a
bias rides on cuBLAS's own epilogue through ``addmm``) goes to cuBLAS; the fused epilogues, which cuBLAS does not
have, stay on tilewright's kernels everywhere. Closing those gaps in the kernels themselves is open work; the table
shrinks as they do.

How: :data:`TABLE` holds the measured points (layout, M, N, K, router's pick / cuBLAS speed ratio). A problem takes
the nearest point of its own layout within :data:`NEAREST_MAX_LOG2` (sum over M, N, K of |log2 ratio|), else the
nearest of any layout within it (the mid-size gap did not depend on the layout) - within each, the points measured on
the running card first - and goes to cuBLAS when that point's ratio is below :data:`PREFER_BELOW`. Problems far from
every point keep tilewright's kernels, except small ones (:data:`SMALL_PROBLEM_FLOPS`, more than
:data:`SMALL_MAX_ROWS_OWN` rows), where every measured neighbour but two lost. Only bf16 / fp16 on sm_90 (H100 points,
H200 decode / small-M and model-bench points; fp32 GEMMs stay: torch.mm's TF32 setting would change their numerics).
``TILEWRIGHT_CUBLAS=0`` turns the routing off (e.g. to benchmark tilewright's own kernels through the router).
"""
from __future__ import annotations

import contextlib
import math
import threading

import torch

from ._env import capability, read_env

PREFER_BELOW = 0.97  # cuBLAS must be > 3% faster than the router's own pick
NEAREST_MAX_LOG2 = 1.0  # e.g. M within 2x, or M and N within ~1.4x each
CARD = "NVIDIA H100 80GB HBM3"
MEASURED = "perf/results/h100/gemm/cublas_routes_2026-11-27.csv"
ENV = "TILEWRIGHT_CUBLAS"

# layout M N K ratio. Layout: first letter A, second B; N = the operand as stored row-major (A (M, K) K-contiguous,
# B (K, N) N-contiguous), T = its transpose stored (A M-contiguous: a weight gradient's dY^T; B K-contiguous: an
# nn.Linear weight). Ratio: cuBLAS time / the router's pick's time, bf16, H100, 2026-11-27.
_TABLE_TEXT = """
NT 16384 3072 2048 0.99
NN 16384 2048 3072 1.01
TN 3072 2048 16384 0.86
NT 16384 2048 2048 1.00
NN 16384 2048 2048 0.98
TN 2048 2048 16384 0.97
NT 16384 11264 2048 1.03
NN 16384 2048 11264 1.00
TN 11264 2048 16384 0.96
NT 16384 2048 5632 0.98
NN 16384 5632 2048 1.04
TN 2048 5632 16384 1.01
NT 16384 3072 1024 1.02
NN 16384 1024 3072 0.96
TN 3072 1024 16384 0.86
NT 16384 1024 1024 0.96
NN 16384 1024 1024 0.97
TN 1024 1024 16384 0.87
NT 16384 4096 1024 1.02
NN 16384 1024 4096 0.97
TN 4096 1024 16384 0.96
NT 16384 1024 4096 0.96
NN 16384 4096 1024 0.99
TN 1024 4096 16384 0.99
NN 4096 4096 4096 0.99
TN 4096 4096 4096 1.00
NN 8192 8192 8192 1.02
TN 8192 8192 8192 1.03
NN 8192 4096 4096 1.01
TN 8192 4096 4096 0.99
NN 16384 2048 2048 1.00
TN 16384 2048 2048 0.96
NN 1000 3000 1536 0.74
TN 1000 3000 1536 0.65
NN 2000 6000 3000 0.79
TN 2000 6000 3000 0.82
NN 1536 1000 3000 0.68
TN 1536 1000 3000 0.78
NN 3000 1536 1000 0.58
TN 3000 1536 1000 0.59
NN 1024 1024 16384 0.86
TN 1024 1024 16384 0.85
NN 768 1024 16384 0.81
TN 768 1024 16384 0.85
NN 512 2048 2048 0.74
TN 512 2048 2048 0.73
NN 2048 512 8192 0.76
TN 2048 512 8192 0.75
NT 3000 5120 5120 0.82
NN 3000 5120 5120 0.83
NT 3000 5000 4000 0.74
NN 3000 5000 4000 0.77
NT 2048 5120 5120 0.82
NT 4096 5120 5120 1.00
# H200, 2026-11-28: decode and small-M rows, tilewright's own pick with the H200 config table against cuBLAS, CUDA-graph
# timed, cold L2, interleaved (perf/results/h200/gemm/route_points_2026-11-28.csv, script beside it). The Triton
# kernel wins at M <= 16 (its 16-row tiles stream the weight; cuBLAS pads to larger tiles) and loses from M = 32 on.
NT 1 4096 4096 1.01
NT 16 4096 4096 1.06
NT 16 14336 4096 1.00
NT 32 4096 4096 0.92
NT 64 4096 4096 0.83
NT 64 6144 4096 0.96
NT 128 4096 4096 0.86
NT 128 14336 4096 0.87
NT 128 4096 14336 0.99
NT 128 3000 1536 0.67
NT 256 4096 4096 0.69
NT 256 5120 1536 0.38
NT 96 2560 5120 0.68
NT 1100 5000 3000 0.60
NN 16 4096 4096 1.04
NN 16 14336 4096 1.00
NN 128 4096 4096 0.83
NN 128 14336 4096 0.89
NN 128 4096 14336 0.95
NN 128 3000 1536 0.66
NN 1100 5000 3000 0.60
# H200, 2026-11-28: the model bench's B 8 x S 2048 GEMMs (Llama d 2048 / FFN 5632 and ViT-L d 1024 / MLP 4096 with its
# 768-wide patch embedding; forward NT, input gradient NN, weight gradient TN), tilewright's own kernels against
# cuBLAS, CUDA-graph timed, cold L2, interleaved (perf/results/h200/gemm/model_points_2026-11-28.csv, script beside).
# On an H200 these take precedence over the H100 points at the same shapes (see nearest).
NT 16384 3072 2048 1.00
NN 16384 2048 3072 1.01
TN 3072 2048 16384 0.77
NT 16384 2048 2048 1.01
NN 16384 2048 2048 1.01
TN 2048 2048 16384 0.99
NT 16384 11264 2048 1.04
NN 16384 2048 11264 1.01
TN 11264 2048 16384 0.95
NT 16384 2048 5632 1.00
NN 16384 5632 2048 1.05
TN 2048 5632 16384 1.01
NT 16384 3072 1024 1.02
NN 16384 1024 3072 0.99
TN 3072 1024 16384 0.83
NT 16384 1024 1024 0.95
NN 16384 1024 1024 0.95
TN 1024 1024 16384 0.86
NT 16384 4096 1024 1.06
NN 16384 1024 4096 1.00
TN 4096 1024 16384 1.00
NT 16384 1024 4096 0.96
NN 16384 4096 1024 1.04
TN 1024 4096 16384 0.99
NT 16384 1024 768 0.88
NN 16384 768 1024 0.90
TN 1024 768 16384 0.75
"""
# The six points before the H200 block: CUDA-graph timed, cold L2, interleaved
# (perf/results/h100/gemm/odd_routes_2026-11-27.log, script beside it) - the GEMM of rms_norm_linear's two-pass forward
# at 3000 x 5120 x 5120 (issue 17's row) and the gemm suite's odd shape.

# Far from every point: a plain GEMM of more than SMALL_MAX_ROWS_OWN rows and under SMALL_PROBLEM_FLOPS goes to cuBLAS.
# Every measured point in that region (both cards, 31 of them: decode M 32-256, mid-size M 500-3000 with odd N and K)
# ran below PREFER_BELOW but two (0.99, 0.96 at 128 x 4096 x 14336 and 64 x 6144 x 4096); shapes there that no point
# covers (e.g. M 128 x 1024 x 1024) would otherwise get the kernel that lost on all its neighbours.
SMALL_PROBLEM_FLOPS = 2.0 ** 36
SMALL_MAX_ROWS_OWN = 16


def _parse(text: str) -> tuple[list[tuple[str, int, int, int, float]], list[str]]:
    """The table's points, and the card each was measured on (:data:`CARD` until a "# H200" comment line), by index:
    a shape may have a point on each card, with equal ratios too."""
    points, cards, card = [], [], CARD
    for line in text.strip().splitlines():
        if line.startswith("#"):
            card = "NVIDIA H200" if line.startswith("# H200") else card
            continue
        layout, m, n, k, ratio = line.split()
        points.append((layout, int(m), int(n), int(k), float(ratio)))
        cards.append(card)
    return points, cards


TABLE, TABLE_CARDS = _parse(_TABLE_TEXT)
_ENV_NAMES = ((ENV,), (ENV.encode(),))


def layout(a: torch.Tensor, b: torch.Tensor) -> str:
    """The table's layout letters of ``a @ b``: "T" for an operand stored transposed (unit stride on its first dim,
    not on its last), "N" otherwise."""
    a_t = a.stride(-1) != 1 and a.stride(0) == 1
    b_t = b.stride(-1) != 1 and b.stride(0) == 1
    return ("T" if a_t else "N") + ("T" if b_t else "N")


def nearest(lay: str, M: int, N: int, K: int, card: str | None = None) -> tuple[str, int, int, int, float] | None:
    """The measured point nearest to (M, N, K) in log2 space within :data:`NEAREST_MAX_LOG2`, or None when no point
    is that close. Points of layout ``lay`` come first, then any layout (the layout decides more than the card: the
    weight-gradient TN GEMMs lose where NN and NT of the same sizes do not); within each, points measured on ``card``
    (a device name; None: any card) come first - the H100 and H200 ratios of one shape differ by up to 0.1."""
    i = _nearest_index(lay, M, N, K, card)
    return None if i is None else TABLE[i]


def _nearest_index(lay: str, M: int, N: int, K: int, card: str | None) -> int | None:
    """:func:`nearest`'s point as an index into :data:`TABLE` (and :data:`TABLE_CARDS`)."""
    if min(M, N, K) <= 0:
        return None
    lm, ln, lk = math.log2(M), math.log2(N), math.log2(K)

    def distance(i):
        p = TABLE[i]
        return abs(math.log2(p[1]) - lm) + abs(math.log2(p[2]) - ln) + abs(math.log2(p[3]) - lk)

    same_layout = [i for i, p in enumerate(TABLE) if p[0] == lay]
    tiers = (same_layout, range(len(TABLE)))
    if card is not None:
        tiers = tuple(t for group in tiers for t in ([i for i in group if TABLE_CARDS[i] == card], group))
    for candidates in tiers:
        if candidates:
            best = min(candidates, key=distance)
            if distance(best) <= NEAREST_MAX_LOG2:
                return best
    return None


_CARD_NAMES: dict = {}


def card_of(device: torch.device) -> str | None:
    """The table's name for ``device``'s card ("NVIDIA H200" for any H200 model), or None off-GPU; read once per
    device index."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _CARD_NAMES:
        name = torch.cuda.get_device_name(index)
        _CARD_NAMES[index] = "NVIDIA H200" if "H200" in name else name
    return _CARD_NAMES[index]


_local = threading.local()


@contextlib.contextmanager
def fused_launch():
    """No cuBLAS route for the GEMMs decided inside (this thread): an eager call that one fused launch serves better
    at a host-bound size (ops/gemm.fused_launch_preferred) records the kernel's launch."""
    before = getattr(_local, "fused", False)
    _local.fused = True
    try:
        yield
    finally:
        _local.fused = before


def cublas_preferred(a: torch.Tensor, b: torch.Tensor, bias=None, residual=None,
                     epilogue=None) -> tuple[bool, str]:
    """Whether the router should hand ``act(a @ b (+ bias))`` to cuBLAS (and torch's activation) instead of a
    tilewright kernel, and why: a 2-D GEMM without a residual or an output dtype of its own (``epilogue``: None or the
    op's activation), bf16 / fp16 on an sm_90 GPU, near a measured point where cuBLAS won by more than 3% or small
    (see the module's "How"). An activation then runs as torch's own pass after cuBLAS, as the unfused
    ``F.gelu(F.linear(...))`` does: where the mainloop loses, the fused epilogue did not win it back (H200: bias + gelu
    fused ran 0.59-0.97x torch's two kernels at M 32-256 and at 700 x 2816 x 1792 / 1100 x 5000 x 3000,
    perf/results/h200/rms_norm_linear/ops_2026-11-28_1250.txt)."""
    if epilogue is not None and not isinstance(epilogue, str):
        return False, f"fused epilogue ({epilogue})"
    if getattr(_local, "fused", False):
        return False, "a host-bound eager call: one fused launch (ops/gemm.fused_launch_preferred)"
    if residual is not None or a.dim() != 2 or b.dim() != 2 or not a.is_cuda:
        return False, "not a plain 2-D CUDA GEMM"
    if a.dtype not in (torch.bfloat16, torch.float16):
        return False, f"{a.dtype} is not in the cuBLAS table (bf16 / fp16)"
    env = read_env(*_ENV_NAMES)[0]
    if env in (b"0", "0"):
        return False, f"cuBLAS routing off ({ENV}=0)"
    cap = capability(a.device)
    if cap is None or cap[0] != 9:
        return False, "the cuBLAS table was measured on sm_90 (H100, H200)"
    M, K = a.shape
    N = b.shape[1]
    index = _nearest_index(layout(a, b), M, N, K, card_of(a.device))
    if index is None:
        if M > SMALL_MAX_ROWS_OWN and 2.0 * M * N * K < SMALL_PROBLEM_FLOPS:
            return True, (f"no measured point near; a plain GEMM of > {SMALL_MAX_ROWS_OWN} rows under 2^36 FLOPs "
                          "(tilewright's kernels lost to cuBLAS on every measured neighbour but two)")
        return False, "no measured cuBLAS point near this shape"
    lay, m, n, k, ratio = TABLE[index]
    where = f"measured {lay} {m}x{n}x{k}: tilewright {ratio:.2f}x cuBLAS ({TABLE_CARDS[index]})"
    return ratio < PREFER_BELOW, where
