"""Host cost of each op of the Llama B1 x S512 and ViT-L B1 x S512 forwards (torch.no_grad, issue 14's host-bound
rows), tilewright's ops against the torch ops they replace: N calls queued with the GPU held busy by a sleep kernel
(the host never waits on the launch queue), median of 7 chunks, us per call. Plus a cProfile of 200 tilewright
forwards sorted by own time. `PYTHONPATH=src python perf/results/h200/model/host_per_op_2026-11-28.py`."""
import cProfile, io, pstats, statistics, time, warnings
import torch
import torch.nn.functional as F
import tilewright
from tilewright.bench import model
warnings.filterwarnings("ignore")
torch.backends.cuda.matmul.allow_tf32 = False
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
N, CHUNKS = 100, 7


def host_us(fn):
    for _ in range(20):
        fn()
    out = []
    for _ in range(CHUNKS):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(3e7))  # ~15-20 ms of GPU work ahead of the calls
        t0 = time.perf_counter()
        for _ in range(N):
            fn()
        out.append((time.perf_counter() - t0) / N * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


with torch.no_grad():
    for tag in ("llama-small", "vit-small"):
        case = [c for c in model.SUITES["default"] if c.tag == tag][0]
        ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
        x = model.make_input(case, "cuda", torch.bfloat16)
        rows = []
        if tag.startswith("llama"):
            c = ours.dims
            B, S, _ = x.shape
            qkv_t = ref.wqkv(ref.attn_norm(x))
            heads = ours.attn_norm_qkv(x).view(B, S, c.n_heads + 2 * c.n_kv_heads, c.head_dim)
            qk, v = heads.split([c.n_heads + c.n_kv_heads, c.n_kv_heads], dim=2)
            q, k = tilewright.apply_rotary(qk, ours.rope_cos[:, 0], ours.rope_sin[:, 0]).split(
                [c.n_heads, c.n_kv_heads], dim=2)
            qt, kt, vt = ref._qkv_heads(qkv_t)
            o = tilewright.flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
            o2 = o.transpose(1, 2).reshape(B, S, -1)
            h = ours.wo(o2, residual=x)
            gu = ours.ffn_norm_gate_up(h)
            act = tilewright.swiglu(gu)
            rows = [
                ("norm+qkv", lambda: ours.attn_norm_qkv(x), lambda: ref.wqkv(ref.attn_norm(x))),
                ("rotary", lambda: tilewright.apply_rotary(qk, ours.rope_cos[:, 0], ours.rope_sin[:, 0]),
                 lambda: ref._qkv_heads(qkv_t)),
                ("attention", lambda: tilewright.flash_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                 v.transpose(1, 2), causal=True),
                 lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)),
                ("wo+residual", lambda: ours.wo(o2, residual=x), lambda: x + ref.wo(o2)),
                ("norm+gate_up", lambda: ours.ffn_norm_gate_up(h), lambda: ref.w_gate_up(ref.ffn_norm(h))),
                ("swiglu", lambda: tilewright.swiglu(gu), lambda: (lambda g, u: F.silu(g) * u)(*gu.chunk(2, -1))),
                ("down+residual", lambda: ours.w_down(act, residual=h), lambda: h + ref.w_down(act)),
            ]
        else:
            xx = ours.patch_embed(x, residual=ours.pos_embed)
            n1 = ours.norm1(xx)
            qkv = ours.qkv(n1)
            q, k, v = ours._heads(qkv)
            o2 = tilewright.flash_attention(q, k, v, causal=False).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
            f1 = ours.fc1(n1)
            rows = [
                ("patch+pos", lambda: ours.patch_embed(x, residual=ours.pos_embed),
                 lambda: ref.patch_embed(x) + ref.pos_embed),
                ("norm1", lambda: ours.norm1(xx), lambda: ref.norm1(xx)),
                ("qkv", lambda: ours.qkv(n1), lambda: ref.qkv(n1)),
                ("attention", lambda: tilewright.flash_attention(q, k, v, causal=False),
                 lambda: F.scaled_dot_product_attention(q, k, v)),
                ("proj+residual", lambda: ours.proj(o2, residual=xx), lambda: xx + ref.proj(o2)),
                ("fc1+gelu", lambda: ours.fc1(n1), lambda: F.gelu(ref.fc1(n1))),
                ("fc2+residual", lambda: ours.fc2(f1, residual=xx), lambda: xx + ref.fc2(f1)),
            ]
        rows.append(("whole forward", lambda: ours(x), lambda: ref(x)))
        tot_o = tot_t = 0.0
        for name, fo, ft in rows:
            a, b = host_us(fo), host_us(ft)
            if name != "whole forward":
                tot_o, tot_t = tot_o + a, tot_t + b
            print(f"{tag:12s} {name:14s} tilewright {a:7.1f} us   torch {b:7.1f} us   ratio {a / b:5.2f}", flush=True)
        print(f"{tag:12s} {'sum of ops':14s} tilewright {tot_o:7.1f} us   torch {tot_t:7.1f} us", flush=True)
        torch.cuda.synchronize(); torch.cuda._sleep(int(2e8))
        pr = cProfile.Profile(); pr.enable()
        for _ in range(200):
            ours(x)
        pr.disable(); torch.cuda.synchronize()
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
        print(f"----- cProfile {tag} tilewright forward x200 (tottime)\n" + s.getvalue(), flush=True)
        del ref, ours, x
        torch.cuda.empty_cache()
