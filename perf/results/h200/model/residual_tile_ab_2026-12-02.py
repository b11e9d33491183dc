"""Issue 14 item 5, the model-level A/B of gemm_sm90.RESIDUAL_VARIANT (a GEMM with a fused residual on the sm_90a
kernel's pingpong 128 x 128 tile rather than the plain GEMM's tile; `h200/gemm/epilogue_paths_ab_s39.txt`: 1-30%
less time on such GEMMs, kernels alone). A copy of residual_route_ab_2026-11-29.py with the switch changed: both
choices in one process, interleaved. Per case tag (llama-prefill, vit-prefill) and mode (fwd,
fwd+bwd): tilewright eager and compiled with the route on / off, torch eager and torch.compile beside them; each
provider's queued loop of 20 steps (no sync inside) timed 7 rounds in rotating order, medians; ratios against torch
eager / compile. Run from the repository root:
`PYTHONPATH=src python perf/results/h200/model/residual_tile_ab_2026-12-02.py [tags] [modes]`."""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_steps import case_inputs, step_of  # noqa: E402

from tilewright import router  # noqa: E402
from tilewright.cuda_fallback import gemm_sm90  # noqa: E402

TAGS = sys.argv[1].split(",") if len(sys.argv) > 1 else ["llama-prefill", "vit-prefill"]
MODES = sys.argv[2].split(",") if len(sys.argv) > 2 else ["fwd", "fwd+bwd"]
ROUNDS, STEPS = 7, 20
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
t_start = time.time()
for tag in TAGS:
    case, ref, ours, x = case_inputs(tag)
    compiled_ref, compiled_ours = torch.compile(ref), torch.compile(ours)
    for mode in MODES:
        # provider -> (block, the residual tile on during its steps; None: torch's)
        providers = {"torch_eager": (ref, None), "torch_compile": (compiled_ref, None),
                     "tw_eager_plain_tile": (ours, False), "tw_eager_res_tile": (ours, True),
                     "tw_compile_plain_tile": (compiled_ours, False), "tw_compile_res_tile": (compiled_ours, True)}

        def run(name, steps):
            blk, rows = providers[name]
            tile = gemm_sm90.VARIANTS[gemm_sm90.RESIDUAL_VARIANT] if rows else None
            if rows is not None and gemm_sm90.FAMILY.residual_variant is not tile:
                gemm_sm90.FAMILY.residual_variant = tile
                router.invalidate()  # new decisions, new replay keys (the router's epoch is in them)
            step = step_of(blk, x, mode)
            for _ in range(steps):
                step()

        for name in providers:  # warm-up: compile, tune, record both routes' replays
            run(name, 3)
        torch.cuda.synchronize()
        times = {n: [] for n in providers}
        names = list(providers)
        for r in range(ROUNDS):
            for name in names[r % len(names):] + names[:r % len(names)]:
                run(name, 2)  # (the route switch and its first calls outside the timed loop)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                run(name, STEPS)
                torch.cuda.synchronize()
                times[name].append((time.perf_counter() - t0) / STEPS * 1e3)
        med = {n: statistics.median(v) for n, v in times.items()}
        eager, comp = med["torch_eager"], med["torch_compile"]
        print(f"{tag} {mode}: " + ", ".join(f"{n} {t:.3f} ms" for n, t in med.items()), flush=True)
        for n in names[2:]:
            print(f"   {n:24s} {eager / med[n]:.3f}x eager, {comp / med[n]:.3f}x compile", flush=True)
        gain_eager = med["tw_eager_plain_tile"] / med["tw_eager_res_tile"]
        gain_compiled = med["tw_compile_plain_tile"] / med["tw_compile_res_tile"]
        print(f"   res_tile / plain_tile: eager {gain_eager:.3f}x, compiled {gain_compiled:.3f}x; "
              f"t={time.time() - t_start:.0f}s", flush=True)
