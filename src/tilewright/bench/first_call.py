"""First-call benchmark: how long a user waits for the first result of an op at a shape nothing has seen yet.

Each case runs in a fresh Python process (so nothing in memory helps), twice:

* ``cold``      - empty Triton kernel cache and empty tilewright tuning cache: every kernel compiles.
* ``disk-warm`` - Triton's on-disk kernel cache filled by the cold run, tuning cache still empty: what a second
                  process (a restarted training job, another worker) pays.

The time is from the op call to its synchronised result, after ``import tilewright`` and CUDA initialisation (both
reported apart: ``import_s``); torch's own op at the same shape is timed the same way in the same process as the
peer. Targets: <= 1 s disk-warm, <= 3 s cold.

Rows (long format of bench/common.py, ``op = "first_call"``): ``case = "<op>|<shape>|<cold|disk-warm>"``,
``median_ms`` = that one wall-clock sample in ms (one sample by nature; not a median), peer ``torch``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from .common import COLUMNS, add_speedups, on_gpu, require_pandas

TARGET_S = {"cold": 3.0, "disk-warm": 1.0}
# case -> (M, N, K) or (B, H, S, D); sizes no other benchmark uses, so a shared cache cannot have seen them
SUITES = {"default": {"linear": (1000, 3000, 1536), "linear+bias+gelu+residual": (1000, 3000, 1536),
                      "rms_norm_linear": (1000, 3000, 1536), "flash_attention": (2, 16, 640, 128)},
          "tiny": {"linear": (24, 40, 32), "flash_attention": (1, 2, 32, 16)}}

# The child builds its inputs with bench/host.cases (the same cases and torch peers as the host benchmark) at this
# suite's shape; the GEMM cases take the shape given, attention a small (B, H, S, D) or the one given.
_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
import tilewright
from tilewright.bench import host
gpu = torch.cuda.is_available()
dev, dt = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float16)
sync = torch.cuda.synchronize if gpu else (lambda: None)
torch.ones(1, device=dev).add_(1); sync()
import_s = time.perf_counter() - t0
case, shape = sys.argv[1], tuple(int(v) for v in sys.argv[2].split(","))
gemm_shape, attn_shape = ((16, 16, 16), shape) if case == "flash_attention" else (shape, (1, 1, 16, 16))
ours, peer = next(fns for name, fns in host.cases(gemm_shape, attn_shape, dev, dt).items()
                  if name.split("|")[0] == case)
def first(fn):
    sync(); t = time.perf_counter(); fn(); sync(); return time.perf_counter() - t
ours_s = first(ours)
peer_s = first(peer)
print("RESULT " + json.dumps(dict(import_s=import_s, ours_s=ours_s, peer_s=peer_s)))
"""


def _child(case: str, shape, env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, case, ",".join(map(str, shape))], env=env,
                          capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"first-call child for {case} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")


def run(suite: str = "default", progress=print) -> pd.DataFrame:
    """Time the first call of every case in fresh processes, cold then disk-warm; see the module docstring."""
    pd = require_pandas("tilewright bench --op first_call")
    if suite not in SUITES:
        raise ValueError(f"suite: unknown {suite!r}; choose from {sorted(SUITES)}")
    gpu = on_gpu()
    if not gpu:
        progress("no GPU: interpreter first calls (they say nothing about compile or tuning time on a GPU)")
    rows, peers = [], {}
    dtype = "bfloat16" if gpu else "float16"
    with tempfile.TemporaryDirectory(prefix="tw-first-call-") as tmp:
        for op, shape in SUITES[suite].items():
            # one Triton cache per case: another case's kernels (same family, other constexprs) must not warm it
            triton_cache = os.path.join(tmp, f"triton-{op}")
            for mode in ("cold", "disk-warm"):
                tune_cache = os.path.join(tmp, f"tune-{op}-{mode}")
                env = dict(os.environ, TRITON_CACHE_DIR=triton_cache, TILEWRIGHT_CACHE_DIR=tune_cache)
                r = _child(op, shape, env)
                case = f"{op}|{'x'.join(map(str, shape))}|{mode}"
                peers[case] = "torch"
                for provider, sec in (("tilewright", r["ours_s"]), ("torch", r["peer_s"])):
                    rows.append(dict(op="first_call", case=case, shape="x".join(map(str, shape)), dtype=dtype,
                                     provider=provider, median_ms=sec * 1e3, tflops=float("nan")))
                verdict = ""
                if gpu:
                    verdict = f" | target {TARGET_S[mode]:.0f} s: {'met' if r['ours_s'] <= TARGET_S[mode] else 'MISSED'}"
                progress(f"{case:<48} tilewright {r['ours_s']:7.2f} s | torch {r['peer_s']:6.2f} s | "
                         f"import+init {r['import_s']:5.2f} s{verdict}")
    return add_speedups(pd.DataFrame(rows), peers)[COLUMNS]
