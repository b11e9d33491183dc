"""A/B of the sm_90a attention kernels' wgmma descriptors formed once in uniform registers (attention_sm90.cu,
attention_bwd_sm90.cu; the SASS lost 72-264 instructions a forward build, 56-192 a backward kernel, with the same
HGMMAs) through the public op, one source tree per process - a process cannot build two versions of one .cu by name:

    PYTHONPATH=<tree>/src python perf/results/h200/attention/descriptor_ab_2026-11-29.py <label> [--no-graph]

once with the tree of the change and once with the previous commit's (`git archive <commit> src | tar -x -C <dir>`).
Per row, bf16: tilewright's forward (`tilewright.flash_attention(q, k, v, causal=..., backend="cuda")`) and forward +
backward (torch.autograd.grad of q, k, v with a fixed dO: attention_steps.Step, its tilewright step on backend
"cuda") against cuDNN's (SDPA under SDPBackend.CUDNN_ATTENTION, K / V repeated over a GQA group) in the same
process; CUDA-graph replays interleaved with the L2 flushed (bench.common.graph_ms_alternating; `--no-graph`, or a
capture that fails: triton's do_bench, medians, the providers interleaved over two rounds, as group_split_ab did).
TILEWRIGHT_CUDA_ATTN_BWD=1: every row's backward runs the sm_90a kernels (the op would give the non-causal head dim
64 row to Triton's). Then checksums (sha256 of the bytes) of out, LSE, dK, dV in the default mode (dQ is summed in a
varying order there) and of dQ, dK, dV under torch.use_deterministic_algorithms (the dQ kernel) on seeded inputs: the
change is bit-exact if the two trees print the same `sum` lines.

Lines: `# <label> ...` (the tree, its kernel sources' hash, GPU, torch); `<label> fwd|fwd+bwd <row> tw <ms> cudnn <ms>
cudnn/tw <ratio> (<timer>)`; `<label> sum|sum-det <row> <tensor> <sha> ...`. Compare the trees with
`diff <(grep ' sum' A.txt | cut -d' ' -f2-) <(grep ' sum' B.txt | cut -d' ' -f2-)`."""
import hashlib
import os
import sys
from pathlib import Path

os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = "1"
os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import tilewright  # noqa: E402
from tilewright.bench.common import graph_ms_alternating  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_steps import Step, row_name  # noqa: E402

label = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "tree"
use_graph = "--no-graph" not in sys.argv
# (B, Hq, Hkv, S, D, causal)
ROWS = ((2, 16, 16, 8192, 128, False), (2, 16, 16, 8192, 128, True), (4, 32, 8, 2048, 128, True),
        (2, 8, 8, 8192, 64, False), (1, 16, 16, 16384, 128, True))

cuda_dir = Path(tilewright.__file__).resolve().parent / "cuda_fallback"
sources = hashlib.sha256(b"".join((cuda_dir / name).read_bytes() for name in
                                  ("attention_sm90.cu", "attention_bwd_sm90.cu", "ptx/attention_tile.cuh")))
print(f"# {label}: tilewright {Path(tilewright.__file__).resolve().parent}, kernel sources {sources.hexdigest()[:12]}, "
      f"{torch.cuda.get_device_name()}, torch {torch.__version__}, timer {'graphs' if use_graph else 'do_bench'}",
      flush=True)


class CudaStep(Step):
    """attention_steps.Step with tilewright's forward on backend "cuda" (the sm_90a forward; the backward then runs
    the sm_90a kernels, TILEWRIGHT_CUDA_ATTN_BWD=1)."""

    def tw(self):
        q, k, v = self.q, self.k, self.v
        torch.autograd.grad(tilewright.flash_attention(q, k, v, causal=self.causal, backend="cuda"), (q, k, v),
                            self.do)

    def tw_fwd(self):
        return tilewright.flash_attention(self.q, self.k, self.v, causal=self.causal, backend="cuda")

    def sd_fwd(self):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(self.q, self.kk, self.vv, is_causal=self.causal)


def do_bench_alternating(fns, rounds=2):
    """Medians of triton's do_bench, the providers interleaved over `rounds` rounds; the smallest per provider."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            times[i].append(triton.testing.do_bench(fn, warmup=30, rep=200, return_mode="median"))
    return [min(t) for t in times]


def timed(fns, calls):
    """(ms per call of each of fns, timer name): CUDA graphs interleaved, or do_bench where capture fails."""
    if use_graph:
        try:
            return graph_ms_alternating(fns, calls=calls, replays=9), "graphs"
        except RuntimeError as e:  # a capture that fails: the stream's capture was ended, time without graphs
            print(f"# graph capture failed ({str(e).splitlines()[0][:100]}): do_bench", flush=True)
            torch.cuda.synchronize()
    return do_bench_alternating(fns), "do_bench"


def sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


for i, (B, Hq, Hkv, S, D, causal) in enumerate(ROWS):
    torch.manual_seed(i)
    st = CudaStep(B, Hq, Hkv, S, D, causal)
    row = row_name(B, Hq, Hkv, S, D, causal)
    with torch.no_grad():
        (tw, sd), timer = timed([st.tw_fwd, st.sd_fwd], 10)
    print(f"{label} fwd {row} tw {tw:.4f} cudnn {sd:.4f} cudnn/tw {sd / tw:.3f} ({timer})", flush=True)
    (tw, sd), timer = timed([st.tw, st.sd], 5)
    print(f"{label} fwd+bwd {row} tw {tw:.4f} cudnn {sd:.4f} cudnn/tw {sd / tw:.3f} ({timer})", flush=True)
    del st
    torch.cuda.empty_cache()

for i, (B, Hq, Hkv, S, D, causal) in enumerate(ROWS):
    torch.manual_seed(1000 + i)
    st = CudaStep(B, Hq, Hkv, S, D, causal)
    row = row_name(B, Hq, Hkv, S, D, causal)
    with torch.no_grad():
        out, lse = tilewright.flash_attention(st.q, st.k, st.v, causal=causal, backend="cuda", return_lse=True)
    out_g = tilewright.flash_attention(st.q, st.k, st.v, causal=causal, backend="cuda")
    _, dk, dv = torch.autograd.grad(out_g, (st.q, st.k, st.v), st.do)
    print(f"{label} sum {row} out {sha(out)} lse {sha(lse)} dk {sha(dk)} dv {sha(dv)}", flush=True)
    torch.use_deterministic_algorithms(True, warn_only=True)  # (only the op's dQ choice matters here)
    try:
        out_g = tilewright.flash_attention(st.q, st.k, st.v, causal=causal, backend="cuda")
        dq, dk, dv = torch.autograd.grad(out_g, (st.q, st.k, st.v), st.do)
    finally:
        torch.use_deterministic_algorithms(False)
    print(f"{label} sum-det {row} dq {sha(dq)} dk {sha(dk)} dv {sha(dv)}", flush=True)
    del st, out, lse, out_g, dq, dk, dv
    torch.cuda.empty_cache()
