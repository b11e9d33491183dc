"""Seeded random cases for every tilewright op family, the torch oracle, and the verdict for one case.

A case is a small JSON-able dict: family, entry point, dtype, shapes, one layout recipe per tensor argument, options,
the subset of inputs that require grad, NaN/Inf injections, the backend, and (for deliberately bad input) a tag.
``generate(family, seed, tier)`` makes it; ``run_case(case, device, backend)`` turns it into tensors (deterministically:
values come from a ``torch.Generator`` seeded with the case's seed, built on the CPU and then moved) and returns one of
``pass`` / ``declined`` / ``raised_ok`` or raises :class:`FuzzFailure` whose message ends with a one-line repro.

Repro: ``PYTHONPATH=src:tests/fuzz TRITON_INTERPRET=1 python tests/fuzz/fuzz_cases.py '<case json>'`` (the JSON is
printed in every failure), or ``... fuzz_cases.py --family gemm --seed 17 --tier cpu``.

Numerics rule (every compared tensor: the output, the LSE, every input's gradient, second-order gradients)
-----------------------------------------------------------------------------------------------------------------
ref64 = torch's own function on float64 copies of the inputs; same = torch's function on the same tensors in the same
dtype (torch's own error baseline); ours = tilewright. Then:

1. ``ours.shape == same.shape`` and ``ours.dtype == same.dtype`` (for matmul/linear the contract's output dtype,
   ``out_dtype or a.dtype``; for scaled_mm ``out_dtype``).
2. Non-finite pattern: the NaN / +Inf / -Inf masks of ours equal those of ref64 rounded to ours' dtype, or those of
   ``same`` (never worse than torch: a NaN in a row of ``a`` poisons that output row, an Inf meeting a zero or an
   opposite-sign Inf gives NaN, an fp16 overflow gives Inf - whatever torch itself gives is accepted).
   2b. Where *which* non-finite value appears is rounding noise (``_nonfinite_class_only``: an Inf / NaN FP8 scale, an
   Inf in attention's v), only the positions of non-finite entries must match. A causal attention whose v holds
   NaN / Inf in rows a query cannot see may also leave that query finite (documented implementation-defined).
3. Where ours and ref64 are both finite: ``max|ours - ref64| <= 2 * max|same - ref64| + 8 * eps * mag``, with eps the
   machine epsilon of the coarser of the input and output dtypes and mag the largest finite |ref64| (for attention
   also the largest |v|: the output is an average of v rows). Additions: attention adds eps_fp32 * max|scale q.k| to
   eps (scores are rounded in fp32 whatever the input dtype, and p = exp(s - lse) inherits that relative error), and
   its gradients use max(|grad|, |scale| max|q|,|k| * max|v| * 4) as mag (a gradient can be exactly 0 - one visible
   key - while the kernel's terms are not); use_fast_accum scaled_mm adds 2^-9 * max sum_k |a scale_a| |b scale_b|
   (the documented reduced-precision FP8 accumulator), and on a GPU accurate mode adds 2^-12 of it (the ~14 bits an
   FP8 tensor-core MMA keeps inside one K = 32 slice, which cuBLASLt's accurate mode has too).
   8 * eps * mag is a few output ulps of the largest entry: a bias or residual read with a wrong stride, a wrong
   causal mask or a lost tile is off by O(mag) and fails by orders of magnitude.

Error rule: every tilewright exception must be a TypeError / ValueError / NotImplementedError (RuntimeError only
where torch also rejects the input) whose message names the offending argument; a deliberately invalid case names
which arguments may be blamed. An exception for an input torch accepts is allowed only for the documented unsupported
inputs in ``UNSUPPORTED`` (attention head dims that are not multiples of 8 in [8, 256], attn_mask, dropout, ...). A
forced backend that cannot run the input raises a ValueError saying so: that is counted as "declined", not as a
failure.

Negative strides: torch has none (``flip()`` copies), so no recipe makes one.
"""
from __future__ import annotations

import json
import math
import os
import random
import re
import sys

import torch
import torch.nn.functional as F

# The fuzz is of tilewright's kernels: small eager calls must not take the ATen route (ops/_aten.py), which would
# compare torch with itself. (tests/conftest.py does the same for pytest runs; this covers the direct runs.)
os.environ.setdefault("TILEWRIGHT_ATEN_BELOW", "0")

FAMILIES = ("gemm", "rms_norm_linear", "attention", "scaled_mm")
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "float64": torch.float64,
          "int32": torch.int32}
ACTIVATIONS = [None, "relu", "gelu", "gelu_tanh", "silu"]
# the interpreter computes bf16 tl.dot wrong, so the CPU tier stays in fp16/fp32 (bf16 is fuzzed on the GPU)
TIER_DTYPES = {"cpu": ["float16", "float32"], "gpu": ["bfloat16", "float16", "float32"]}

# Inputs torch accepts that tilewright documents it does not support: tag -> (arguments the error may name, where).
UNSUPPORTED = {
    "head_dim": (("q", "query", "k", "key"),
                 "ops/attention.py: head dims are multiples of 8 from 8 to 256; others (36, 4, 264, ...) ValueError"),
    "value_head_dim": (("v", "value"), "ops/attention.py _check: a value head dim of its own is supported when it is "
                       "itself a multiple of 8 in [8, 256] (D // 2 here: 4, 12, ... raise naming v; 16, 32, ... run)"),
    "attn_mask": (("attn_mask",), "scaled_dot_product_attention: attn_mask raises NotImplementedError"),
    "dropout": (("dropout_p",), "scaled_dot_product_attention: dropout_p > 0 raises NotImplementedError"),
    "residual_grows": (("residual",), "matmul: residual must broadcast to the output (it may not enlarge it)"),
    "int_dtype": (("a", "b", "x", "weight", "q", "query", "k", "v", "residual", "norm_weight"),
                  "_checks.check_tensor: float16 / bfloat16 / float32 only"),
    "float64": (("a", "b", "x", "weight", "q", "query", "k", "v", "residual", "norm_weight", "bias"),
                "_checks.check_tensor: float16 / bfloat16 / float32 only"),
    "scalar_bias": (("bias",), "matmul: bias is an (N,) tensor (torch's a @ b + 0.5 broadcasts a Python float)"),
    "scalar_residual": (("residual",), "matmul: residual is a tensor broadcastable to the output"),
    "eps_none": (("eps",), "rms_norm_linear: eps is a float > 0 (F.rms_norm's eps=None is not accepted)"),
    "norm_bias_dtype": (("bias", "residual", "norm_weight"), "no silent promotion: every tensor has x's / a's dtype"),
    "a_1d_flash": (("q",), "flash_attention: q, k, v are 4-D"),
}
# Deliberately invalid input that torch (or torch._scaled_mm's contract, for scaled_mm) rejects: tag -> arguments.
INVALID = {
    "dtype_mix": ("a", "b", "x", "weight", "k", "v", "key", "value", "norm_weight"),
    "k_mismatch": ("a", "b", "x", "weight", "norm_weight"),
    "bias_shape": ("bias",),
    "bias_list": ("bias",),
    "residual_list": ("residual",),
    "residual_shape": ("residual",),
    "activation_list": ("activation",),
    "activation_name": ("activation",),
    "backend_name": ("backend",),
    "out_dtype": ("out_dtype",),
    "eps_zero": ("eps",), "eps_neg": ("eps",), "eps_str": ("eps",), "eps_nan": ("eps",),
    "gqa_ratio": ("k", "key", "q", "query", "enable_gqa"),
    "no_enable_gqa": ("key", "enable_gqa"),
    "batch_mismatch": ("k", "v", "key", "value"),
    "q_list": ("q", "query"),
    "kv_len_mismatch": ("v", "value", "k", "key"),
    "scale_str": ("scale",),
    "b_row_major": ("b",),
    "scale_float": ("scale_a", "scale_b"),
    "scale_dtype": ("scale_a", "scale_b"),
    "scale_shape": ("scale_a", "scale_b"),
    "scale_mix": ("scale_a", "scale_b"),
    "fp8_a_fp16": ("a",),
    "fp8_bias_dtype": ("bias",),
    "fp8_out_dtype": ("out_dtype",),
}
ALLOWED_ERRORS = (TypeError, ValueError, NotImplementedError)
# a clear refusal of a second-order gradient (instead of a wrong number) is accepted
DOUBLE_BACKWARD_REFUSAL = re.compile(r"double backward|second.order|higher.order|create_graph|twice|"
                                     r"not (?:been )?implemented|not supported|unsupported|no autograd formula", re.I)


class FuzzFailure(AssertionError):
    pass


# ------------------------------------------------------------------------------------------------- generation
def _sizes(tier: str) -> dict:
    """Size menus: 0, 1, small primes, and block multiples +- 1 for the tier's tiles (interpreter GEMM tile 64x64x32;
    on the GPU 128/256 tiles and multi-wave grids)."""
    if tier == "cpu":
        return {"mn": [0, 1, 2, 3, 5, 7, 13, 17, 31, 33, 63, 64, 65],
                "k": [0, 1, 3, 8, 16, 31, 32, 33, 64, 65, 97],
                "seq": [0, 1, 2, 5, 17, 31, 33, 63, 64, 65],
                "heads": [1, 2, 3], "batch": [(), (), (), (2,), (1,), (2, 2)],
                "head_dims": [32, 64, 64, 32, 96, 128, 8, 40, 80]}  # 8 -> 16-wide tile, 40 -> 64, 80 -> 128
    return {"mn": [0, 1, 2, 3, 7, 13, 61, 127, 128, 129, 255, 256, 257, 383, 509, 640, 1000, 1025, 2053, 4099],
            "k": [0, 1, 3, 8, 16, 61, 64, 127, 128, 129, 256, 257, 511, 1024, 1031, 2048, 4096],
            "seq": [0, 1, 2, 7, 61, 63, 64, 65, 127, 128, 129, 255, 257, 511, 1000, 1031, 2049],
            "heads": [1, 2, 3, 4, 8], "batch": [(), (), (), (2,), (1,), (3,), (2, 2)],
            "head_dims": [32, 64, 96, 128, 192, 256, 64, 128, 8, 16, 24, 40, 72, 80, 112, 160, 224]}


def _pick(r: random.Random, options, weights=None):
    return r.choices(options, weights=weights)[0] if weights else r.choice(options)


def _layout(r: random.Random, rank: int, role: str) -> str:
    """A layout recipe for a tensor of this rank (see ``make_tensor``)."""
    opts = ["contig", "contig", "offset", "step", "step0"]
    if rank >= 2:
        opts += ["t", "t"]
    if role in ("bias", "norm_weight", "residual", "scale", "param1d"):
        opts += ["expand0", "expand0"]
    if role == "attn" and rank == 4:
        opts += ["bshd", "bshd", "expand0", "expand1"]
    rec = r.choice(opts)
    if rec == "offset":
        rec = f"offset{r.randint(1, 9)}"
    return rec


def _maybe_small(r: random.Random, tier: str, menu, cap: int) -> int:
    return r.choice([s for s in menu if s <= cap])


def generate(family: str, seed: int, tier: str = "cpu", dtypes=None) -> dict:
    """The case for (family, seed, tier): the same triple always gives the same case."""
    r = random.Random(f"{family}:{seed}:{tier}")
    dtypes = dtypes or TIER_DTYPES[tier]
    case = {"family": family, "seed": seed, "tier": tier, "grad": [], "double": False, "inject": {},
            "invalid": None, "unsupported": None, "backend": None}
    if family == "scaled_mm":
        _gen_scaled_mm(r, case, tier)
    else:
        case["dtype"] = r.choice(dtypes)
        {"gemm": _gen_gemm, "rms_norm_linear": _gen_rms, "attention": _gen_attention}[family](r, case, tier)
    names = [n for n in case["layouts"] if n not in case.get("nograd", ())]
    if not case["invalid"] and not case["unsupported"] and family != "scaled_mm":
        roll = r.random()
        if roll < 0.2:  # NaN / Inf injections (no gradients then: NaN patterns of gradients are not compared)
            for n in r.sample(names, k=min(len(names), r.randint(1, 2))):
                case["inject"][n] = [r.choice(["nan", "inf", "-inf"]), r.random()]
        elif roll < 0.6 and names:
            case["grad"] = sorted(r.sample(names, k=r.randint(1, len(names))))
            case["double"] = family in ("gemm", "rms_norm_linear") and r.random() < 0.25
    # every CPU case runs with the router's pick unless it asks for one; the GPU tier forces each backend in turn
    if tier == "cpu" and case["backend"] is None and not case["invalid"]:
        case["backend"] = _pick(r, [None, "triton", "torch"], [6, 3, 1])
    return case


def _gen_gemm(r, case, tier):
    S = _sizes(tier)
    entry = _pick(r, ["matmul", "linear", "nn.Linear"], [3, 2, 1])
    M, N, K = r.choice(S["mn"]), r.choice(S["mn"]), r.choice(S["k"])
    batch = list(r.choice(S["batch"]))
    if tier == "cpu" and batch and M > 33:
        M = r.choice([0, 1, 5, 13])  # keep the interpreter's work small
    if entry == "matmul" and not batch and r.random() < 0.05:
        batch, M = None, None  # a 1-D a (K,)
    a_shape = ([K] if batch is None else [*batch, M, K])
    bias = r.random() < 0.6
    act = r.choice(ACTIVATIONS)
    out_shape = [N] if batch is None else [*batch, M, N]
    res_kind = _pick(r, [None, "full", "row", "row2d", "col", "pos", "batch1"], [4, 3, 2, 1, 1, 1, 1])
    if res_kind == "pos" and not batch:
        res_kind = "full"
    if res_kind in ("col",) and batch is None:
        res_kind = "row"
    res_shape = {None: None, "full": out_shape, "row": [N], "row2d": [1, N],
                 "col": [*(batch or []), M, 1] if batch is not None else None,
                 "pos": out_shape[-2:], "batch1": [1] * len(batch or []) + out_shape[-2:]}[res_kind]
    out_dtype = None
    if entry == "matmul" and r.random() < 0.25:
        out_dtype = r.choice([d for d in TIER_DTYPES[tier] if d != "bfloat16" or tier == "gpu"])
    x_name, w_name = ("a", "b") if entry == "matmul" else ("x", "weight")
    w_shape = [K, N] if entry == "matmul" else [N, K]
    case.update(entry=entry, shapes={x_name: a_shape, w_name: w_shape}, opts={"activation": act, "out_dtype": out_dtype})
    case["layouts"] = {x_name: _layout(r, len(a_shape), "x"), w_name: _layout(r, 2, "w")}
    if bias:
        case["shapes"]["bias"] = [N]
        case["layouts"]["bias"] = _layout(r, 1, "bias")
    if res_shape is not None:
        case["shapes"]["residual"] = res_shape
        case["layouts"]["residual"] = _layout(r, len(res_shape), "residual")
    if entry == "nn.Linear" and case["layouts"][w_name] == "expand0":
        case["layouts"][w_name] = "contig"
    if r.random() < 0.15:
        _gemm_invalid(r, case, x_name, w_name, N, K)


def _gemm_invalid(r, case, x_name, w_name, N, K):
    opts = ["dtype_mix", "k_mismatch", "bias_shape", "bias_list", "residual_list", "residual_shape",
            "activation_list", "activation_name", "backend_name", "scalar_bias", "scalar_residual", "residual_grows",
            "int_dtype", "float64", "norm_bias_dtype"]
    if case["entry"] == "matmul":
        opts.append("out_dtype")
    if case["entry"] == "nn.Linear":  # nn.Module refuses a non-tensor parameter before tilewright sees it
        opts = [o for o in opts if o not in ("bias_list", "scalar_bias")]
    tag = r.choice(opts)
    case["layouts"].setdefault("bias", "contig")
    case["shapes"].setdefault("bias", [N])
    if tag == "k_mismatch":
        w = case["shapes"][w_name]
        case["shapes"][w_name] = [K + 1, w[1]] if w_name == "b" else [w[0], K + 1]
    elif tag == "bias_shape":
        case["shapes"]["bias"] = [N + 1]
    elif tag == "residual_shape":
        case["shapes"]["residual"], case["layouts"]["residual"] = [N + 2], "contig"
    elif tag == "residual_grows":
        out = (case["shapes"][x_name][:-1]) + [N]
        case["shapes"]["residual"], case["layouts"]["residual"] = [3, *out], "contig"
    elif tag == "activation_list":
        case["opts"]["activation"] = ["relu"]
    elif tag == "activation_name":
        case["opts"]["activation"] = "tanh"
    elif tag == "backend_name":
        case["backend"] = r.choice(["cudaa", "TRITON", ""])
    elif tag == "out_dtype":
        case["opts"]["out_dtype"] = r.choice(["int32", "float64"])
    _tag(case, tag)


def _tag(case, tag):
    if tag in UNSUPPORTED:
        case["unsupported"] = tag
    else:
        case["invalid"] = tag


def _gen_rms(r, case, tier):
    S = _sizes(tier)
    entry = _pick(r, ["rms_norm_linear", "nn.RMSNormLinear"], [3, 1])
    M, N, K = r.choice(S["mn"]), r.choice(S["mn"]), r.choice(S["k"])
    batch = list(r.choice(S["batch"]))
    if tier == "cpu" and batch and M > 33:
        M = r.choice([0, 1, 5, 13])
    x_shape = [*batch, M, K]
    case.update(entry=entry, shapes={"x": x_shape, "norm_weight": [K], "weight": [N, K]},
                opts={"eps": r.choice([1e-6, 1e-5, 1e-3, 0.5, 1e-12, "finfo"])})
    case["layouts"] = {"x": _layout(r, len(x_shape), "x"), "norm_weight": _layout(r, 1, "norm_weight"),
                       "weight": _layout(r, 2, "w")}
    if entry == "nn.RMSNormLinear" and case["layouts"]["weight"] == "expand0":
        case["layouts"]["weight"] = "contig"
    if r.random() < 0.6:
        case["shapes"]["bias"], case["layouts"]["bias"] = [N], _layout(r, 1, "bias")
    # fp16: |x * norm_weight| beyond 65504 while the normalised output is ordinary (the documented fp16 limit);
    # torch's unfused pipeline stays finite, so this is where the fused product must not overflow
    if r.random() < 0.1:
        case["opts"]["big"] = True
    if r.random() < 0.12:
        tags = ["dtype_mix", "k_mismatch", "bias_shape", "bias_list", "eps_zero", "eps_neg", "eps_str",
                "eps_nan", "eps_none", "backend_name", "int_dtype", "float64", "norm_bias_dtype"]
        if entry == "nn.RMSNormLinear":  # eps=None is the module's documented finfo default; bias is a Parameter
            tags = [t for t in tags if t not in ("bias_list", "eps_none")]
        tag = r.choice(tags)
        if tag == "k_mismatch":
            case["shapes"]["norm_weight"] = [K + 1]
        elif tag in ("bias_shape", "bias_list"):
            case["shapes"]["bias"], case["layouts"]["bias"] = [N + (tag == "bias_shape")], "contig"
        elif tag.startswith("eps_"):
            case["opts"]["eps"] = {"eps_zero": 0.0, "eps_neg": -1e-6, "eps_str": "1e-6", "eps_nan": "nan",
                                   "eps_none": None}[tag]
        elif tag == "backend_name":
            case["backend"] = "cuda_"
        elif tag == "norm_bias_dtype":
            case["shapes"].setdefault("bias", [N])
            case["layouts"].setdefault("bias", "contig")
        _tag(case, tag)


def _gen_attention(r, case, tier):
    S = _sizes(tier)
    entry = _pick(r, ["flash_attention", "sdpa"], [3, 2])
    B = r.choice([1, 1, 2])
    Hkv = r.choice(S["heads"])
    group = r.choice([1, 1, 2, 3, 4] if tier == "gpu" else [1, 1, 2, 3])
    Hq = Hkv * group
    Sq, Skv = r.choice(S["seq"]), r.choice(S["seq"])
    D = r.choice(S["head_dims"])
    if tier == "cpu" and B * Hq * max(Sq, 1) * max(Skv, 1) * D > 2 * 3 * 65 * 65 * 64:
        Sq = min(Sq, 17)
    causal = r.random() < 0.5
    scale = _pick(r, [None, 0.3, 0.0, -0.5, 2.0, 1 / 64], [5, 1, 1, 1, 1, 1])
    case.update(entry=entry, shapes={"q": [B, Hq, Sq, D], "k": [B, Hkv, Skv, D], "v": [B, Hkv, Skv, D]},
                opts={"causal": causal, "scale": scale})
    case["layouts"] = {n: _layout(r, 4, "attn") for n in ("q", "k", "v")}
    if entry == "flash_attention":
        case["opts"]["return_lse"] = r.random() < 0.4
        # its own stream, so adding the option moved no other field of an existing seed's case
        if causal and random.Random(f"align:{case['seed']}:{tier}").random() < 0.4:
            case["opts"]["causal_align"] = "bottom_right"
        softcap_rng = random.Random(f"softcap:{case['seed']}:{tier}")  # its own stream too
        if softcap_rng.random() < 0.25:
            case["opts"]["softcap"] = softcap_rng.choice([0.5, 5.0, 30.0])
        window_rng = random.Random(f"window:{case['seed']}:{tier}")  # and so does the sliding window
        if window_rng.random() < 0.25:
            left = window_rng.choice([None, 0, 1, 7, 64, 300])
            right = 0 if causal else window_rng.choice([None, 0, 3, 50])
            if left is None and right is None:
                left = 5
            case["opts"]["window"] = [left, right]
            if not causal and window_rng.random() < 0.5:
                case["opts"]["causal_align"] = "bottom_right"
    else:
        case["opts"]["enable_gqa"] = group != 1 or r.random() < 0.5
        case["opts"]["three_d"] = B == 1 and r.random() < 0.2
    if r.random() < 0.1:
        case["opts"]["sharp"] = True  # scores of tens: the online softmax must subtract its running max
    if r.random() < 0.15:
        tags = ["dtype_mix", "gqa_ratio", "batch_mismatch", "q_list", "kv_len_mismatch", "scale_str", "head_dim",
                "value_head_dim", "int_dtype", "float64", "backend_name"]
        if entry == "sdpa":
            tags += ["attn_mask", "dropout", "no_enable_gqa"]
        else:
            tags += ["a_1d_flash"]
        tag = r.choice(tags)
        sh = case["shapes"]
        if tag == "gqa_ratio":
            sh["q"][1] = Hkv * group + 1 if Hkv > 1 else 3
            sh["k"][1] = sh["v"][1] = 2 if Hkv == 1 else Hkv
            if entry == "sdpa":
                case["opts"]["enable_gqa"] = True
        elif tag == "no_enable_gqa":
            sh["q"][1] = sh["k"][1] * 2
            case["opts"]["enable_gqa"] = False
        elif tag == "batch_mismatch":
            sh["k"][0] = sh["v"][0] = B + 1
            case["opts"]["three_d"] = False  # (H, S, D) inputs take [0] of each: the batch dims would not reach the op
        elif tag == "kv_len_mismatch":
            sh["v"][2] = Skv + 1
        elif tag == "scale_str":
            case["opts"]["scale"] = "0.5"
        elif tag == "head_dim":
            d = r.choice([36, 4, 12, 100, 264])  # not a multiple of 8, below 8, above 256
            for n in ("q", "k", "v"):
                sh[n][3] = d
        elif tag == "value_head_dim":
            sh["v"][3] = D // 2
        elif tag == "backend_name":
            case["backend"] = "flash"
        elif tag == "a_1d_flash":
            case["opts"]["three_d"] = True
        elif tag == "attn_mask":
            case["opts"]["attn_mask"] = True
        elif tag == "dropout":
            case["opts"]["dropout_p"] = 0.25
        if entry == "sdpa" and tag in ("gqa_ratio",):
            case["opts"]["three_d"] = False
        _tag(case, tag)


def _gen_scaled_mm(r, case, tier):
    S = _sizes(tier)
    M, N, K = r.choice(S["mn"]), r.choice(S["mn"]), r.choice(S["k"])
    fp8 = r.choice(["float8_e4m3fn", "float8_e5m2"])
    out_choices = ["float16", "float32"] + (["bfloat16"] if tier == "gpu" else ["bfloat16"])
    out_dtype = r.choice(out_choices)
    rowwise = r.random() < 0.5
    sa_shape = r.choice([[M], [M, 1]]) if rowwise else r.choice([[], [1], [1, 1]])
    sb_shape = r.choice([[N], [1, N]]) if rowwise else r.choice([[], [1], [1, 1]])
    case.update(entry="scaled_mm", dtype=fp8, shapes={"a": [M, K], "w": [N, K], "scale_a": sa_shape,
                                                       "scale_b": sb_shape},
                opts={"out_dtype": out_dtype, "use_fast_accum": r.random() < 0.3,
                      "scale_values": _pick(r, ["pos", "zero", "neg"], [8, 1, 1])})
    # b is passed as w.t() (K-major, as torch._scaled_mm requires); w's own recipe never transposes it
    case["layouts"] = {"a": r.choice(["contig", "contig", "step0", f"offset{r.randint(1, 9)}", "step"]),
                       "w": r.choice(["contig", "contig", "step0", f"offset{r.randint(1, 9)}"]),
                       "scale_a": _layout(r, len(sa_shape), "scale") if sa_shape else "contig",
                       "scale_b": _layout(r, len(sb_shape), "scale") if sb_shape else "contig"}
    case["nograd"] = list(case["layouts"])
    if r.random() < 0.5:
        case["shapes"]["bias"] = [N]
        case["layouts"]["bias"] = _layout(r, 1, "bias")
        case["opts"]["bias_dtype"] = r.choice([out_dtype, "float32"])
    if r.random() < 0.15:  # NaN / Inf in the scales or the bias (fp8 e4m3fn has NaN; e5m2 also Inf)
        n = r.choice([k for k in ("scale_a", "scale_b", "bias") if k in case["shapes"]])
        case["inject"][n] = [r.choice(["nan", "inf", "-inf"]), r.random()]
    if r.random() < 0.15:
        tag = r.choice(["b_row_major" if K > 1 and N > 1 else "scale_dtype", "scale_float", "scale_dtype", "scale_shape", "scale_mix", "fp8_a_fp16",
                        "fp8_bias_dtype", "fp8_out_dtype", "k_mismatch", "bias_shape", "bias_list", "backend_name"])
        if tag == "scale_mix":
            if M == 1 or N == 1:
                tag = "scale_shape"
            else:
                case["shapes"]["scale_a"], case["shapes"]["scale_b"] = [M], [1]
                case["layouts"]["scale_a"] = case["layouts"]["scale_b"] = "contig"
        if tag == "scale_shape":
            case["shapes"]["scale_a"], case["layouts"]["scale_a"] = [M + 2], "contig"
        elif tag == "k_mismatch":
            case["shapes"]["w"] = [N, K + 1]
        elif tag in ("bias_shape", "bias_list", "fp8_bias_dtype"):
            case["shapes"]["bias"], case["layouts"]["bias"] = [N + (tag == "bias_shape")], "contig"
            case["opts"]["bias_dtype"] = "float64" if tag == "fp8_bias_dtype" else out_dtype
        elif tag == "fp8_out_dtype":
            case["opts"]["out_dtype"] = "float8_e4m3fn"
        elif tag == "backend_name":
            case["backend"] = "cublas"
        case["inject"] = {}
        _tag(case, tag)


# ------------------------------------------------------------------------------------------------- tensors
def make_tensor(shape, recipe: str, dtype: torch.dtype, gen: torch.Generator, device, scale=1.0, fill=None,
                inject=None, poison=True, transform=None):
    """A tensor of logical ``shape`` laid out by ``recipe`` (values from ``gen``, built on the CPU, moved to device):

    contig; t (last two dims swapped in memory, ``.mT`` of a contiguous buffer); step (every other element of the
    last dim); step0 (every other row of dim 0); offsetN (a view N elements into a bigger buffer: a storage offset,
    also an odd, misaligned base); expand0 / expand1 (stride 0 along dim 0 / dim 1, e.g. ``randn(1).expand(N)`` or a
    (1, N) row expanded to (M, N)); bshd (a (B, S, H, D) buffer seen as (B, H, S, D) via ``transpose(1, 2)``).
    Elements of a buffer that the view does not show are NaN (``poison``): a kernel that reads outside the view
    (a wrong stride or offset) turns them into NaN outputs that the mask comparison catches.
    """
    shape = tuple(shape)
    rank = len(shape)
    if recipe == "t" and rank < 2 or recipe in ("bshd", "expand1") and rank != 4 \
            or recipe in ("step", "step0", "expand0") and rank == 0:
        recipe = "contig"
    if recipe == "t":
        bshape = shape[:-2] + (shape[-1], shape[-2])
    elif recipe == "step":
        bshape = shape[:-1] + (2 * shape[-1],)
    elif recipe == "step0":
        bshape = (2 * shape[0],) + shape[1:]
    elif recipe.startswith("offset"):
        bshape = (int(recipe[6:]) + math.prod(shape),)
    elif recipe == "expand0":
        bshape = (1,) + shape[1:]
    elif recipe == "expand1":
        bshape = shape[:1] + (1,) + shape[2:]
    elif recipe == "bshd":
        bshape = (shape[0], shape[2], shape[1], shape[3])
    else:
        bshape = shape
    vals = torch.randn(bshape, generator=gen, dtype=torch.float64) * scale if fill is None else \
        torch.full(bshape, float(fill), dtype=torch.float64)
    if transform is not None:  # on the values, before the layout, so the strides stay the recipe's
        vals = transform(vals)
    if dtype.is_floating_point and poison and recipe in ("step", "step0") and vals.numel():
        if recipe == "step":
            vals[..., 1::2] = float("nan")
        else:
            vals[1::2] = float("nan")
    if recipe.startswith("offset") and poison and dtype.is_floating_point:
        vals[:int(recipe[6:])] = float("nan")
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        buf = vals.to(torch.float32).to(dtype)
    else:
        buf = vals.to(dtype)
    buf = buf.to(device)

    def view(t):
        if recipe == "t":
            return t.transpose(-1, -2)
        if recipe == "step":
            return t[..., ::2]
        if recipe == "step0":
            return t[::2]
        if recipe.startswith("offset"):
            return t[int(recipe[6:]):].view(shape)
        if recipe in ("expand0", "expand1"):
            return t.expand(shape)
        if recipe == "bshd":
            return t.transpose(1, 2)
        return t

    if inject is not None and math.prod(shape) > 0:
        kind, frac = inject
        value = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}[kind]
        target = buf if recipe in ("expand0", "expand1") else view(buf)
        idx = []
        rem = frac
        for size in target.shape:  # one position, spread over the dims by the fraction's digits
            rem = rem * size
            idx.append(min(int(rem), size - 1))
            rem -= int(rem)
        if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            target[tuple(idx)] = torch.tensor(value).to(dtype)
        else:
            target[tuple(idx)] = value
    return view(buf)


def _dt(name):
    return None if name is None else DTYPES[name]


def build(case: dict, device="cpu") -> dict:
    """The case's input tensors (leaves; ``requires_grad`` set per ``case['grad']``), in a fixed order."""
    gen = torch.Generator().manual_seed(case["seed"])
    dtype = DTYPES[case["dtype"]]
    fam, opts = case["family"], case["opts"]
    T = {}
    for name in sorted(case["shapes"]):
        shape = case["shapes"][name]
        rec = case["layouts"].get(name, "contig")
        dt, scale, fill = dtype, 1.0, None
        if fam == "scaled_mm" and name.startswith("scale"):
            dt = torch.float32
            scale = 0.25
            if opts.get("scale_values") == "zero":
                fill = 0.0
        elif fam == "scaled_mm" and name == "bias":
            dt = DTYPES[opts["bias_dtype"]]
        elif fam == "scaled_mm":
            scale = 2.0
        if fam == "rms_norm_linear" and name == "norm_weight":
            scale = 0.5
        if fam == "rms_norm_linear" and opts.get("big"):
            scale = {"x": 2e4, "norm_weight": 4.0}.get(name, scale)
        if fam == "attention" and opts.get("sharp") and name in ("q", "k"):
            scale = 4.0
        if name in ("weight", "b") and fam in ("gemm", "rms_norm_linear"):
            k = case["shapes"]["x" if "x" in case["shapes"] else "a"][-1]
            scale = 1.0 / math.sqrt(max(k, 1))  # keep outputs O(1) so fp16 stays far from overflow
        inv = case.get("invalid") or case.get("unsupported")
        if inv == "dtype_mix" and name in ("b", "weight", "v", "value", "norm_weight", "k"):
            dt = torch.float32 if dtype != torch.float32 else torch.float16
            if name == "k" and fam != "attention" or name == "norm_weight" and fam != "rms_norm_linear":
                dt = dtype
        if inv == "int_dtype" and name in ("a", "x", "q"):
            dt = torch.int32
        if inv == "float64" and name in ("a", "x", "q", "b", "weight", "k", "v", "norm_weight"):
            dt = torch.float64
        if inv == "norm_bias_dtype" and name == "bias":
            dt = torch.float32 if dtype != torch.float32 else torch.float16
        if inv == "fp8_a_fp16" and name == "a":
            dt = torch.float16
        if inv == "scale_dtype" and name == "scale_a":
            dt = torch.float16
        transform = None
        if fam == "scaled_mm" and name.startswith("scale") and fill is None:
            transform = (lambda v: -v.abs() - 0.05) if opts.get("scale_values") == "neg" else \
                (lambda v: v.abs() + 0.05)
        if fam == "rms_norm_linear" and name == "norm_weight":
            transform = lambda v: v + (1.0 if not opts.get("big") else 0.0)  # around the RMSNorm init (ones)
        if dt == torch.int32:
            t = make_tensor(shape, "contig", torch.float64, gen, device, scale=3).round().to(torch.int32)
        else:
            t = make_tensor(shape, rec, dt, gen, device, scale=scale, fill=fill, inject=case["inject"].get(name),
                            transform=transform)
        rg = name in case["grad"] and t.dtype.is_floating_point
        T[name] = t.detach().requires_grad_(rg)
    if fam == "scaled_mm":
        T["b"] = T.pop("w").t()
        if case.get("invalid") == "b_row_major":
            T["b"] = T["b"].contiguous()
    return T


# ------------------------------------------------------------------------------------------------- calls
def _act(y, activation):
    if activation is None:
        return y
    if activation == "relu":
        return torch.relu(y)
    if activation == "gelu":
        return F.gelu(y)
    if activation == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if activation == "silu":
        return F.silu(y)
    raise ValueError(f"activation {activation!r}")


def _arg(case, T, name):
    """The value passed for argument ``name``: the tensor, or the Python object an invalid case puts there."""
    inv = case.get("invalid") or case.get("unsupported")
    if inv == "bias_list" and name == "bias":
        return T["bias"].detach().cpu().tolist() if "bias" in T else [0.5]
    if inv == "scalar_bias" and name == "bias":
        return 0.5
    if inv == "residual_list" and name == "residual":
        return T["residual"].detach().cpu().tolist() if "residual" in T else [[0.25]]
    if inv == "scalar_residual" and name == "residual":
        return 0.25
    if inv == "scale_float" and name == "scale_a":
        return 0.5
    if inv == "q_list" and name in ("q",):
        return T["q"].detach().cpu().tolist()
    return T.get(name)


def _eps(case, dtype):
    eps = case["opts"]["eps"]
    if eps == "finfo":
        return torch.finfo(dtype).eps if dtype.is_floating_point else 1e-6  # an int x is the case's error
    if eps == "nan":
        return float("nan")
    return eps


def _band(Sq, Skv, causal, diag, window, device):
    """(Sq, Skv) bool: query i, at key position p = i + diag, sees key j iff j <= p (causal) and p - left <= j <=
    p + right (``window`` [left, right], None sides unbounded)."""
    p = torch.arange(Sq, device=device)[:, None] + diag
    j = torch.arange(Skv, device=device)[None, :]
    visible = torch.ones(Sq, Skv, dtype=torch.bool, device=device)
    if causal:
        visible &= j <= p
    if window and window[1] is not None:
        visible &= j <= p + window[1]
    if window and window[0] is not None:
        visible &= j >= p - window[0]
    return visible


def _attention_math(q, k, v, causal, scale, empty_rows_zero=False, visible_only=False, diag=0, softcap=None,
                    window=None):
    """softmax(scale * q k^T with keys j > i at -inf when causal) v, GQA by repeating kv heads; a row without a
    visible key (Skv == 0) is 0, as in SDPA. ``empty_rows_zero``: a row whose scores are all -inf (an infinite
    input) is 0 too - the documented contract (``ops/attention.py``), as SDPA's fused kernels give, where the
    formula's softmax gives NaN. ``visible_only``: row i sums over its visible keys only, so a NaN / Inf in a v row it
    cannot see does not reach it (the formula's 0 * NaN does): what a kernel that skips masked blocks gives - the
    documented "implementation-defined" case of non-finite values in causally invisible keys. ``diag``: the causal
    diagonal (0: top-left, Skv - Sq: bottom-right), row i sees keys j <= i + diag. ``softcap``: scores become
    ``softcap * tanh(score / softcap)`` before the mask (Gemma 2's logit soft-capping; SDPA has no such option).
    ``window``: [left, right] sliding window around key position i + diag (None: unbounded side); then ``diag`` is
    the alignment shift whether or not the mask is causal, and rows that see no key are 0 (the contract)."""
    group = q.shape[-3] // k.shape[-3]
    if group != 1:
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    sc = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = (q @ k.transpose(-2, -1)) * sc
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    blind = visible = None
    if causal or window:
        visible = _band(s.shape[-2], s.shape[-1], causal, diag, window, s.device)
        s = s.masked_fill(~visible, float("-inf"))
        if diag < 0 or window:  # rows that see no key: output 0, gradient 0 (the contract)
            blind = ~visible.any(-1, keepdim=True)
            s = s.masked_fill(blind, 0.0)
    if s.shape[-1] == 0:
        return q.new_zeros((*q.shape[:-1], v.shape[-1]))
    p = torch.softmax(s, dim=-1)
    if blind is not None:
        p = p.masked_fill(blind, 0.0)
    if visible is not None and visible_only:
        out = torch.cat([p[..., i:i + 1, visible[i]] @ v[..., visible[i], :] for i in range(s.shape[-2])], dim=-2)
    else:
        out = p @ v
    if empty_rows_zero:
        out = out.masked_fill(torch.isneginf(s).all(-1, keepdim=True), 0.0)
    return out


def torch_call(case: dict, T: dict, compute: torch.dtype | None, math_same: bool = False):
    """torch's answer: in ``compute`` (float64) for the reference, or with ``compute=None`` on the inputs' own dtypes
    (torch's error baseline). Returns a tuple of outputs (output[, lse])."""
    fam, opts = case["family"], case["opts"]

    def c(x):
        return x.to(compute) if compute is not None and isinstance(x, torch.Tensor) else x

    if fam == "gemm":
        xn, wn = ("a", "b") if case["entry"] == "matmul" else ("x", "weight")
        x, w, bias, res = c(_arg(case, T, xn)), c(_arg(case, T, wn)), c(_arg(case, T, "bias")), \
            c(_arg(case, T, "residual"))
        if case["entry"] == "matmul":
            y = x @ w
            if bias is not None:
                y = y + bias
        else:
            y = F.linear(x, w, bias)
        y = _act(y, opts["activation"])
        if res is not None:
            y = y + res
        out_dtype = _dt(opts.get("out_dtype")) or T[xn].dtype
        return (y if compute is not None else y.to(out_dtype),)
    if fam == "rms_norm_linear":
        x, g, w, bias = (c(_arg(case, T, n)) for n in ("x", "norm_weight", "weight", "bias"))
        eps = _eps(case, T["x"].dtype)
        return (F.linear(F.rms_norm(x, (x.shape[-1],), g, eps), w, bias),)
    if fam == "attention":
        q, k, v = c(_arg(case, T, "q")), c(T["k"]), c(T["v"])
        scale = opts["scale"]
        if opts.get("three_d"):
            q, k, v = q[0], k[0], v[0]
        kw = {}
        if opts.get("attn_mask"):
            kw["attn_mask"] = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device)
        gqa = opts.get("enable_gqa", True)
        causal, diag = opts["causal"], 0
        window = opts.get("window")
        if window and opts.get("causal_align") == "bottom_right":
            diag = k.shape[-2] - q.shape[-2]  # the window's alignment (set again below when causal)
        if causal and opts.get("causal_align") == "bottom_right":
            # torch's spelling of the bottom-right causal mask (flash-attn's convention) is a boolean mask
            diag = k.shape[-2] - q.shape[-2]
            kw["attn_mask"] = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril(diag)
            causal = False
        sdpa_kw = dict(is_causal=causal, scale=scale, enable_gqa=gqa, dropout_p=opts.get("dropout_p", 0.0),
                       **kw)
        try:
            out = F.scaled_dot_product_attention(q, k, v, **sdpa_kw)
        except RuntimeError:
            if not math_same:  # (see _run: a same-dtype fused SDPA that rejects a layout)
                raise
            # fresh dense strides: .contiguous() keeps the odd stride of a size-1 dim that the kernel rejects
            q, k, v = (t.clone(memory_format=torch.contiguous_format) for t in (q, k, v))
            out = F.scaled_dot_product_attention(q, k, v, **sdpa_kw)
        softcap = opts.get("softcap")
        if compute is not None or math_same or softcap or window:
            # (with a soft cap, SDPA above only decides whether torch accepts the input: it has no cap, so both
            # the reference and torch's same-dtype baseline come from the formula)
            # values from the explicit formula: torch's CPU SDPA returns NaN for causal with scale <= 0 (torch
            # 2.13), so the float64 reference is softmax(scale q k^T, causal -inf) v written out; F.sdpa above
            # still decides whether torch accepts the input at all
            sdpa_out = out.detach()
            out = _attention_math(q, k, v, opts["causal"], scale, diag=diag, softcap=softcap, window=window)
            # torch's fused SDPA gives 0 (not the formula's NaN) for a row whose scores are all -inf because an
            # input holds -inf / inf, and so does tilewright's contract: both patterns are accepted too (which
            # SDPA backend torch's CPU picks - fused or math - decides what `sdpa_out` shows)
            alt = _attention_math(q, k, v, opts["causal"], scale, empty_rows_zero=True, diag=diag, softcap=softcap,
                                  window=window)
            out.alt_pattern = [alt] if softcap or window else [sdpa_out, alt]
            if (opts["causal"] or window) and "v" in case["inject"] and q.shape[-2]:
                # a NaN / Inf in a v row some query cannot see: whether it reaches that query is implementation-
                # defined (a kernel multiplies the masked diagonal block's p = 0 into v; the formula does so for
                # every key), so where "every key" and "visible keys only" differ, either answer is accepted
                visible = _attention_math(q, k, v, opts["causal"], scale, empty_rows_zero=True, visible_only=True,
                                          diag=diag, softcap=softcap, window=window)
                out.dont_care = torch.isfinite(out) != torch.isfinite(visible)
        if not opts.get("return_lse"):
            return (out,)
        group = q.shape[1] // k.shape[1]
        s = (q @ k.repeat_interleave(group, dim=1).transpose(-2, -1)) * (1 / math.sqrt(q.shape[-1])
                                                                          if scale is None else float(scale))
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        if opts["causal"] or window:
            s = s.masked_fill(~_band(s.shape[-2], s.shape[-1], opts["causal"], diag, window, s.device), float("-inf"))
        lse = torch.logsumexp(s.float() if compute is None else s, dim=-1)
        return out, lse
    if fam == "scaled_mm":
        a, b, sa, sb = T["a"], T["b"], _arg(case, T, "scale_a"), T["scale_b"]
        bias = _arg(case, T, "bias")
        if case.get("invalid") in ("fp8_a_fp16", "k_mismatch", "bias_list", "scale_float", "fp8_out_dtype",
                                   "scale_shape", "scale_mix", "b_row_major", "scale_dtype", "fp8_bias_dtype"):
            raise ValueError("torch._scaled_mm rejects this input (contract)")
        cd = compute or torch.float32
        sa_ = sa.to(cd).reshape(-1, 1) if sa.numel() != 1 else sa.to(cd).reshape(())
        sb_ = sb.to(cd).reshape(1, -1) if sb.numel() != 1 else sb.to(cd).reshape(())
        y = (a.to(cd) @ b.to(cd)) * sa_ * sb_
        if a.shape[1] == 0:
            # torch._scaled_mm's K = 0: zeros (then the bias) whatever the scales - an empty sum is not dequantized
            y = torch.zeros_like(y)
        if bias is not None:
            y = y + bias.to(cd)
        out_dtype = DTYPES[opts["out_dtype"]]
        return (y if compute is not None else y.to(out_dtype),)
    raise AssertionError(fam)


def tw_call(case: dict, T: dict, backend):
    """tilewright's answer through the case's entry point (tuple of outputs)."""
    import tilewright

    fam, opts, entry = case["family"], case["opts"], case["entry"]
    if fam == "gemm":
        xn, wn = ("a", "b") if entry == "matmul" else ("x", "weight")
        x, w, bias, res = (_arg(case, T, n) for n in (xn, wn, "bias", "residual"))
        if entry == "matmul":
            return (tilewright.matmul(x, w, bias=bias, residual=res, activation=opts["activation"],
                                      out_dtype=_dt(opts.get("out_dtype")), backend=backend),)
        if entry == "linear":
            return (tilewright.linear(x, w, bias, residual=res, activation=opts["activation"], backend=backend),)
        mod = tilewright.nn.Linear(w.shape[1], w.shape[0], bias=bias is not None, activation=opts["activation"],
                                   dtype=w.dtype, device=w.device, backend=backend)
        mod.weight = T["_param_weight"]
        mod.bias = T.get("_param_bias") if bias is not None else None
        return (mod(x, residual=res),)
    if fam == "rms_norm_linear":
        x, g, w, bias = (_arg(case, T, n) for n in ("x", "norm_weight", "weight", "bias"))
        eps = _eps(case, T["x"].dtype)
        if entry == "rms_norm_linear":
            return (tilewright.rms_norm_linear(x, g, w, bias, eps=eps, backend=backend),)
        mod = tilewright.nn.RMSNormLinear(w.shape[1], w.shape[0], bias=bias is not None, eps=eps, dtype=w.dtype,
                                          device=w.device, backend=backend)
        mod.norm_weight, mod.weight = T["_param_norm_weight"], T["_param_weight"]
        mod.bias = T.get("_param_bias") if bias is not None else None
        return (mod(x),)
    if fam == "attention":
        q, k, v = _arg(case, T, "q"), T["k"], T["v"]
        if entry == "flash_attention":
            if opts.get("three_d"):
                q, k, v = q[0], k[0], v[0]
            r = tilewright.flash_attention(q, k, v, causal=opts["causal"], scale=opts["scale"],
                                           return_lse=opts.get("return_lse", False), backend=backend,
                                           causal_align=opts.get("causal_align", "top_left"),
                                           softcap=opts.get("softcap"), window=opts.get("window"))
            return tuple(r) if opts.get("return_lse") else (r,)
        if opts.get("three_d"):
            q, k, v = q[0], k[0], v[0]
        kw = {}
        if opts.get("attn_mask"):
            kw["attn_mask"] = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device)
        # SDPA has no backend argument: the forced backend comes from use_backend (also around the backward)
        with tilewright.use_backend(backend):
            return (tilewright.scaled_dot_product_attention(q, k, v, is_causal=opts["causal"], scale=opts["scale"],
                                                            enable_gqa=opts.get("enable_gqa", False),
                                                            dropout_p=opts.get("dropout_p", 0.0), **kw),)
    if fam == "scaled_mm":
        return (tilewright.scaled_mm(T["a"], T["b"], _arg(case, T, "scale_a"), T["scale_b"],
                                     bias=_arg(case, T, "bias"), out_dtype=DTYPES[opts["out_dtype"]],
                                     use_fast_accum=opts["use_fast_accum"], backend=backend),)
    raise AssertionError(fam)


# ------------------------------------------------------------------------------------------------- verdict
def _names_arg(msg: str, names) -> bool:
    """Whether the message blames one of ``names``: ``name:`` / ``name=`` / ``'name'`` / ``name/`` or, for names
    longer than one letter, the name as a word."""
    for n in names:
        e = re.escape(n)
        if re.search(rf"(?<![\w.]){e}(?=[:=/]|'|\"|\s*\()|'{e}'|/{e}\b", msg):
            return True
        if len(n) > 1 and re.search(rf"(?<![\w.]){e}(?![\w(])", msg):
            return True
    return False


def _coarse_eps(*dtypes):
    return max(torch.finfo(d).eps for d in dtypes if d is not None and d.is_floating_point and d.itemsize >= 2)


def compare(what: str, ours, same, ref64, eps: float, extra_mag: float = 0.0, mag_factor: float = 8.0,
            extra_atol: float = 0.0, any_nonfinite: bool = False):
    """Apply the numerics rule (module docstring) to one tensor; raise FuzzFailure with the numbers.

    ``any_nonfinite`` (rule 2b): only *where* the result is non-finite must match, not whether it is NaN, +Inf or -Inf."""
    if not isinstance(ours, torch.Tensor):
        raise FuzzFailure(f"{what}: got {type(ours).__name__}, expected a tensor")
    if tuple(ours.shape) != tuple(same.shape):
        raise FuzzFailure(f"{what}: shape {tuple(ours.shape)} != torch's {tuple(same.shape)}")
    if ours.dtype != same.dtype:
        raise FuzzFailure(f"{what}: dtype {ours.dtype} != torch's {same.dtype}")
    o = ours.detach().to("cpu", torch.float64)
    s = same.detach().to("cpu", torch.float64)
    r = ref64.detach().to("cpu", torch.float64)
    rc = ref64.detach().to(ours.dtype).to("cpu", torch.float64)  # the reference rounded (overflow -> Inf)

    def pattern(t):
        return torch.isnan(t), torch.isposinf(t), torch.isneginf(t)

    if any_nonfinite:
        def pattern(t):  # rule 2b: one class for NaN, +Inf and -Inf
            nf = ~torch.isfinite(t)
            return nf, nf, nf

    dont_care = getattr(ref64, "dont_care", None)
    if dont_care is not None:  # positions whose non-finite pattern is implementation-defined: not compared
        pattern_all = pattern
        keep = ~dont_care.detach().cpu()

        def pattern(t):
            return tuple(m & keep for m in pattern_all(t))

    po = pattern(o)
    alts = [rc, s]
    for alt in getattr(ref64, "alt_pattern", None) or []:
        alts.append(alt.detach().to(ours.dtype).to("cpu", torch.float64))
    if not any(all(torch.equal(x, y) for x, y in zip(po, pattern(a))) for a in alts):
        bad = [(n, int((x != y).sum())) for n, x, y in zip(("nan", "+inf", "-inf"), po, pattern(rc))]
        where = (po[0] != pattern(rc)[0]) | (po[1] != pattern(rc)[1]) | (po[2] != pattern(rc)[2])
        first = tuple(int(i) for i in where.nonzero()[0]) if where.any() else None
        raise FuzzFailure(f"{what}: non-finite pattern differs from torch's (mismatched entries {bad}, first at "
                          f"{first}: ours {o[first].item() if first else None}, ref {r[first].item() if first else None})")
    fin = torch.isfinite(o) & torch.isfinite(r)
    if not fin.any():
        return
    diff = (o - r).abs()
    slack = getattr(ref64, "kink_slack", None)
    if slack is not None:  # where a relu's kink decision is within the forward's rounding (see _relu_kink_slack)
        diff = (diff - slack.to("cpu", torch.float64)).clamp_min(0)
    err = diff[fin].max().item()
    fs = fin & torch.isfinite(s)
    base = (s - r).abs()[fs].max().item() if fs.any() else 0.0
    mag = max(r.abs()[torch.isfinite(r)].max().item(), extra_mag)
    tol = 2 * base + mag_factor * eps * mag + extra_atol + 1e-30
    if not err <= tol:
        flat = int(torch.where(fin, diff, torch.zeros_like(o)).flatten().argmax())
        raise FuzzFailure(f"{what}: max|ours - ref64| = {err:.4g} > tol {tol:.4g} (torch same-dtype error "
                          f"{base:.4g}, magnitude {mag:.4g}); worst flat index {flat}: ours "
                          f"{o.flatten()[flat].item():.6g}, ref {r.flatten()[flat].item():.6g}")


def _same_pattern(a, b) -> bool:
    a, b = a.detach().cpu(), b.detach().cpu().to(a.dtype)
    return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(torch.isinf(a), torch.isinf(b))


def repro(case: dict) -> str:
    return ("repro: PYTHONPATH=src:tests/fuzz TRITON_INTERPRET=1 python tests/fuzz/fuzz_cases.py "
            f"'{json.dumps(case, sort_keys=True)}'")


def _declined(exc, backend) -> bool:
    """A forced backend that cannot run these inputs says so (router / op ValueError naming the backend)."""
    msg = str(exc)
    return backend not in (None, "torch") and isinstance(exc, ValueError) and "forced" in msg and "backend" in msg


def _params_for_modules(case, T):
    """nn entry points: the weights become Parameters (same storage and strides) and the grads land on them."""
    if case["entry"] in ("nn.Linear", "nn.RMSNormLinear"):
        for n in ("weight", "norm_weight", "bias"):
            if isinstance(T.get(n), torch.Tensor):
                p = torch.nn.Parameter(T[n].detach(), requires_grad=T[n].requires_grad)
                T["_param_" + n] = p
                T[n] = p


def _leaves(case, T):
    return [(n, T[n]) for n in sorted(case["shapes"]) if n in T and isinstance(T[n], torch.Tensor)
            and T[n].requires_grad]


class _OutOfMemory(Exception):
    """A CUDA out-of-memory in torch's reference or in our call: the GPU was full, which says nothing about either
    answer (the GPU tier runs a dozen processes on one card)."""


def _is_oom(exc) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc)


def run_case(case: dict, device="cpu", backend="__case__") -> str:
    """Run one case; returns "pass", "declined", "raised_ok" or "oom", raises FuzzFailure otherwise.

    "oom": the case ran out of GPU memory twice (torch's float64 reference or our call), the second time after
    freeing this process's cached blocks; such a case is reported under its own outcome, never as a pass."""
    backend = case.get("backend") if backend == "__case__" else backend
    for attempt in (0, 1):
        try:
            return _run(case, device, backend)
        except FuzzFailure as e:
            raise FuzzFailure(f"[{case['family']}/{case['entry']} seed={case['seed']} backend={backend}] {e}\n"
                              f"{repro(dict(case, backend=backend))}") from None
        except Exception as e:  # noqa: BLE001 - an OOM anywhere else (torch's same-dtype call, the gradients)
            if not (isinstance(e, _OutOfMemory) or (device != "cpu" and _is_oom(e))):
                raise
            if attempt or device == "cpu":
                return "oom"
            import gc

            gc.collect()
            torch.cuda.empty_cache()
    return "oom"


def _run(case, device, backend):
    tag = case.get("invalid") or case.get("unsupported")
    T = build(case, device)
    _params_for_modules(case, T)
    # torch's float64 answer on independent leaves (so the gradients are torch's)
    T64 = {n: (t.detach().to(torch.float64).requires_grad_(t.requires_grad)
               if isinstance(t, torch.Tensor) and t.dtype.is_floating_point and t.dtype.itemsize >= 2 else t)
           for n, t in T.items()}
    Ts = _fresh_copies(T)
    try:
        ref = torch_call(case, T64, torch.float64)
        torch_exc = None
    except Exception as e:  # noqa: BLE001 - any torch rejection counts
        if device != "cpu" and _is_oom(e):
            raise _OutOfMemory() from None
        ref, torch_exc = None, e
    first = None
    try:
        ours = tw_call(case, T, backend)
        if device != "cpu" or os.environ.get("FUZZ_CALL_TWICE"):
            # the same call again: on the GPU the second call of a signature runs the op's eager replay
            # (ops/_fast.py) where the first recorded one; it must give the first call's answer bit for bit.
            # FUZZ_CALL_TWICE=1 does the same on the CPU (no replay there), to repeat a GPU run's exact call sequence.
            first, ours = ours, tw_call(case, T, backend)
    except Exception as e:  # noqa: BLE001 - classified below
        if device != "cpu" and _is_oom(e):
            raise _OutOfMemory() from None
        if _declined(e, backend):
            return "declined"
        allowed = ALLOWED_ERRORS + ((RuntimeError,) if torch_exc is not None else ())
        kind = type(e).__name__
        if not isinstance(e, allowed) or type(e).__module__ not in ("builtins",):
            raise FuzzFailure(f"tilewright raised {kind}: {e} (torch: "
                              f"{'raised ' + type(torch_exc).__name__ if torch_exc else 'accepted'})") from None
        if tag in UNSUPPORTED:
            names = UNSUPPORTED[tag][0]
        elif tag in INVALID:
            names = INVALID[tag]
        else:
            names = None
        if names is None and "is not broadcastable to the output shape" in str(e):
            names = ("residual",)  # documented: the residual broadcasts to the output, it cannot enlarge it
        if names is None:
            if torch_exc is None:
                raise FuzzFailure(f"tilewright raised {kind}: {e} for an input torch accepts (not a documented "
                                  "unsupported input)") from None
            return "raised_ok"  # torch rejects it too, and no argument was made invalid on purpose
        if not _names_arg(str(e), names):
            raise FuzzFailure(f"tilewright raised {kind} without naming the argument (one of {list(names)}): "
                              f"{e}") from None
        return "raised_ok"
    for i, (o1, o2) in enumerate(zip(first or (), ours)):
        if not (o1.shape == o2.shape and o1.dtype == o2.dtype and o1.stride() == o2.stride()
                and torch.equal(o1.detach().nan_to_num(1.5, 2.5, -2.5), o2.detach().nan_to_num(1.5, 2.5, -2.5))
                and torch.equal(o1.detach().isnan(), o2.detach().isnan())):
            raise FuzzFailure(f"output {i}: the second call (eager replay) differs from the first (full path)")
    if tag in INVALID:
        raise FuzzFailure(f"tilewright accepted a deliberately invalid input ({tag}) instead of an error naming "
                          f"{list(INVALID[tag])}")
    if torch_exc is not None:
        raise FuzzFailure(f"tilewright accepted an input torch rejects ({type(torch_exc).__name__}: {torch_exc})")
    fam = case["family"]
    try:
        same = torch_call(case, Ts, None)
    except RuntimeError:
        # torch's float64 path took the input but its same-dtype fused kernel did not: its CUDA memory-efficient
        # SDPA raises "key is not correctly aligned (strideM)" for a one-key K/V whose row stride is not a multiple
        # of 8 (torch 2.11); the formula in the inputs' dtype is then the error baseline
        if fam != "attention":
            raise
        Ts = _fresh_copies(T)
        same = torch_call(case, Ts, None, math_same=True)
    if fam == "attention" and not _same_pattern(same[0], ref[0]):
        # torch's fused CPU SDPA disagrees with the formula (causal with scale <= 0 gives NaN): the baseline is
        # then the formula in the inputs' dtype
        Ts = _fresh_copies(T)
        same = torch_call(case, Ts, None, math_same=True)
    in_dtype = T["a"].dtype if fam == "scaled_mm" else DTYPES[case["dtype"]]
    extra = 0.0
    mag_factor = 8.0
    eps_scores = fast_atol = 0.0
    if fam == "attention":
        extra = T["v"].detach().abs().nan_to_num(0, 0, 0).max().item() if T["v"].numel() else 0.0
        eps_scores = _score_eps(case, T64)
    if fam == "scaled_mm" and (case["opts"]["use_fast_accum"] or T["a"].is_cuda):
        a_abs = T["a"].to(torch.float64).abs()
        b_abs = T["b"].to(torch.float64).abs()
        smax = [float(t.abs().nan_to_num(0, 0, 0).max()) if t.numel() else 0.0 for t in (T["scale_a"], T["scale_b"])]
        mag_abs = (a_abs @ b_abs).nan_to_num(0, 0, 0) * smax[0] * smax[1]
        # fast accumulation keeps the tensor cores' FP8 accumulator across K (2^-9); in accurate mode each K slice
        # is promoted to fp32, but inside one K = 32 FP8 MMA Hopper still keeps only ~14 mantissa bits of the sum
        # (cuBLASLt's accurate mode, the peer, has the same term): 2^-12 of the row's sum of |products|
        bits = 9 if case["opts"]["use_fast_accum"] else 12
        fast_atol = 2.0 ** -bits * (float(mag_abs.max()) if mag_abs.numel() else 0.0)
    for i, (o, s, r) in enumerate(zip(ours, same, ref)):
        eps = _coarse_eps(in_dtype if in_dtype.itemsize >= 2 else None, o.dtype if i == 0 else torch.float32)
        if fam == "scaled_mm":
            eps = _coarse_eps(o.dtype)
        compare("output" if i == 0 else "lse", o, s, r, eps + eps_scores, extra if i == 0 else 0.0, mag_factor,
                fast_atol, any_nonfinite=i == 0 and _nonfinite_class_only(case))
    leaves = _leaves(case, T)
    if not leaves:
        return "pass"
    grad_mag = 0.0
    if fam == "attention" and all(T64[n].numel() for n in ("q", "k", "v")):
        # a gradient can be exactly 0 (one visible key: dS = 0) while the kernel's terms are not: rounding noise is
        # relative to |scale| * |q|,|k| * |dO| * |v|, the size of one dS * q term
        sc = case["opts"]["scale"]
        sc = 1 / math.sqrt(T64["q"].shape[-1]) if sc is None else abs(float(sc))
        amax = [float(T64[n].detach().abs().max()) for n in ("q", "k", "v")]
        grad_mag = sc * max(amax[0], amax[1]) * amax[2] * 4.0  # |dO| ~ N(0, 1): 4 bounds it here
    _check_grads(case, T, T64, Ts, ours, same, ref, leaves, in_dtype, eps_scores, grad_mag)
    return "pass"


def _fresh_copies(T: dict) -> dict:
    """Independent leaves with T's values (and requires_grad) for a torch computation whose gradients are compared."""
    return {n: (t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t)
            for n, t in T.items()}


def _nonfinite_class_only(case) -> bool:
    """Rule 2b cases, where *which* non-finite value an output entry gets is rounding noise:
    * a NaN / Inf dequantisation scale (scaled_mm): Inf times an accumulator whose sign and zeroness the last bits of
      the FP8 sums decide (cuBLASLt and the fp64 reference round differently) is +Inf, -Inf or NaN;
    * an Inf in attention's v: p * Inf is Inf, or NaN where p underflowed to exactly 0 - which happens at different
      scores in fp32 (the kernels, torch's fused SDPA) and float64 (the reference)."""
    inj = case.get("inject") or {}
    if case["family"] == "scaled_mm":
        return "scale_a" in inj or "scale_b" in inj
    if case["family"] == "attention":
        return "v" in inj or "value" in inj
    return False


def _grad_outs(case, outs):
    """Random output gradients (float64 values from the case seed, rounded to each output's dtype)."""
    gen = torch.Generator().manual_seed(case["seed"] + 7919)
    gos = []
    for o in outs:
        g = torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype).to(o.device)
        if not torch.isfinite(o).all():
            g = torch.where(torch.isfinite(o), g, torch.zeros_like(g))  # an lse of -inf (no visible key)
        gos.append(g)
    return gos


def _score_eps(case, T64) -> float:
    """Attention's extra relative error: scores are rounded in fp32 (any input dtype), so p = exp(s - lse) carries a
    relative error of about eps_fp32 * |s|; large |scale * q.k| (sharp softmax) scales it up."""
    q, k = T64["q"].detach(), T64["k"].detach()
    if q.numel() == 0 or k.numel() == 0 or q.dim() != 4 or k.dim() != 4 or q.shape[1] % max(k.shape[1], 1):
        return 0.0
    sc = case["opts"]["scale"]
    try:
        sc = 1 / math.sqrt(q.shape[-1]) if sc is None else abs(float(sc))
    except ValueError:
        return 0.0
    g = q.shape[1] // k.shape[1]
    s = (q @ k.repeat_interleave(g, dim=1).transpose(-2, -1)).abs().nan_to_num(0, 0, 0) * sc
    return torch.finfo(torch.float32).eps * float(s.max())


def _relu_kink_slack(case, T, T64, gos, names) -> dict:
    """Per-leaf elementwise slack for a relu GEMM's first-order gradients (name -> float64 tensor), empty otherwise.

    relu'(z) jumps at z = 0: where the float64 pre-activation is within the fp32 accumulation's rounding of 0, the
    kernel may put z on either side (so may torch's own fp32 GEMM), and the gradient of every input that entry
    touches moves by |grad_out * operand| - a different but equally right answer (the fuzzer found dW off by 4.2 at a
    magnitude of 152 from one such entry). Each ambiguous (m, n) adds that term's size to the tolerance of the
    entries it feeds: dB[k, n] += sum_m |A[m, k] g[m, n]|, dA[m, k] += sum_n |g[m, n] B[k, n]|, dbias[n] += sum_m
    |g[m, n]|. Unambiguous entries keep the plain rule."""
    if case["family"] != "gemm" or case["opts"].get("activation") != "relu":
        return {}
    xn, wn = ("a", "b") if case["entry"] == "matmul" else ("x", "weight")
    x, w = T64[xn].detach(), T64[wn].detach()
    B = w if case["entry"] == "matmul" else w.t()  # (K, N)
    if x.numel() == 0 or w.numel() == 0:
        return {}
    A = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # (M, K)
    bias = T64.get("bias") if "bias" in T else None
    z = A @ B + (bias.detach() if bias is not None else 0)
    bound = 16 * 2.0 ** -23 * (A.abs() @ B.abs() + (bias.detach().abs() if bias is not None else 0))
    amb = (z.abs() <= bound).to(torch.float64)
    if not amb.any():
        return {}
    g = gos[0].detach().to(torch.float64).reshape(A.shape[0], B.shape[1]).abs() * amb  # (M, N)
    slack = {xn: (g @ B.abs().t()).reshape(x.shape),
             wn: A.abs().t() @ g if case["entry"] == "matmul" else (A.abs().t() @ g).t()}
    if bias is not None:
        slack["bias"] = g.sum(0)
    return {n: slack[n] for n in names if n in slack}


def _rms_dx_atol(case, T64, gos) -> float:
    """rms_norm_linear's grad[x] floor from cancellation: ``dx = rstd * (du*g - xhat * mean(du*g*xhat))`` is, in every
    implementation (ours, torch's fused CUDA kernel), a difference of two fp32 terms of size ``rstd * |du*g|``. Where
    they nearly cancel - K = 1, or du*g parallel to x, when the true dx is ~eps * rstd^3 - its rounding is ~1 ulp of
    fp32 of that size whatever the dx; torch's own error there is luck of rounding (the GPU fuzz: ours 1.4 ulps of
    the terms, torch 0.1). 8 fp32 ulps of the largest term bound it; it is zero where the terms are small."""
    if case["family"] != "rms_norm_linear":
        return 0.0
    x, g, w = (T64[n].detach() for n in ("x", "norm_weight", "weight"))
    if x.numel() == 0 or w.numel() == 0 or not (x.dim() >= 1 and g.shape == x.shape[-1:]):
        return 0.0
    eps = _eps(case, DTYPES[case["dtype"]])
    if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        return 0.0
    K = x.shape[-1]
    x2 = x.cpu().reshape(-1, K)
    rstd = torch.rsqrt(x2.pow(2).mean(-1, keepdim=True) + eps)
    du = gos[0].detach().to("cpu", torch.float64).reshape(-1, w.shape[0]) @ w.cpu()
    dug = du * g.cpu()
    xhat = x2 * rstd
    c = (dug * xhat).mean(-1, keepdim=True)
    terms = rstd * (dug.abs() + (xhat * c).abs())
    terms = terms[torch.isfinite(terms)]
    return 8 * torch.finfo(torch.float32).eps * float(terms.max()) if terms.numel() else 0.0


def _check_grads(case, T, T64, Ts, ours, same, ref, leaves, in_dtype, eps_scores=0.0, grad_mag=0.0):
    names = [n for n, _ in leaves]
    gos = _grad_outs(case, ours)
    # the loss takes the output, and the lse where every row has a visible key (torch's lse gradient of an
    # all -inf row is NaN); only outputs that depend on a grad-requiring input (lse does not on v)
    use = [i for i, o in enumerate(ours) if i == 0 or bool(torch.isfinite(ref[i]).all())]
    if not ours[0].requires_grad:
        raise FuzzFailure(f"output does not require grad although inputs {names} do")
    create = case.get("double", False)

    def grads(outs, leaves_, dt, gos=gos):
        sel = [(outs[i], gos[i].to(dt if i == 0 else torch.float64 if dt == torch.float64 else outs[i].dtype))
               for i in use if outs[i].requires_grad]
        return torch.autograd.grad([o for o, _ in sel], leaves_, [g for _, g in sel], allow_unused=True,
                                   create_graph=create)

    try:
        g_ours = grads(ours, [t for _, t in leaves], ours[0].dtype)
    except Exception as e:  # noqa: BLE001
        raise FuzzFailure(f"backward raised {type(e).__name__}: {e}") from None
    try:
        g_same = grads(same, [Ts[n] for n in names], same[0].dtype)
    except RuntimeError:
        # torch's same-dtype fused SDPA backward rejects a layout its forward took ("value is not correctly aligned
        # (strideM)" for a one-key V with an odd row stride, torch 2.11): the formula in the inputs' dtype is the
        # error baseline instead, as in _run
        if case["family"] != "attention":
            raise
        Ts = _fresh_copies(T)
        same = torch_call(case, Ts, None, math_same=True)
        g_same = grads(same, [Ts[n] for n in names], same[0].dtype)
    g_ref = grads(ref, [T64[n] for n in names], torch.float64)
    g_cpu = [None] * len(names)
    if any(g is not None and not bool(torch.isfinite(g).all()) for g in g_ref) and ref[0].is_cuda:
        # torch's own non-finite gradient pattern depends on its device: its CUDA rms_norm backward turns a row with
        # an Inf (rstd = 0) into NaN for every weight entry, its CPU one - and the chain rule, 0 * finite = 0 - only
        # at the Inf's column. The CPU float64 answer is accepted as a second torch pattern.
        T64c = {n: (t.detach().cpu().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t)
                for n, t in T64.items()}
        ref_c = torch_call(case, T64c, torch.float64)
        g_cpu = grads(ref_c, [T64c[n] for n in names], torch.float64, gos=[g.cpu() for g in gos])
    eps = _coarse_eps(in_dtype, *(o.dtype for o in ours[:1])) + eps_scores
    kink = _relu_kink_slack(case, T, T64, gos, names)
    for n, go, gs, gr, gc in zip(names, g_ours, g_same, g_ref, g_cpu):
        gs = torch.zeros_like(Ts[n]) if gs is None else gs
        gr = torch.zeros_like(T64[n]) if gr is None else gr
        if gc is not None:
            gr.alt_pattern = [gc]
        if n in kink:
            gr.kink_slack = kink[n]
        if go is None:
            go = torch.zeros_like(T[n])
        compare(f"grad[{n}]", go, gs, gr, eps, grad_mag, extra_atol=_rms_dx_atol(case, T64, gos) if n == "x" else 0.0)
    if not create:
        return
    # second order: d/dinputs of sum_i <grad_i, w_i> with random w_i, against torch's float64 double backward
    gen = torch.Generator().manual_seed(case["seed"] + 104729)
    ws = [torch.randn(T[n].shape, generator=gen, dtype=torch.float64) for n in names]

    def second(gs, leaves_, dt):
        terms = [(g * w.to(g.device, dt)).sum() for g, w in zip(gs, ws) if g is not None and g.requires_grad]
        if not terms:
            return [None] * len(leaves_)
        return torch.autograd.grad(sum(terms), leaves_, allow_unused=True)

    try:
        h_ours = second(g_ours, [t for _, t in leaves], in_dtype)
    except Exception as e:  # noqa: BLE001
        if isinstance(e, (RuntimeError, NotImplementedError)) and DOUBLE_BACKWARD_REFUSAL.search(str(e)):
            return
        raise FuzzFailure(f"double backward raised {type(e).__name__}: {e}") from None
    h_same = second(g_same, [Ts[n] for n in names], in_dtype)
    h_ref = second(g_ref, [T64[n] for n in names], torch.float64)
    for n, ho, hs, hr in zip(names, h_ours, h_same, h_ref):
        hs = torch.zeros_like(Ts[n]) if hs is None else hs
        hr = torch.zeros_like(T64[n]) if hr is None else hr
        ho = torch.zeros_like(T[n]) if ho is None else ho
        compare(f"second-order grad[{n}]", ho, hs, hr, eps)


def _kind(msg: str) -> str:
    """A failure's class for shrinking: the message up to its first number."""
    head = msg.split("] ", 1)[-1].split("\n")[0]
    return re.split(r"[-\d]", head, maxsplit=1)[0][:60]


def shrink(case: dict, device="cpu", backend="__case__", budget: int = 60) -> dict:
    """A simpler case that still fails the same way (greedy: each layout -> contig, drop grads / double backward /
    injections / bias / residual / activation / out_dtype, backend -> router's pick), for minimal repros."""
    def fails(c):
        try:
            run_case(c, device, backend)
            return None
        except FuzzFailure as e:
            return _kind(str(e))

    kind = fails(case)
    if kind is None:
        return case
    cur = json.loads(json.dumps(case))
    tries = 0
    changed = True
    while changed and tries < budget:
        changed = False
        cands = []
        for n, rec in cur["layouts"].items():
            if rec != "contig":
                cands.append(("layouts", n, "contig"))
        if cur["grad"]:
            cands.append(("grad", None, []))
            cands += [("grad", None, [g for g in cur["grad"] if g != n]) for n in cur["grad"]]
        if cur["double"]:
            cands.append(("double", None, False))
        for n in cur["inject"]:
            cands.append(("inject", n, None))
        for n in ("bias", "residual"):
            if n in cur["shapes"] and not (cur["invalid"] or cur["unsupported"] or "").startswith(n[:4]):
                cands.append(("drop", n, None))
        for o, v in (("activation", None), ("out_dtype", None), ("sharp", None), ("big", None)):
            if cur["opts"].get(o) is not None and cur["opts"].get(o) is not False:
                cands.append(("opts", o, v))
        for c_ in cands:
            trial = json.loads(json.dumps(cur))
            what, n, v = c_
            if what == "layouts":
                trial["layouts"][n] = v
            elif what in ("grad", "double"):
                trial[what] = v
            elif what == "inject":
                del trial["inject"][n]
            elif what == "drop":
                del trial["shapes"][n], trial["layouts"][n]
                trial["grad"] = [g for g in trial["grad"] if g != n]
                trial["inject"].pop(n, None)
            else:
                trial["opts"][n] = v
            tries += 1
            if fails(trial) == kind:
                cur, changed = trial, True
                break
    return cur


if __name__ == "__main__":
    # one case: its JSON (as printed by a failure) or --family F --seed S [--tier T] [--backend B] [--device D]
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("case", nargs="?")
    p.add_argument("--family")
    p.add_argument("--seed", type=int)
    p.add_argument("--tier", default="cpu")
    p.add_argument("--backend", default="__case__")
    p.add_argument("--device", default="cpu")
    p.add_argument("--shrink", action="store_true", help="print a simpler case that fails the same way")
    args = p.parse_args()
    c = json.loads(args.case) if args.case else generate(args.family, args.seed, args.tier)
    if args.shrink:
        c = shrink(c, args.device, None if args.backend == "auto" else args.backend)
    print(json.dumps(c, sort_keys=True))
    try:
        print(run_case(c, args.device, None if args.backend == "auto" else args.backend))
    except FuzzFailure as err:
        print(err)
        sys.exit(1)
