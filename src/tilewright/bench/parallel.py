"""A small Llama-style model trained under FSDP2 or tensor parallelism, built from tilewright modules and from torch
modules with the same initial weights: loss curves side by side and tokens/s (issue 18's two-GPU tier).

Run on a machine with two GPUs (NCCL)::

    torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode fsdp --steps 50 --csv out.csv
    torchrun --nproc-per-node 2 -m tilewright.bench.parallel --mode tp --steps 50 --csv out.csv
    torchrun --nproc-per-node 4 -m tilewright.bench.parallel --mode fsdp+tp --steps 50 --csv out.csv

The CPU tier (tests/test_parallel.py) runs :func:`train` on two gloo processes with tiny widths in float32. The two
builds train interleaved, five steps of one then five of the other (``--block``), so the host's drift within a run
falls on both (:func:`train`).

The model: per layer, RMSNorm -> q / k / v projections -> RoPE -> causal GQA attention -> output projection plus the
residual, RMSNorm -> gate and up projections -> SwiGLU -> down projection plus the residual. The tilewright build
computes each norm once for the projections that read it (``tilewright.rms_norm_linears``; under tensor parallelism
the norm fused into each projection's GEMM; the norm weight is one parameter read by the projections, not one
``RMSNormLinear`` per module, which would change the model), the residuals into the output / down GEMMs, RoPE
and SwiGLU into one pass each. Tensor parallelism follows the usual plan: q / k / v / gate / up column-parallel (heads
and FFN columns split), output / down row-parallel; attention runs on each rank's heads.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

from ..ops._dtensor import is_dtensor


@dataclasses.dataclass(frozen=True)
class Dims:
    d_model: int = 512
    n_heads: int = 8
    n_kv_heads: int = 4
    ffn: int = 1408
    layers: int = 2
    vocab: int = 1024
    seq: int = 256
    batch: int = 4

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


TINY = Dims(d_model=32, n_heads=4, n_kv_heads=2, ffn=64, layers=1, vocab=64, seq=8, batch=2)
# 1B-class Llama widths (the model bench's layer), four layers, a 32k vocabulary: large enough that the GPU, not the
# host, sets the step time - the size the throughput comparison is made at
LLAMA = Dims(d_model=2048, n_heads=16, n_kv_heads=4, ffn=5632, layers=4, vocab=32000, seq=2048, batch=2)
SIZES = {"small": Dims(), "llama": LLAMA}
LEARNING_RATES = {"small": 1e-2, "llama": 3e-4}  # (bf16 AdamW at 1e-2 diverges at d 2048)


def _rope(seq: int, head_dim: int, device, dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def _rope_torch(t, cos, sin):
    """Rotate-half RoPE on (B, S, H, D) with (S, D / 2) tables (tilewright.apply_rotary's convention)."""
    half = t.shape[-1] // 2
    c, s = cos[:, None, :], sin[:, None, :]
    t1, t2 = t[..., :half], t[..., half:]
    return torch.cat((t1 * c - t2 * s, t2 * c + t1 * s), dim=-1)


class Layer(nn.Module):
    """One decoder layer; ``impl`` "torch" or "tilewright" (same parameter names and shapes)."""

    def __init__(self, dims: Dims, impl: str, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype, "bias": False}
        d, hd = dims.d_model, dims.head_dim
        self.dims, self.impl = dims, impl
        self.attn_norm = nn.Parameter(torch.ones(d, device=device, dtype=dtype))
        self.ffn_norm = nn.Parameter(torch.ones(d, device=device, dtype=dtype))
        if impl == "tilewright":
            import tilewright

            self.wq = tilewright.nn.Linear(d, dims.n_heads * hd, **kw)
            self.wk = tilewright.nn.Linear(d, dims.n_kv_heads * hd, **kw)
            self.wv = tilewright.nn.Linear(d, dims.n_kv_heads * hd, **kw)
            self.wo = tilewright.nn.Linear(dims.n_heads * hd, d, **kw)
            self.w_gate = tilewright.nn.Linear(d, dims.ffn, **kw)
            self.w_up = tilewright.nn.Linear(d, dims.ffn, **kw)
            self.w_down = tilewright.nn.Linear(dims.ffn, d, **kw)
        else:
            self.wq = nn.Linear(d, dims.n_heads * hd, **kw)
            self.wk = nn.Linear(d, dims.n_kv_heads * hd, **kw)
            self.wv = nn.Linear(d, dims.n_kv_heads * hd, **kw)
            self.wo = nn.Linear(dims.n_heads * hd, d, **kw)
            self.w_gate = nn.Linear(d, dims.ffn, **kw)
            self.w_up = nn.Linear(d, dims.ffn, **kw)
            self.w_down = nn.Linear(dims.ffn, d, **kw)

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        hd, eps = self.dims.head_dim, 1e-6
        if self.impl == "tilewright":
            import tilewright

            # One norm weight read by the projections that share it (no duplicate parameters). Plain weights (FSDP2
            # gathers them into plain tensors for the forward): rms_norm_linears - in training one norm pass, and one
            # norm backward, for all of q / k / v (gate / up), where a fused call per module normalised the same x
            # once per weight (H200, fwd + bwd: 34.75 -> 33.58 ms a step under FSDP2 on two GPUs, torch 27.88).
            # Under tensor parallelism the projections' weights are column-sharded DTensors and each module keeps
            # its own fused call on the rank's shards: the (replicated) activations and norm weight join them as
            # Replicate DTensors - once for the projections that share them, so their input gradients (Partial sums)
            # add up locally and are all-reduced once, where torch's ColwiseParallel wraps each module's input and
            # all-reduces each gradient - and the rank keeps its output columns.
            def projections(mods, h, g):
                w = mods[0].weight
                if not is_dtensor(w):
                    return list(tilewright.rms_norm_linears(h, g, [m.weight for m in mods], eps=eps))
                from torch.distributed.tensor import DTensor, Replicate

                h, g = (DTensor.from_local(t, w.device_mesh, [Replicate()], run_check=False) for t in (h, g))
                return [tilewright.rms_norm_linear(h, g, m.weight, None, eps=eps).to_local() for m in mods]

            q, k, v = projections((self.wq, self.wk, self.wv), x, self.attn_norm)
            q = tilewright.apply_rotary(q.view(B, S, -1, hd), cos, sin)
            k = tilewright.apply_rotary(k.view(B, S, -1, hd), cos, sin)
            v = v.view(B, S, -1, hd)
            o = tilewright.flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
            h = self.wo(o.transpose(1, 2).reshape(B, S, -1), residual=x)
            gate, up = projections((self.w_gate, self.w_up), h, self.ffn_norm)
            return self.w_down(tilewright.swiglu(gate, up), residual=h)
        n = F.rms_norm(x, (x.shape[-1],), self.attn_norm, eps)
        q = _rope_torch(self.wq(n).view(B, S, -1, hd), cos, sin)
        k = _rope_torch(self.wk(n).view(B, S, -1, hd), cos, sin)
        v = self.wv(n).view(B, S, -1, hd)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=True)
        h = x + self.wo(o.transpose(1, 2).reshape(B, S, -1))
        n = F.rms_norm(h, (h.shape[-1],), self.ffn_norm, eps)
        return h + self.w_down(F.silu(self.w_gate(n)) * self.w_up(n))


class Model(nn.Module):
    def __init__(self, dims: Dims, impl: str, device=None, dtype=None):
        super().__init__()
        self.dims = dims
        self.embed = nn.Embedding(dims.vocab, dims.d_model, device=device, dtype=dtype)
        self.layers = nn.ModuleList(Layer(dims, impl, device, dtype) for _ in range(dims.layers))
        self.norm = nn.Parameter(torch.ones(dims.d_model, device=device, dtype=dtype))
        self.head = nn.Linear(dims.d_model, dims.vocab, bias=False, device=device, dtype=dtype)

    def forward(self, tokens):
        x = self.embed(tokens)
        cos, sin = _rope(tokens.shape[1], self.dims.head_dim, x.device, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(F.rms_norm(x, (x.shape[-1],), self.norm, 1e-6))


MODES = ("fsdp", "tp", "fsdp+tp")


def make_mesh(mode: str, device_type: str, world: int):
    """The device mesh of ``mode``: 1-D over every rank, or for ``fsdp+tp`` 2-D (data-parallel groups x 2-way
    tensor parallel; the TP pairs are neighbouring ranks, which share the fastest links)."""
    from torch.distributed.device_mesh import init_device_mesh

    if mode == "fsdp+tp":
        if world % 2 or world < 4:
            raise ValueError(f"mode fsdp+tp: needs an even world size of at least 4 (2-way TP x data parallel), "
                             f"got {world}")
        return init_device_mesh(device_type, (world // 2, 2), mesh_dim_names=("dp", "tp"))
    return init_device_mesh(device_type, (world,))


def parallelize(model: Model, mode: str, mesh) -> Model:
    """FSDP2 (``fully_shard`` per layer, then the model), tensor parallelism over a 1-D ``mesh``, or both
    (``fsdp+tp``: TP over the mesh's "tp" dimension, then FSDP2 over "dp" - the usual 2-D layout)."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    tp_mesh, dp_mesh = (mesh["tp"], mesh["dp"]) if mode == "fsdp+tp" else (mesh, mesh)
    if mode in ("tp", "fsdp+tp"):
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        plan = {name: ColwiseParallel() for name in ("wq", "wk", "wv", "w_gate", "w_up")}
        plan.update({name: RowwiseParallel() for name in ("wo", "w_down")})
        for layer in model.layers:
            # heads and FFN columns per rank (the layer's views size heads from the local width); the norm weights
            # stay plain tensors, the same on every rank (their gradients arrive all-reduced through the
            # column-parallel inputs' backward)
            parallelize_module(layer, tp_mesh, plan)
    if mode in ("fsdp", "fsdp+tp"):
        from torch.distributed.fsdp import fully_shard

        for layer in model.layers:
            fully_shard(layer, mesh=dp_mesh)
        fully_shard(model, mesh=dp_mesh)
    return model


def _adamw(model: nn.Module, lr: float):
    """AdamW as a training loop runs it - torch's multi-tensor (foreach) path - with DTensor and plain parameters in
    groups of their own: one foreach call cannot mix them (tensor parallelism leaves the norm weights, embedding and
    head plain). Until session 22 the bench ran the per-parameter loop (foreach=False): host work the same for both
    builds, added to steps that were host-bound already (H200: a TP step's forward and backward alone took 52-98 ms
    of wall against ~12 ms of kernels), which pulled both builds' tokens/s together."""
    groups: dict[bool, list] = {}
    for p in model.parameters():
        groups.setdefault(is_dtensor(p), []).append(p)
    return torch.optim.AdamW([{"params": ps} for ps in groups.values()], lr=lr, foreach=True)


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def train(mode: str, dims: Dims, steps: int, device, dtype, seed: int = 0, lr: float = 1e-2,
          same_batch: bool = False, block: int = 5) -> dict:
    """Both builds under ``mode`` on the initialised process group, same initial weights, same batches (one batch
    repeated with ``same_batch``, so the loss must fall): per-step losses and tokens/s (this rank's view; every rank
    sees the same losses).

    The two builds train side by side, ``block`` steps of one then ``block`` of the other (the first of each pair
    alternating), each with its own optimizer and the same batch sequence. Why: the steps are host-bound at the
    bench's sizes, and the host's speed drifts within a call - run one build's 50 steps after the other's, two
    consecutive runs on one H200 host gave 0.80x and 0.99x (FSDP2, 2026-11-29); interleaved, a drift falls on both."""
    import torch.distributed as dist
    mesh = make_mesh(mode, device.type, dist.get_world_size())
    torch.manual_seed(seed)
    ref = Model(dims, "torch", device, dtype)
    ours = Model(dims, "tilewright", device, dtype)
    ours.load_state_dict(ref.state_dict())
    runs = {}
    for name, model in (("torch", ref), ("tilewright", ours)):
        model = parallelize(model, mode, mesh)
        runs[name] = {"model": model, "opt": _adamw(model, lr), "batch": None, "losses": [], "tokens": 0,
                      "elapsed": 0.0, "gen": torch.Generator(device="cpu").manual_seed(seed + 1)}

    def one_step(run, step):
        model, opt = run["model"], run["opt"]
        if step == 0 or not same_batch:
            run["batch"] = torch.randint(0, dims.vocab, (dims.batch, dims.seq + 1), generator=run["gen"]).to(device)
        batch = run["batch"]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(_local(logits).float().reshape(-1, dims.vocab), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.item()  # (a sync)
        if step >= min(3, steps - 1):  # after warm-up: compiles, tuning
            run["elapsed"] += time.perf_counter() - t0
            run["tokens"] += dims.batch * dims.seq
        run["losses"].append(value)

    block = max(1, int(block))
    order = ["torch", "tilewright"]
    for first in range(0, steps, block):
        for name in order:
            for step in range(first, min(first + block, steps)):
                one_step(runs[name], step)
        order.reverse()
    return {name: {"losses": run["losses"],
                   "tokens_per_s": run["tokens"] / run["elapsed"] if run["elapsed"] else math.nan}
            for name, run in runs.items()}


def main(argv=None) -> None:
    """``torchrun --nproc-per-node N -m tilewright.bench.parallel --mode fsdp|tp|fsdp+tp [--steps 50] [--csv PATH]``."""
    import torch.distributed as dist

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=MODES, required=True, help="fsdp+tp: 2-D, needs 4+ ranks (an even number)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--size", choices=tuple(SIZES), default="llama",
                   help="model widths on a GPU (default: llama, d 2048 x 4 layers; the CPU runs tiny ones)")
    p.add_argument("--csv", default=None)
    p.add_argument("--block", type=int, default=5,
                   help="steps of one build before the other's (the two train interleaved; default 5)")
    args = p.parse_args(argv)
    if args.block < 1:
        p.error(f"--block {args.block}: expected a positive number of steps")
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dims = SIZES[args.size] if cuda else TINY
    dtype = torch.bfloat16 if cuda else torch.float32
    res = train(args.mode, dims, args.steps, device, dtype, lr=LEARNING_RATES[args.size], block=args.block)
    if rank == 0:
        t, w = res["torch"], res["tilewright"]
        worst = max(abs(a - b) / max(abs(a), 1e-6) for a, b in zip(t["losses"], w["losses"]))
        card = torch.cuda.get_device_name() if cuda else "cpu"
        print(f"{args.mode} x {dist.get_world_size()}, {args.size} {dims} ({card}): "
              f"final loss torch {t['losses'][-1]:.4f} tilewright {w['losses'][-1]:.4f}, worst relative loss gap "
              f"{worst:.2e}; tokens/s torch {t['tokens_per_s']:.0f} tilewright {w['tokens_per_s']:.0f} "
              f"({w['tokens_per_s'] / t['tokens_per_s']:.3f}x)")
        if args.csv:
            with open(args.csv, "w") as f:
                f.write("mode,world,size,device,step,torch_loss,tilewright_loss,torch_tokens_per_s,"
                        "tilewright_tokens_per_s\n")
                name = torch.cuda.get_device_name() if cuda else "cpu"
                for i, (a, b) in enumerate(zip(t["losses"], w["losses"])):
                    f.write(f"{args.mode},{dist.get_world_size()},{args.size},{name},{i},{a},{b},"
                            f"{t['tokens_per_s']},{w['tokens_per_s']}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
