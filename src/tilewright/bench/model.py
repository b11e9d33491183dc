"""Model-level benchmark: one Llama-style decoder layer and one ViT block, built twice - from torch modules and from
tilewright modules - with identical weights, timed end to end.

Why a model benchmark next to the per-op ones: a kernel that wins in isolation can lose in a model (layout copies
between ops, a fusion torch.compile would have done anyway, launch overhead at small sizes, first-use autotuning),
and a kernel that merely ties can still win there (the residual add fused into the output projection saves a full
read and write of the hidden state). The model is the measure here, not the kernel: every number is the whole block,
forward or forward + backward, against the same block in plain torch, eager and compiled.

The two blocks (``build_blocks``):

* ``llama`` - pre-norm decoder layer: RMSNorm -> fused QKV projection -> RoPE (rotate-half, one set of tables) ->
  causal GQA attention -> output projection + residual -> RMSNorm -> fused gate/up projection -> SwiGLU
  (``silu(gate) * up``) -> down projection + residual. No biases.
  torch build: ``nn.RMSNorm`` + ``nn.Linear`` + ``F.scaled_dot_product_attention(is_causal=True, enable_gqa=True)``,
  RoPE and SwiGLU as the eager formulas model code writes (slices, a concatenation, products; ``F.silu(gate) * up``).
  tilewright build: ``tilewright.nn.RMSNormLinear`` for norm + QKV and norm + gate/up (the norm fused into the GEMM),
  ``tilewright.apply_rotary`` on the q and k heads of the QKV output (eager: one strided view, one pass; traced:
  q and k in calls of their own, each written in the layout its attention reads),
  ``tilewright.flash_attention`` (GQA without repeating K/V), the norm + gate/up projection with
  ``activation="swiglu"`` (inference on sm_90: the norm pass and one GEMM whose epilogue stores ``silu(gate) * up``
  alone; with autograd, or elsewhere, the norm-fused GEMM then ``tilewright.swiglu``, one pass whose backward writes
  the gate/up gradient whole), ``tilewright.nn.Linear(..., residual=)`` for the output and down
  projections (residual add fused into the GEMM epilogue). Under torch.compile the two elementwise ops emit their
  torch formulas, which inductor fuses as it does the torch build's.
* ``vit`` - patch embedding + pre-norm encoder block: linear patch embedding + pos_embed -> LayerNorm -> QKV (bias)
  -> non-causal attention -> projection + residual -> LayerNorm -> fc1 + GELU (exact erf form, both builds) -> fc2 +
  residual. LayerNorm is not a tilewright op, so both builds keep ``nn.LayerNorm``. tilewright build: the patch
  embedding is ``tilewright.nn.Linear`` with ``residual=pos_embed``, a (S, D) tensor the GEMM epilogue broadcasts
  over the batch of the (B, S, P) input (read in place, never expanded); fc1 fuses the GELU
  (``activation="gelu"``); proj and fc2 fuse their residual adds.

Both builds use one fused QKV (and gate/up) weight, so the comparison is about kernels and fusions, not about how
many projection launches a model author chose.

Rows (long format of bench/common.py, ``op = "model"``), case = ``"<block>-<size>|<kind>"``:

* ``fwd``        - time per forward under ``torch.no_grad()`` (inference), steady state: forwards called back to
                   back, wall clock per call, the providers' runs interleaved (bench/common.loop_ms_alternating:
                   host launch cost counts as it does in a loop;
                   before 2026-11-26 22:40 the rows were ``do_bench`` medians, whose L2 flush before every call hid
                   host cost up to the flush's length and flattered host-bound small blocks of every provider).
* ``fwd+bwd``    - time per ``block(x).sum().backward()``, measured the same way (gradients accumulate; zeroing is
                   not timed or needed). The Llama input requires grad (a layer inside a stack needs dL/dx); the
                   ViT's patches do not (they are the image), so its patch embedding has no input gradient.
* ``first_call`` - wall-clock time of the first forward of a fresh module (a fresh ``torch.compile`` wrapper after
                   ``torch._dynamo.reset()``) at a shape this process has not run yet: compile, Triton autotuning and
                   cuBLAS heuristics included - what a user waits for before the first output. One sample, not a
                   median. Process-wide one-time costs (CUDA context, cuBLAS handle, inductor's worker pool) are paid
                   by a warm-up before the first case, and on-disk caches (Triton's kernel cache, inductor's FX graph
                   cache, tilewright's autotune cache) are used as they are: for cold numbers point TRITON_CACHE_DIR,
                   TORCHINDUCTOR_CACHE_DIR and TILEWRIGHT_CACHE_DIR at empty folders. Triton autotuning of a shape is
                   per process, so it lands on ``tilewright_eager``'s first call (measured before
                   ``tilewright_compile``'s, which then pays dynamo + inductor only).

Providers: ``torch_eager`` (the **peer** of every row), ``torch_compile`` (default mode), ``torch_compile_max_autotune``
(GPU only; mode ``max-autotune-no-cudagraphs``: CUDA graphs would remove launch overhead from one provider only,
which bench/common.py's rule forbids - all providers of a case or none), ``tilewright_eager`` and
``tilewright_compile`` (``torch.compile`` of the tilewright block: the tilewright ops are opaque custom ops,
inductor fuses what lies between them). All compiles are static-shape (``dynamic=False``). ``speedup`` = torch_eager
time / provider time. ``tflops`` counts the matmul and attention FLOPs only (norms and elementwise work are free).

Correctness guard (``check_outputs``): before anything is timed, every provider's first forward is compared with a
float32 copy of the torch block (same weights, upcast; fp32 accumulation everywhere): an error
``max|out - ref| / max|ref|`` above :data:`REL_TOL` (2e-2) raises :class:`WrongModel`. Before its fwd+bwd is timed,
every provider's gradients (the input's and every parameter's, after one ``sum().backward()``) are compared with the
reference's the same way, each tensor against ``max(REL_TOL, GRAD_SLACK x torch_eager's own error on it)``: some
gradients (a LayerNorm bias's, a sum of nearly cancelling terms over every token) are far off in bf16 in torch itself,
so torch's error in the same precision is the yardstick there. A wrong model is never timed. The errors are printed
and kept in ``df.attrs["max_rel_err"]`` (``"<case>|<fwd|fwd+bwd>|<provider>" -> largest error``).

Suites: ``default`` (GPU, bf16): both blocks at ``prefill`` (B 8 x S 2048) and ``small`` (B 1 x S 512) with
1B-class Llama widths (d 2048, 16 / 4 heads of 128, FFN 5632) and ViT-L widths (d 1024, 16 heads of 64, MLP 4096,
16x16x3 patches). ``tiny`` (CPU, Triton interpreter, float16 - the interpreter gets bf16 dots wrong): d 128, 4 / 2
heads of 32 (ViT: 4 of 32, 4x4x3 patches), FFN / MLP 256, B 1 x S 64; numbers there check the plumbing, not speed.
``tilewright bench --op all`` runs one suite name across ops; this module has the same two names as the others.
On CPU the compiled providers use the ``aot_eager`` backend unless asked otherwise: it traces what inductor would
get (dynamo graph, AOT autograd, the opaque tilewright ops) without a C++ build per graph, which more than triples
the tiny suite's time on a 2-core machine (107 s against 30 s) and times nothing anyone cares about;
``--compile-backend inductor`` runs it with inductor (it passes the guard on CPU too).

``python -m tilewright.bench.model [--suite tiny] [--cases llama-small] [--no-max-autotune]`` prints the table;
``tilewright bench --op model`` writes the CSV like the other ops, and ``--op all`` includes it without the
max-autotune provider (cli.ALL_OPS_ARGS).
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import os
import time

import torch
import torch._dynamo  # torch._dynamo.reset / config below
import torch.nn.functional as F
from torch import nn

from .common import COLUMNS, add_speedups, environment, loop_ms_alternating, on_gpu, require_pandas, time_ms

OP = "model"
PEER = "torch_eager"
PROVIDERS = ("torch_eager", "torch_compile", "torch_compile_max_autotune", "tilewright_eager", "tilewright_compile")
# max|out - ref| / max|ref| above which a provider's forward output is wrong. torch's own bf16 block is 5e-3 to 9e-3
# off the float32 reference at the suite's widths (B 1, S 256 and 2048, measured on CPU), while one wrong weight, mask
# or layout moves the output by O(1): the bound sits between the two.
REL_TOL = 2e-2
# Gradients: a provider's error on a tensor may be up to GRAD_SLACK x torch_eager's own error on it (and always
# REL_TOL). Some gradients are sums over every token of terms that nearly cancel - a LayerNorm bias's: torch's own
# bf16 gradient of the ViT's norm biases is up to 0.6 max-relative off at S 2048 - so no fixed bound fits all tensors;
# torch's error in the same precision is the yardstick of what rounding alone does, and a real bug (O(1) on the
# weight and input gradients) still lands far above it.
GRAD_SLACK = 4.0


class WrongModel(RuntimeError):
    """A provider's block disagrees with the float32 reference beyond :data:`REL_TOL`: nothing of it is timed."""


# ------------------------------------------------------------------------------------------------ shapes and suites
@dataclasses.dataclass(frozen=True)
class LlamaDims:
    """Widths of the Llama-style decoder layer."""
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    eps: float = 1e-5
    rope_base: float = 10000.0


@dataclasses.dataclass(frozen=True)
class ViTDims:
    """Widths of the ViT block; ``patch_dim`` = channels x patch height x patch width of the flattened patches."""
    d_model: int
    n_heads: int
    head_dim: int
    mlp: int
    patch_dim: int
    eps: float = 1e-6


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmarked configuration: a block kind with its widths, at batch ``batch`` and sequence ``seq``."""
    block: str  # "llama" or "vit"
    dims: LlamaDims | ViTDims
    size: str  # "prefill", "small", "tiny"
    batch: int
    seq: int

    @property
    def tag(self) -> str:
        return f"{self.block}-{self.size}"


LLAMA = LlamaDims(d_model=2048, n_heads=16, n_kv_heads=4, head_dim=128, ffn=5632)
VIT = ViTDims(d_model=1024, n_heads=16, head_dim=64, mlp=4096, patch_dim=16 * 16 * 3)
LLAMA_TINY = LlamaDims(d_model=128, n_heads=4, n_kv_heads=2, head_dim=32, ffn=256)
VIT_TINY = ViTDims(d_model=128, n_heads=4, head_dim=32, mlp=256, patch_dim=4 * 4 * 3)
SIZES = {"prefill": (8, 2048), "small": (1, 512)}

SUITES = {
    "default": [Case(block, dims, size, *SIZES[size]) for block, dims in (("llama", LLAMA), ("vit", VIT))
                for size in ("prefill", "small")],
    # CPU / interpreter smoke run: numbers mean nothing, the plumbing (builds, guard, compile, rows) is exercised
    "tiny": [Case("llama", LLAMA_TINY, "tiny", 1, 64), Case("vit", VIT_TINY, "tiny", 1, 64)],
}


def flops(case: Case, kind: str) -> float:
    """Matmul + attention FLOPs of one forward (``kind="fwd"``) or forward + backward (``"fwd+bwd"``) of ``case``.

    Backward: every GEMM twice more (input and weight gradients) except the ViT patch embedding (no input gradient),
    attention 2.5x its forward (the flash backward recomputes the scores).
    """
    B, S, d = case.batch, case.seq, case.dims.d_model
    M = B * S
    if case.block == "llama":
        c = case.dims
        gemm = 2.0 * M * d * ((c.n_heads + 2 * c.n_kv_heads) * c.head_dim + c.n_heads * c.head_dim + 3 * c.ffn)
        attn = 4.0 * B * c.n_heads * S * S * c.head_dim * 0.5  # causal: half the scores
        no_dgrad = 0.0
    else:
        c = case.dims
        patch = 2.0 * M * c.patch_dim * d
        gemm = patch + 2.0 * M * d * (3 * d + d + 2 * c.mlp)
        attn = 4.0 * B * c.n_heads * S * S * c.head_dim
        no_dgrad = patch
    if kind == "fwd":
        return gemm + attn
    return 3 * gemm - no_dgrad + 3.5 * attn


# ------------------------------------------------------------------------------------------------ the blocks
def _rope_tables(seq: int, head_dim: int, base: float, device, dtype):
    """cos / sin tables (S, 1, D) of the rotary embedding, rotate-half convention, rounded to the model dtype once."""
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    ang = torch.cat([ang, ang], dim=-1)[:, None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``t`` (B, S, H, D) - plain torch, shared by both builds so it cannot differ between them."""
    half = t.shape[-1] // 2
    rotated = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
    return t * cos + rotated * sin


class _LlamaBase(nn.Module):
    def __init__(self, dims: LlamaDims, seq: int, device, dtype):
        super().__init__()
        self.dims = dims
        cos, sin = _rope_tables(seq, dims.head_dim, dims.rope_base, device, dtype)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def _qkv_heads(self, qkv: torch.Tensor):
        """(B, S, (Hq + 2 Hkv) D) -> q, k, v as (B, H, S, D) views of (B, S, H, D) tensors, RoPE applied to q, k."""
        c = self.dims
        B, S, _ = qkv.shape
        q, k, v = qkv.split([c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.n_kv_heads * c.head_dim], dim=-1)
        q = apply_rope(q.view(B, S, c.n_heads, c.head_dim), self.rope_cos, self.rope_sin)
        k = apply_rope(k.view(B, S, c.n_kv_heads, c.head_dim), self.rope_cos, self.rope_sin)
        v = v.view(B, S, c.n_kv_heads, c.head_dim)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


class TorchLlamaBlock(_LlamaBase):
    """The Llama-style decoder layer in plain torch modules (the peer)."""

    def __init__(self, dims: LlamaDims, seq: int, device=None, dtype=None):
        super().__init__(dims, seq, device, dtype)
        kw = dict(device=device, dtype=dtype)
        d, hd = dims.d_model, dims.head_dim
        self.attn_norm = nn.RMSNorm(d, eps=dims.eps, **kw)
        self.wqkv = nn.Linear(d, (dims.n_heads + 2 * dims.n_kv_heads) * hd, bias=False, **kw)
        self.wo = nn.Linear(dims.n_heads * hd, d, bias=False, **kw)
        self.ffn_norm = nn.RMSNorm(d, eps=dims.eps, **kw)
        self.w_gate_up = nn.Linear(d, 2 * dims.ffn, bias=False, **kw)
        self.w_down = nn.Linear(dims.ffn, d, bias=False, **kw)

    def canonical_params(self) -> dict[str, torch.Tensor]:
        """Parameters by build-independent name (the tilewright build has the same names, other modules)."""
        return {"attn_norm": self.attn_norm.weight, "wqkv": self.wqkv.weight, "wo": self.wo.weight,
                "ffn_norm": self.ffn_norm.weight, "w_gate_up": self.w_gate_up.weight, "w_down": self.w_down.weight}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        q, k, v = self._qkv_heads(self.wqkv(self.attn_norm(x)))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = x + self.wo(o.transpose(1, 2).reshape(B, S, -1))
        gate, up = self.w_gate_up(self.ffn_norm(h)).chunk(2, dim=-1)
        return h + self.w_down(F.silu(gate) * up)


class TilewrightLlamaBlock(_LlamaBase):
    """The same decoder layer on tilewright modules: fused norm+GEMM, fused rotary embedding, flash attention,
    residual-fused GEMMs, fused SwiGLU."""

    def __init__(self, dims: LlamaDims, seq: int, device=None, dtype=None):
        import tilewright

        super().__init__(dims, seq, device, dtype)
        kw = dict(device=device, dtype=dtype)
        d, hd = dims.d_model, dims.head_dim
        self.attn_norm_qkv = tilewright.nn.RMSNormLinear(d, (dims.n_heads + 2 * dims.n_kv_heads) * hd, bias=False,
                                                         eps=dims.eps, **kw)
        self.wo = tilewright.nn.Linear(dims.n_heads * hd, d, bias=False, **kw)
        self.ffn_norm_gate_up = tilewright.nn.RMSNormLinear(d, 2 * dims.ffn, bias=False, eps=dims.eps,
                                                            activation="swiglu", **kw)
        self.w_down = tilewright.nn.Linear(dims.ffn, d, bias=False, **kw)

    def canonical_params(self) -> dict[str, torch.Tensor]:
        """Parameters by build-independent name (see :meth:`TorchLlamaBlock.canonical_params`)."""
        return {"attn_norm": self.attn_norm_qkv.norm_weight, "wqkv": self.attn_norm_qkv.weight, "wo": self.wo.weight,
                "ffn_norm": self.ffn_norm_gate_up.norm_weight, "w_gate_up": self.ffn_norm_gate_up.weight,
                "w_down": self.w_down.weight}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import tilewright

        B, S, _ = x.shape
        c = self.dims
        heads = self.attn_norm_qkv(x).view(B, S, c.n_heads + 2 * c.n_kv_heads, c.head_dim)
        # the tables are the torch block's (S, 1, D) ones viewed as (S, D), so both builds use the same angles
        cos, sin = self.rope_cos[:, 0], self.rope_sin[:, 0]
        # split, not slicing: the backward of a split is one concatenation, that of each slice a zero-filled full
        # buffer, a copy and an add (8 extra kernels a step in the first version's profile)
        if torch.compiler.is_compiling():
            # traced: q and k rotated in calls of their own, so that each result is a buffer inductor lays out for
            # the attention that reads it - the rotated (B, S, Hq + Hkv, D) view of one call is a buffer q and k
            # share, which the attention's layout then copies (one kernel more; the B 1 x S 512 compiled forward
            # 0.980x torch.compile that way, 1.006x this way in session 42's probe,
            # perf/results/h200/model/b1_compiled_code_s42.py, whose output was lost - perf/LOG.md; the in-process
            # A/B to re-measure it: model/rotary_split_ab_2026-12-08.py)
            q, k, v = heads.split([c.n_heads, c.n_kv_heads, c.n_kv_heads], dim=2)
            q, k = tilewright.apply_rotary(q, cos, sin), tilewright.apply_rotary(k, cos, sin)
        else:
            # eager: the q and k heads of the QKV output rotated as one strided (B, S, Hq + Hkv, D) view in one
            # launch (the B 1 step is host-bound: one call's host time less)
            qk, v = heads.split([c.n_heads + c.n_kv_heads, c.n_kv_heads], dim=2)
            q, k = tilewright.apply_rotary(qk, cos, sin).split([c.n_heads, c.n_kv_heads], dim=2)
        # flash_attention reads the (B, H, S, D) views of the (B, S, H, D) tensors in place and writes its output in
        # q's layout, so the transpose back below is a free view, not a copy
        o = tilewright.flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        h = self.wo(o.transpose(1, 2).reshape(B, S, -1), residual=x)
        # silu(gate) * up of the fused gate/up projection: in its GEMM's epilogue without autograd (sm_90), else one
        # pass after it (whose backward writes the gate_up gradient whole). Measured in one process (H200, Llama B8
        # forward, perf/results/h200/model/swiglu_linear_ab_s40.txt): 1.013x eager, 1.033x compiled the pair's speed
        return self.w_down(self.ffn_norm_gate_up(h), residual=h)


class _ViTBase(nn.Module):
    def __init__(self, dims: ViTDims, seq: int, device, dtype):
        super().__init__()
        self.dims = dims
        kw = dict(device=device, dtype=dtype)
        self.pos_embed = nn.Parameter(0.02 * torch.randn(seq, dims.d_model, **kw))
        self.norm1 = nn.LayerNorm(dims.d_model, eps=dims.eps, **kw)
        self.norm2 = nn.LayerNorm(dims.d_model, eps=dims.eps, **kw)

    def _heads(self, qkv: torch.Tensor):
        """(B, S, 3 H D) -> q, k, v as (B, H, S, D) strided views (no copies)."""
        c = self.dims
        B, S, _ = qkv.shape
        q, k, v = qkv.view(B, S, 3, c.n_heads, c.head_dim).unbind(2)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _shared_params(self) -> dict[str, torch.Tensor]:
        return {"pos_embed": self.pos_embed, "norm1.w": self.norm1.weight, "norm1.b": self.norm1.bias,
                "norm2.w": self.norm2.weight, "norm2.b": self.norm2.bias}


class TorchViTBlock(_ViTBase):
    """Patch embedding + ViT encoder block in plain torch modules (the peer)."""

    def __init__(self, dims: ViTDims, seq: int, device=None, dtype=None):
        super().__init__(dims, seq, device, dtype)
        kw = dict(device=device, dtype=dtype)
        d = dims.d_model
        self.patch_embed = nn.Linear(dims.patch_dim, d, **kw)
        self.qkv = nn.Linear(d, 3 * d, **kw)
        self.proj = nn.Linear(d, d, **kw)
        self.fc1 = nn.Linear(d, dims.mlp, **kw)
        self.fc2 = nn.Linear(dims.mlp, d, **kw)

    def canonical_params(self) -> dict[str, torch.Tensor]:
        """Parameters by build-independent name."""
        out = self._shared_params()
        for name in ("patch_embed", "qkv", "proj", "fc1", "fc2"):
            m = getattr(self, name)
            out[f"{name}.w"], out[f"{name}.b"] = m.weight, m.bias
        return out

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        B, S, _ = patches.shape
        x = self.patch_embed(patches) + self.pos_embed
        q, k, v = self._heads(self.qkv(self.norm1(x)))
        o = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(o.transpose(1, 2).reshape(B, S, -1))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TilewrightViTBlock(_ViTBase):
    """The same ViT block on tilewright Linear (pos_embed / residual / GELU fused) and flash attention."""

    def __init__(self, dims: ViTDims, seq: int, device=None, dtype=None):
        import tilewright

        super().__init__(dims, seq, device, dtype)
        kw = dict(device=device, dtype=dtype)
        d = dims.d_model
        self.patch_embed = tilewright.nn.Linear(dims.patch_dim, d, **kw)
        self.qkv = tilewright.nn.Linear(d, 3 * d, **kw)
        self.proj = tilewright.nn.Linear(d, d, **kw)
        self.fc1 = tilewright.nn.Linear(d, dims.mlp, activation="gelu", **kw)
        self.fc2 = tilewright.nn.Linear(dims.mlp, d, **kw)

    canonical_params = TorchViTBlock.canonical_params

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        import tilewright

        B, S, _ = patches.shape
        # pos_embed (S, D) is the residual of the patch-embedding GEMM: broadcast over the batch inside the epilogue
        x = self.patch_embed(patches, residual=self.pos_embed)
        q, k, v = self._heads(self.qkv(self.norm1(x)))
        o = tilewright.flash_attention(q, k, v, causal=False)
        x = self.proj(o.transpose(1, 2).reshape(B, S, -1), residual=x)
        return self.fc2(self.fc1(self.norm2(x)), residual=x)


_BUILDS = {"llama": (TorchLlamaBlock, TilewrightLlamaBlock), "vit": (TorchViTBlock, TilewrightViTBlock)}


@torch.no_grad()
def build_blocks(case: Case, device, dtype, seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """(torch block, tilewright block) of ``case`` with identical, independent (copied, not shared) weights.

    Weights are drawn so every op matters: linear weights ~ N(0, 1/fan_in), norm scales 1 + N(0, 0.1^2), biases and
    pos_embed small but non-zero.
    """
    torch_cls, tw_cls = _BUILDS[case.block]
    torch.manual_seed(seed)
    ref = torch_cls(case.dims, case.seq, device=device, dtype=dtype)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for name, p in ref.canonical_params().items():
        if p.dim() == 2 and name != "pos_embed":
            value = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1])
        elif "norm" in name and not name.endswith(".b"):
            value = 1 + 0.1 * torch.randn(p.shape, generator=gen)
        else:
            value = 0.02 * torch.randn(p.shape, generator=gen)
        p.copy_(value.to(p.dtype))
    ours = tw_cls(case.dims, case.seq, device=device, dtype=dtype)
    mine = ours.canonical_params()
    for name, p in ref.canonical_params().items():
        mine[name].copy_(p)
    return ref, ours


def make_input(case: Case, device, dtype, seed: int = 1) -> torch.Tensor:
    """The block's input: hidden states (B, S, d) for Llama (requires grad: a layer in a stack), patches (B, S, P)
    for ViT (no grad: the image)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    width = case.dims.d_model if case.block == "llama" else case.dims.patch_dim
    x = torch.randn(case.batch, case.seq, width, generator=gen).to(device=device, dtype=dtype)
    return x.requires_grad_(case.block == "llama")


# ------------------------------------------------------------------------------------------------ the guard
def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max|out - ref| / max|ref| in float32 (NaN or Inf anywhere gives inf)."""
    out, ref = out.detach().float(), ref.detach().float()
    if not torch.isfinite(out).all():
        return math.inf
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def check_outputs(provider: str, case: Case, what: str, pairs: dict[str, tuple[torch.Tensor, torch.Tensor]],
                  bounds: dict[str, float] | float = REL_TOL) -> dict[str, float]:
    """:func:`rel_err` of every ``name -> (tensor, float32 reference)`` in ``pairs``; raises :class:`WrongModel`
    naming the provider, the case and the tensor when one exceeds its bound (``bounds``: one for all, or per name)."""
    errs = {name: rel_err(t, r) for name, (t, r) in pairs.items()}
    for name, err in errs.items():
        bound = bounds if isinstance(bounds, float) else bounds[name]
        if not (err <= bound and math.isfinite(err)):  # NaN / Inf in the output fail whatever the bound
            raise WrongModel(f"model bench {case.tag}: {provider}'s {what} disagrees with the float32 torch reference: "
                             f"max|err| / max|ref| = {err:.3g} on {name!r} (bound {bound:.3g}); not timing a wrong "
                             "model")
    return errs


def _grads(block: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    out = {name: p.grad for name, p in block.canonical_params().items()}
    if x.requires_grad:
        out["input"] = x.grad
    return out


def _clear_grads(block: nn.Module, x: torch.Tensor) -> None:
    for p in block.parameters():
        p.grad = None
    x.grad = None


# ------------------------------------------------------------------------------------------------ providers
def _raise_recompile_limit() -> None:
    # one static-shape graph per (case, grad mode, backend) on the same forward code object
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 64))


def _providers(ref: nn.Module, ours: nn.Module, gpu: bool, max_autotune: bool, compile_backend: str) -> dict:
    """name -> callable block. Compiled providers get fresh ``torch.compile`` wrappers (call after dynamo reset)."""
    def compiled(block, **kw):
        return torch.compile(block, dynamic=False, backend=compile_backend, **kw)

    provs = {"torch_eager": ref, "torch_compile": compiled(ref)}
    if gpu and max_autotune and compile_backend == "inductor":
        provs["torch_compile_max_autotune"] = compiled(ref, mode="max-autotune-no-cudagraphs")
    provs["tilewright_eager"] = ours
    provs["tilewright_compile"] = compiled(ours)
    return provs


def _sync(gpu: bool) -> None:
    if gpu:
        torch.cuda.synchronize()


def _warm_up(device, dtype, compile_backend: str, gpu: bool) -> None:
    """Pay the process-wide one-time costs (CUDA context, cuBLAS handle, GPU clocks, dynamo/inductor start-up and
    its compile workers) before the first case, so no provider's first_call is charged with them."""
    a = torch.randn(256, 256, device=device, dtype=dtype)
    if gpu:
        w = torch.randn(4096, 4096, device=device, dtype=dtype)
        time_ms(lambda: w @ w, warmup_ms=300, rep_ms=10)  # an idle card runs at a fraction of its clock
        del w
    f = torch.compile(lambda t: torch.relu(t @ t) + 1, dynamic=False, backend=compile_backend)
    f(a)
    _sync(gpu)
    torch._dynamo.reset()


def _row(case: Case, kind: str, dtype, provider: str, ms: float) -> dict:
    f = flops(case, kind) if kind != "first_call" else math.nan
    c = case.dims
    if case.block == "llama":
        shape = (f"B{case.batch} S{case.seq} d{c.d_model} h{c.n_heads}/{c.n_kv_heads}x{c.head_dim} "
                 f"ffn{c.ffn}")
    else:
        shape = f"B{case.batch} S{case.seq} d{c.d_model} h{c.n_heads}x{c.head_dim} mlp{c.mlp} p{c.patch_dim}"
    return dict(op=OP, case=f"{case.tag}|{kind}", shape=shape, dtype=str(dtype).replace("torch.", ""),
                provider=provider, median_ms=ms, tflops=f / ms * 1e-9 if ms > 0 else math.nan)


def run_case(case: Case, device, dtype, *, progress=print, max_autotune: bool = True,
             compile_backend: str | None = None, errors: dict | None = None, warmup_ms: float = 25,
             rep_ms: float = 700) -> list[dict]:
    """Rows of one case: first_call, fwd and fwd+bwd for every provider, after the correctness guard.

    ``errors`` (optional dict) receives ``"<case>|<kind>|<provider>" -> max rel error`` for every guarded output.
    """
    gpu = device == "cuda" or (isinstance(device, torch.device) and device.type == "cuda")
    compile_backend = compile_backend or ("inductor" if gpu else "aot_eager")
    errors = {} if errors is None else errors
    torch._dynamo.reset()  # fresh compiles for this case: its first_call rows include them
    ref, ours = build_blocks(case, device, dtype)
    x = make_input(case, device, dtype)

    # float32 reference: the torch build upcast (same rounded weights), fp32 accumulation everywhere - in IEEE fp32
    # even if another benchmark in this process allowed TF32 (torch.compile's advice), which rounds to 10 bits
    ref32 = copy.deepcopy(ref).float()
    x32 = x.detach().float().requires_grad_(x.requires_grad)
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        y32 = ref32(x32)
        y32.sum().backward()
    finally:
        torch.set_float32_matmul_precision(precision)
    y_ref = y32.detach()
    g_ref = _grads(ref32, x32)
    del y32, ref32, x32

    provs = _providers(ref, ours, gpu, max_autotune, compile_backend)
    rows = []

    # first_call and the forward guard: one forward per provider, before anything is timed
    for name, block in provs.items():
        _sync(gpu)
        t0 = time.perf_counter()
        with torch.no_grad():
            y = block(x)
        _sync(gpu)
        ms = (time.perf_counter() - t0) * 1e3
        err = check_outputs(name, case, "forward output", {"output": (y, y_ref)})["output"]
        errors[f"{case.tag}|fwd|{name}"] = err
        progress(f"{case.tag:>13} {name:>26} first call {ms:10.1f} ms   fwd max rel err {err:.2e}")
        rows.append(_row(case, "first_call", dtype, name, ms))
        del y

    # The providers' timed runs alternate (common.loop_ms_alternating): the host's speed drifts within a call. Each
    # run queues ~100 ms of steps (rep_ms over 7 runs): a run of 3 steps, as 100 ms gave the 4 ms ViT-L step, timed
    # the pipeline's fill - the host launching the first step while the GPU waits - and put tilewright's step at
    # 5.2 ms in one call where 20 queued steps ran 4.2-4.3 ms in the next (torch 4.2 / 4.1-4.2: it has less host
    # work per step to fill with). CPU
    # (interpreter): one run each, and no warm-up call - the first call above and the guarded step below have
    # compiled and tuned everything; these numbers only prove the rows exist
    def forward(block, x=x):
        def fwd():
            with torch.no_grad():
                block(x)
        return fwd

    fwd_ms = loop_ms_alternating([forward(block) for block in provs.values()], warmup_ms=warmup_ms, rep_ms=rep_ms)
    for name, ms in zip(provs, fwd_ms):
        rows.append(_row(case, "fwd", dtype, name, ms))
        progress(f"{case.tag:>13} {name:>26} fwd        {ms:10.4f} ms")

    # fwd+bwd: one guarded step first (it also compiles the training graph), then the timed steps. torch_eager comes
    # first: its own gradient errors set the other providers' bounds (see GRAD_SLACK).
    peer_errs = None
    steps, step_errs = [], []
    for name, block in provs.items():
        base = ref if name.startswith("torch") else ours
        _clear_grads(base, x)
        block(x).sum().backward()
        got = _grads(base, x)
        pairs = {k: (got[k], g_ref[k]) for k in g_ref}
        if peer_errs is None:  # torch_eager: finite is all it must be, its errors are the yardstick
            errs = peer_errs = check_outputs(name, case, "gradients", pairs, bounds=math.inf)
        else:
            errs = check_outputs(name, case, "gradients", pairs,
                                 bounds={k: max(REL_TOL, GRAD_SLACK * e) for k, e in peer_errs.items()})
        err = max(errs.values())
        errors[f"{case.tag}|fwd+bwd|{name}"] = err

        def step(block=block, x=x):
            block(x).sum().backward()
        steps.append(step)
        step_errs.append(err)
    for name, ms, err in zip(provs, loop_ms_alternating(steps, warmup_ms=warmup_ms, rep_ms=rep_ms), step_errs):
        rows.append(_row(case, "fwd+bwd", dtype, name, ms))
        progress(f"{case.tag:>13} {name:>26} fwd+bwd    {ms:10.4f} ms   grad max rel err {err:.2e}")
    del provs, ref, ours, x
    torch._dynamo.reset()
    if gpu:
        torch.cuda.empty_cache()
    return rows


def _suite_cases(suite: str) -> list[Case]:
    if suite in SUITES:
        return SUITES[suite]
    raise ValueError(f"suite: unknown {suite!r}; expected one of {sorted(SUITES)}")


def run(suite: str = "default", progress=print, max_autotune: bool = True, compile_backend: str | None = None,
        cases: tuple[str, ...] | None = None):
    """Benchmark every case of ``suite``; returns the long DataFrame of bench/common.py (``op = "model"``).

    ``max_autotune``: include ``torch_compile_max_autotune`` (GPU only; its GEMM autotuning takes minutes, so
    ``tilewright bench --op all`` leaves it out). ``compile_backend``: the torch.compile backend of the compiled
    providers (default: inductor on GPU, aot_eager on CPU - see the module docstring). ``cases``: only these case
    tags (e.g. ``("llama-small",)``). The guard's errors are in ``df.attrs["max_rel_err"]``.
    """
    pd = require_pandas("tilewright.bench.model")
    gpu = on_gpu()
    if suite == "default" and not gpu:
        raise ValueError("suite 'default' needs a GPU (bf16 blocks at 16k tokens); on CPU use suite 'tiny'")
    device = "cuda" if gpu else "cpu"
    dtype = torch.bfloat16 if gpu else torch.float16  # the Triton interpreter gets bf16 dots wrong
    compile_backend = compile_backend or ("inductor" if gpu else "aot_eager")
    selected = [c for c in _suite_cases(suite) if cases is None or c.tag in cases]
    if cases is not None and not selected:
        raise ValueError(f"cases: none of {list(cases)} in suite {suite!r} "
                         f"({', '.join(c.tag for c in _suite_cases(suite))})")
    _raise_recompile_limit()
    progress(f"model bench, suite={suite}, dtype={str(dtype).replace('torch.', '')}, compile backend="
             f"{compile_backend}, cases={[c.tag for c in selected]}")
    _warm_up(device, dtype, compile_backend, gpu)
    rows, errors = [], {}
    t0 = time.perf_counter()
    for case in selected:
        rows += run_case(case, device, dtype, progress=progress, max_autotune=max_autotune,
                         compile_backend=compile_backend, errors=errors)
        progress(f"{case.tag} done ({time.perf_counter() - t0:.0f}s so far)")
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("peer", "speedup")])
    df = add_speedups(df, {c: PEER for c in df["case"].unique()})[COLUMNS]
    df.attrs["max_rel_err"] = errors
    return df


def summarize(df):
    """One line per case kind and provider: geomean speedup over torch_eager (what ``tilewright bench`` prints)."""
    import numpy as np

    pd = require_pandas("tilewright.bench.model")
    d = df[df.speedup.notna() & (df.speedup > 0)].copy()
    d["kind"] = d["case"].str.rsplit("|", n=1).str[1]
    out = d.groupby(["kind", "provider"], sort=False)["speedup"].agg(
        geomean=lambda s: float(np.exp(np.log(s).mean())), min="min", max="max", cases="count").reset_index()
    return pd.DataFrame(out)


def main(argv=None) -> None:
    """Command line: ``python -m tilewright.bench.model [--suite ...] [--cases ...]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default=None, choices=sorted(SUITES), help="default on GPU, tiny on CPU")
    p.add_argument("--cases", default=None, help="comma-separated case tags, e.g. llama-small,vit-small")
    p.add_argument("--no-max-autotune", action="store_true", help="leave out torch_compile_max_autotune")
    p.add_argument("--compile-backend", default=None,
                   help="torch.compile backend of the compiled providers (default: inductor on GPU, aot_eager on CPU)")
    p.add_argument("--csv", default=None, help="also write the rows to this CSV")
    args = p.parse_args(argv)
    print(environment())
    suite = args.suite or ("default" if on_gpu() else "tiny")
    df = run(suite, max_autotune=not args.no_max_autotune, compile_backend=args.compile_backend,
             cases=tuple(args.cases.split(",")) if args.cases else None)
    if args.csv:
        df.to_csv(args.csv, index=False)
    with require_pandas("tilewright.bench.model").option_context("display.width", 200, "display.max_rows", 500):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(summarize(df).to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
    os._exit(0)  # skip slow interpreter/compile-worker teardown
