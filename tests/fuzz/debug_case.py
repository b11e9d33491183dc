"""Print what one fuzz case computes, step by step, next to torch (for a failure the oracle cannot explain alone).
Usage: ``PYTHONPATH=src:tests/fuzz python tests/fuzz/debug_case.py SUMMARY.json FAMILY SEED [device]``"""
from __future__ import annotations

import json
import re
import sys

import fuzz_cases as fc
import torch


def _nf(t):
    return int((~torch.isfinite(t)).sum()) if t is not None else None


def main(path, family, seed, device="cuda"):
    with open(path) as f:
        failures = json.load(f)["failures"]
    for text in failures:
        case = json.loads(re.search(r"fuzz_cases\.py '(\{.*\})'", text).group(1))
        if case["family"] == family and case["seed"] == int(seed):
            break
    else:
        raise SystemExit(f"no {family} seed {seed} in {path}")
    print(json.dumps(case))
    T = fc.build(case, device)
    fc._params_for_modules(case, T)
    for n, t in T.items():
        if isinstance(t, torch.Tensor):
            print(f"{n}: {t.dtype} {tuple(t.shape)} stride {t.stride()} non-finite {_nf(t)}")
    ours = fc.tw_call(case, T, case["backend"])
    Ts = fc._fresh_copies(T)
    same = fc.torch_call(case, Ts, None)
    o, s = ours[0], same[0]
    rows_o = (~torch.isfinite(o.detach())).reshape(-1, o.shape[-1]).any(-1).nonzero().flatten().tolist()
    rows_s = (~torch.isfinite(s.detach())).reshape(-1, s.shape[-1]).any(-1).nonzero().flatten().tolist()
    print("non-finite output rows: ours", rows_o, "torch", rows_s)
    leaves = fc._leaves(case, T)
    if leaves:
        gos = fc._grad_outs(case, ours)
        g_o = torch.autograd.grad(o, [t for _, t in leaves], gos[0], allow_unused=True)
        g_s = torch.autograd.grad(s, [Ts[n] for n, _ in leaves], gos[0].to(s.dtype), allow_unused=True)
        for (n, _), a, b in zip(leaves, g_o, g_s):
            print(f"grad[{n}]: ours non-finite {_nf(a)} first {a.flatten()[:4].tolist() if a is not None else None}; "
                  f"torch non-finite {_nf(b)} first {b.flatten()[:4].tolist() if b is not None else None}")
    if family == "rms_norm_linear":
        from tilewright.ops.rms_norm_linear import rms_norm_linear_op
        x = T["x"].detach().reshape(-1, T["x"].shape[-1])
        _, rstd = rms_norm_linear_op(x, T["norm_weight"].detach(), T["weight"].detach(), None,
                                     fc._eps(case, x.dtype), case["backend"])
        print("rstd of non-finite x rows:", rstd[(~torch.isfinite(x)).any(-1)].tolist())


    try:
        print("verdict:", fc.run_case(case, device, case["backend"]))
    except fc.FuzzFailure as e:
        print("verdict: FAIL", str(e).splitlines()[0][:400])


if __name__ == "__main__":
    main(*sys.argv[1:])
