"""Where the host time of the Llama B1 x S512 tilewright forward goes *inside* the forward (torch.no_grad): the block's
forward statement by statement with perf_counter between them, 50 forwards queued per chunk with the GPU held busy
(the launch queue never fills: ~10 launches a forward), median of 7 chunks; the same for torch's block; then a
cProfile of 30 forwards (below the queue's depth). Follows host_per_op_2026-11-28.py, whose op-by-op sum (319 us)
was 96 us under the whole forward (415 us). `PYTHONPATH=src python perf/results/h200/model/host_in_forward_2026-11-28.py`"""
import cProfile, io, pstats, statistics, time, warnings
import torch
import torch.nn.functional as F
import tilewright
from tilewright.bench import model
warnings.filterwarnings("ignore")
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
N, CHUNKS = 50, 7


def timed_ours(blk, x, t):
    c = blk.dims
    t.append(time.perf_counter())
    B, S, _ = x.shape
    heads = blk.attn_norm_qkv(x).view(B, S, c.n_heads + 2 * c.n_kv_heads, c.head_dim)
    t.append(time.perf_counter())
    qk, v = heads.split([c.n_heads + c.n_kv_heads, c.n_kv_heads], dim=2)
    cos, sin = blk.rope_cos[:, 0], blk.rope_sin[:, 0]
    t.append(time.perf_counter())
    q, k = tilewright.apply_rotary(qk, cos, sin).split([c.n_heads, c.n_kv_heads], dim=2)
    t.append(time.perf_counter())
    o = tilewright.flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    t.append(time.perf_counter())
    h = blk.wo(o.transpose(1, 2).reshape(B, S, -1), residual=x)
    t.append(time.perf_counter())
    gu = blk.ffn_norm_gate_up(h)
    t.append(time.perf_counter())
    a = tilewright.swiglu(gu)
    t.append(time.perf_counter())
    y = blk.w_down(a, residual=h)
    t.append(time.perf_counter())
    return y


NAMES = ["norm+qkv", "split/views", "rotary", "attention", "wo+res", "norm+gate_up", "swiglu", "down+res"]
with torch.no_grad():
    case = [c for c in model.SUITES["default"] if c.tag == "llama-small"][0]
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x = model.make_input(case, "cuda", torch.bfloat16)
    for _ in range(20):
        ours(x); ref(x); timed_ours(ours, x, [])
    torch.cuda.synchronize()
    for rnd in range(2):
        parts, whole_o, whole_t, whole_timed = [], [], [], []
        for _ in range(CHUNKS):
            torch.cuda.synchronize(); torch.cuda._sleep(int(3e7))
            stamps = []
            for _ in range(N):
                t = []
                timed_ours(ours, x, t)
                stamps.append([b - a for a, b in zip(t, t[1:])])
            parts.append([statistics.median(col) * 1e6 for col in zip(*stamps)])
            torch.cuda.synchronize(); torch.cuda._sleep(int(3e7))
            t0 = time.perf_counter()
            for _ in range(N):
                ours(x)
            whole_o.append((time.perf_counter() - t0) / N * 1e6)
            torch.cuda.synchronize(); torch.cuda._sleep(int(3e7))
            t0 = time.perf_counter()
            for _ in range(N):
                ref(x)
            whole_t.append((time.perf_counter() - t0) / N * 1e6)
        med = [statistics.median(col) for col in zip(*parts)]
        print(f"round {rnd}: tilewright forward {statistics.median(whole_o):.1f} us, torch {statistics.median(whole_t):.1f}"
              f" us; statements: " + ", ".join(f"{n} {v:.1f}" for n, v in zip(NAMES, med))
              + f" (sum {sum(med):.1f})", flush=True)
    torch.cuda.synchronize(); torch.cuda._sleep(int(1e8))
    pr = cProfile.Profile(); pr.enable()
    for _ in range(30):
        ours(x)
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats("tottime").print_stats(35)
    st.sort_stats("cumulative").print_stats(40)
    print("----- cProfile llama-small tilewright forward x30\n" + s.getvalue(), flush=True)
