"""A/B of the sm_90a attention backward's step options (issue 15; attention_bwd_sm90.STEP_OPTIONS, the host's
TILEWRIGHT_CUDA_ATTN_BWD_STEP): A = "defer" (the dQ staging's fence + READY arrive one step later, behind the next
step's S^T / dP^T issue), B = "stsm" (dS^T by four stmatrix.x4 for 16 32-bit stores), C = "lds64" (the statistics by
64-bit loads), and all three, against the default build and cuDNN. Prepared in session 33 on a CPU; never run on a GPU.

    PYTHONPATH=src python perf/results/h200/attention/bwd_sync_ab_2026-11-29.py > $OUT/bwd_sync_ab.txt
    PYTHONPATH=src python perf/results/h200/attention/bwd_sync_ab_2026-11-29.py --prebuild  # compile only (no GPU)
    ... bwd_sync_ab_2026-11-29.py --settings default,A  # a subset
    ... bwd_sync_ab_2026-11-29.py --settings default,A,ABC --rows hd128  # the head-dim-128 confirmation rows

One process for every setting: the switch is read at each launch (the op keys its backward plans, and their bound
launches, on it), so each provider below sets it before its call, and its CUDA graph holds its own build's kernel.
Per row, bf16, fwd + bwd (torch.autograd.grad of q, k, v with a fixed dO; attention_steps.Step): tilewright's forward
on backend "cuda" and the sm_90a backward (TILEWRIGHT_CUDA_ATTN_BWD=1: the op would give the non-causal head-dim-64
row to Triton's) under each setting, and cuDNN (SDPA, K / V repeated over a GQA group), CUDA-graph replays of all of
them interleaved with the L2 flushed (bench.common.graph_ms_alternating), as session 31's dQ staging A/B
(descriptor_ab_2026-11-29.py; there one process a setting). First, per row, every setting's dK / dV are checked
bit-equal to the default's and dQ within its reductions' reordering (the options move the same values).

Lines: `# ...` (tree, kernel sources' hash, GPU, torch); `check <row> <setting> dk_equal <bool> dv_equal <bool> dq_maxdiff
<x> (dq_max <y>)`; `fwd+bwd <row> <setting> tw <ms> cudnn <ms> cudnn/tw <ratio> vs_default <ratio>` (vs_default: the
default's time / this setting's, > 1 faster)."""
import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = "1"
os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
import torch

import tilewright
from tilewright.cuda_fallback import attention_bwd_sm90 as cb
from tilewright.cuda_fallback import build_check
from tilewright.cuda_fallback.runtime import build

# "default": the build without options (since session 34 head dim 128 takes "defer" when the variable is unset)
SETTINGS = {"default": "none", "A": "defer", "B": "stsm", "C": "lds64", "ABC": "defer,stsm,lds64"}
# (B, Hq, Hkv, S, D, causal): issue 15's head-dim-64 row (0.983x cuDNN fwd + bwd, session 31) and its causal twin,
# the hdim-128 8k row, the GQA 2k causal row
ROWS = ((2, 8, 8, 8192, 64, False), (2, 8, 8, 8192, 64, True), (2, 16, 16, 8192, 128, False),
        (4, 32, 8, 2048, 128, True))
# --rows hd128 (session 34): "defer" ran 1.007 / 1.029x the default on the two head-dim-128 rows above and 0.964 /
# 0.973x at head dim 64 - its confirmation at head dim 128 over masks, lengths and GQA, before a per-head-dim default
ROWS_HD128 = ((4, 16, 16, 2048, 128, False), (4, 16, 16, 2048, 128, True), (2, 32, 8, 4096, 128, False),
              (2, 16, 16, 4096, 128, True), (1, 32, 8, 8192, 128, True), (4, 32, 8, 2048, 128, True),
              (2, 16, 16, 8192, 128, False), (8, 16, 16, 1024, 128, True))


def builds() -> list[dict]:
    """The dK / dV builds (-D sets) the A/B and the options' GPU tests ask for: every setting at head dims 64 / 128,
    both masks (dQ in the pass, bf16, the default staging); and the op test's windowed and soft-capped head-dim-64
    causal builds, default and all three options."""
    steps = [cb.check_step((value or "").split(",") if value else (), "setting") for value in SETTINGS.values()]
    out = [cb.defines(d, causal, False, "b", True, step=step) for d in cb.HEAD_DIMS for causal in (False, True)
           for step in steps]
    out += [cb.defines(64, True, False, "b", True, window=w, softcap=not w, step=step)
            for w in (True, False) for step in ((), tuple(cb.STEP_OPTIONS))]
    return out


def prebuild() -> None:
    """Compile builds() on parallel compiler processes into the cubin cache (runtime.build.prebuild: cached ones are
    skipped), then check that each is there and spill-free."""
    t0 = time.perf_counter()
    wanted = builds()
    build.prebuild([lambda d=d: build.compile_source(cb.SOURCE, "sm_90a", d) for d in wanted])
    logs = [build.compile_source(cb.SOURCE, "sm_90a", d).log for d in wanted]
    spilled = sum(build_check.parse_ptxas(log)["spills"] > 0 for log in logs)
    print(f"# prebuilt {len(wanted)} builds in {time.perf_counter() - t0:.1f} s; {spilled} with spills", flush=True)


def under(value, fn):
    """``fn`` run with TILEWRIGHT_CUDA_ATTN_BWD_STEP = ``value`` (None: unset, the default build)."""
    def run():
        if value is None:
            os.environ.pop(cb.STEP_ENV, None)
        else:
            os.environ[cb.STEP_ENV] = value
        return fn()
    return run


def main() -> None:
    from tilewright.bench.common import graph_ms_alternating

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from attention_steps import Step, row_name

    ap = argparse.ArgumentParser()
    ap.add_argument("--prebuild", action="store_true")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--replays", type=int, default=15)
    ap.add_argument("--rows", choices=("issue15", "hd128"), default="issue15")
    args = ap.parse_args()
    if args.prebuild:
        prebuild()
        return
    names = args.settings.split(",")
    assert names[0] == "default" and all(n in SETTINGS for n in names), f"settings: default first, of {list(SETTINGS)}"

    class CudaStep(Step):
        """attention_steps.Step with tilewright's forward on backend "cuda" (then the sm_90a backward)."""

        def tw(self):
            q, k, v = self.q, self.k, self.v
            return torch.autograd.grad(tilewright.flash_attention(q, k, v, causal=self.causal, backend="cuda"),
                                       (q, k, v), self.do)

    cuda_dir = Path(tilewright.__file__).resolve().parent / "cuda_fallback"
    sources = hashlib.sha256(b"".join((cuda_dir / name).read_bytes() for name in
                                      ("attention_sm90.cu", "attention_bwd_sm90.cu", "ptx/attention_tile.cuh",
                                       "ptx/stmatrix.cuh")))
    print(f"# tilewright {Path(tilewright.__file__).resolve().parent}, kernel sources {sources.hexdigest()[:12]}, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}, settings "
          f"{', '.join(f'{n}={SETTINGS[n]}' for n in names)}, timer graphs", flush=True)
    for i, (B, Hq, Hkv, S, D, causal) in enumerate(ROWS_HD128 if args.rows == "hd128" else ROWS):
        torch.manual_seed(i)
        st = CudaStep(B, Hq, Hkv, S, D, causal)
        row = row_name(B, Hq, Hkv, S, D, causal)
        grads = {n: under(SETTINGS[n], st.tw)() for n in names}
        torch.cuda.synchronize()
        dq0, dk0, dv0 = grads["default"]
        for n in names[1:]:
            dq, dk, dv = grads[n]
            print(f"check {row} {n} dk_equal {torch.equal(dk, dk0)} dv_equal {torch.equal(dv, dv0)} dq_maxdiff "
                  f"{(dq.float() - dq0.float()).abs().max().item():.3g} (dq_max {dq0.float().abs().max().item():.3g})",
                  flush=True)
        del grads, dq0, dk0, dv0
        fns = [under(SETTINGS[n], st.tw) for n in names] + [st.sd]
        times = graph_ms_alternating(fns, calls=5, replays=args.replays)
        sd = times[-1]
        for n, t in zip(names, times):
            print(f"fwd+bwd {row} {n} tw {t:.4f} cudnn {sd:.4f} cudnn/tw {sd / t:.3f} vs_default {times[0] / t:.3f}",
                  flush=True)
        os.environ.pop(cb.STEP_ENV, None)
        del st
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
