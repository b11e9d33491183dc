"""(Second run, session 31: the bench's layer calls tilewright.rms_norm_linears; kind "tw_per_weight" is that layer
with the calls it made before - one rms_norm_linear per weight - for the A/B.)

Where the tilewright FSDP2 step's extra time comes from (issue 18): training-step wall (fwd + bwd, grads dropped, a
sync a step; median of 3 rounds of 8 steps) of four builds - torch, tilewright as the bench builds it (q / k / v and
gate / up as separate RMSNorm-linears: five norm passes a layer), tilewright with fused q|k|v and gate|up weights (two
RMSNorm-linears a layer, as bench.model builds it), tilewright with the norm computed once by torch (F.rms_norm +
tilewright.linear: the call count of torch's layer) - each with and without fully_shard, interleaved."""
import os, statistics, time
import torch, torch.distributed as dist, torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
import tilewright
from tilewright.bench import parallel as P
dist.init_process_group("nccl"); rank = dist.get_rank()
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"])); torch.cuda.set_device(dev)
dims = P.LLAMA


class FusedLayer(nn.Module):
    def __init__(self, dims, device, dtype, norm_once=False):
        super().__init__()
        d, hd = dims.d_model, dims.head_dim
        kw = {"device": device, "dtype": dtype, "bias": False}
        self.dims, self.norm_once = dims, norm_once
        self.attn_norm = nn.Parameter(torch.ones(d, device=device, dtype=dtype))
        self.ffn_norm = nn.Parameter(torch.ones(d, device=device, dtype=dtype))
        self.w_qkv = tilewright.nn.Linear(d, (dims.n_heads + 2 * dims.n_kv_heads) * hd, **kw)
        self.wo = tilewright.nn.Linear(dims.n_heads * hd, d, **kw)
        self.w_gate_up = tilewright.nn.Linear(d, 2 * dims.ffn, **kw)
        self.w_down = tilewright.nn.Linear(dims.ffn, d, **kw)

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        hd, dm = self.dims.head_dim, self.dims
        if self.norm_once:
            qkv = tilewright.linear(F.rms_norm(x, (x.shape[-1],), self.attn_norm, 1e-6), self.w_qkv.weight)
        else:
            qkv = tilewright.rms_norm_linear(x, self.attn_norm, self.w_qkv.weight, None, eps=1e-6)
        q, k, v = qkv.split([dm.n_heads * hd, dm.n_kv_heads * hd, dm.n_kv_heads * hd], dim=-1)
        q = tilewright.apply_rotary(q.view(B, S, -1, hd), cos, sin)
        k = tilewright.apply_rotary(k.view(B, S, -1, hd), cos, sin)
        o = tilewright.flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.view(B, S, -1, hd).transpose(1, 2),
                                       causal=True)
        h = self.wo(o.transpose(1, 2).reshape(B, S, -1), residual=x)
        if self.norm_once:
            gu = tilewright.linear(F.rms_norm(h, (h.shape[-1],), self.ffn_norm, 1e-6), self.w_gate_up.weight)
        else:
            gu = tilewright.rms_norm_linear(h, self.ffn_norm, self.w_gate_up.weight, None, eps=1e-6)
        gate, up = gu.chunk(2, dim=-1)
        return self.w_down(tilewright.swiglu(gate, up), residual=h)


_shared = tilewright.rms_norm_linears
PER_WEIGHT = [False]


def _switchable(x, g, weights, biases=None, *, eps=1e-6, backend=None):
    if PER_WEIGHT[0]:
        return tuple(tilewright.rms_norm_linear(x, g, w, None, eps=eps) for w in weights)
    return _shared(x, g, weights, biases, eps=eps, backend=backend)


tilewright.rms_norm_linears = _switchable


def build(kind):
    torch.manual_seed(0)
    m = P.Model(dims, "torch" if kind == "torch" else "tilewright", dev, torch.bfloat16)
    if kind in ("tw_fused", "tw_norm_once"):  # (tw_separate / tw_per_weight: the bench's layer)
        m.layers = nn.ModuleList(FusedLayer(dims, dev, torch.bfloat16, kind == "tw_norm_once") for _ in range(dims.layers))
    return m


batch = torch.randint(0, dims.vocab, (dims.batch, dims.seq + 1), device=dev)
mesh = init_device_mesh("cuda", (2,))
models = {}
KINDS = ("torch", "tw_separate", "tw_per_weight", "tw_fused", "tw_norm_once")
for kind in KINDS:
    for fsdp in (False, True):
        m = build(kind)
        models[(kind, fsdp)] = P.parallelize(m, "fsdp", mesh) if fsdp else m


def step(m, kind=None):
    PER_WEIGHT[0] = kind == "tw_per_weight"
    logits = m(batch[:, :-1])
    loss = F.cross_entropy(logits.float().reshape(-1, dims.vocab), batch[:, 1:].reshape(-1))
    loss.backward()
    for p in m.parameters():
        p.grad = None


res = {k: [] for k in models}
for (kind, _), m in models.items():
    for _ in range(3):
        step(m, kind)
for rnd in range(3):
    for key, m in models.items():
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(8):
            step(m, key[0]); torch.cuda.synchronize()
        res[key].append((time.perf_counter() - t0) / 8 * 1e3)
# host time to queue one forward + backward with the GPU held busy first (a long matmul chain), no FSDP
x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
host = {}
for kind in KINDS:
    m = models[(kind, False)]
    vals = []
    for _ in range(3):
        torch.cuda.synchronize()
        for _ in range(30):
            x @ x  # ~45 ms of GPU work queued
        t0 = time.perf_counter(); step(m, kind); vals.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
    host[kind] = statistics.median(vals)
if rank == 0:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, llama dims {dims}, fwd+bwd (no optimizer)")
    base = {f: statistics.median(res[("torch", f)]) for f in (False, True)}
    for (kind, fsdp), v in res.items():
        med = statistics.median(v)
        print(f"{'fsdp' if fsdp else 'single'} {kind:13s} {med:7.2f} ms/step  ({base[fsdp] / med:.3f}x torch)  rounds "
              + " ".join(f"{t:.2f}" for t in v) + (f"  | host to queue a step (GPU busy, no FSDP) {host[kind]:.2f} ms" if not fsdp else ""))
dist.destroy_process_group()
