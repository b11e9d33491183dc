"""Host-side diagnosis of the model steps: launch-only host time (GPU kept busy by a sleep kernel) for forward and
backward, wall drift over many steps, synchronizing calls, and a cProfile of tilewright's steps."""
import cProfile, io, pstats, statistics, sys, time, warnings
import torch
from tilewright.bench import model

tags = sys.argv[1].split(",") if len(sys.argv) > 1 else ["vit-prefill", "llama-small"]
SLEEP = int(40e6)  # ~20 ms of GPU sleep: the host never waits on the queue


def host_times(blk, x, n=15):
    fw, bw = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        torch.cuda._sleep(SLEEP)
        t0 = time.perf_counter()
        y = blk(x)
        t1 = time.perf_counter()
        y.sum().backward()
        t2 = time.perf_counter()
        fw.append((t1 - t0) * 1e3); bw.append((t2 - t1) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(fw), statistics.median(bw)


def gpu_time(blk, x, n=10):
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        blk(x).sum().backward()
    e1.record(); torch.cuda.synchronize()
    return e0.elapsed_time(e1) / n


def wall_chunks(blk, x, chunks=6, per=20):
    out = []
    for _ in range(chunks):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(per):
            blk(x).sum().backward()
        torch.cuda.synchronize(); out.append((time.perf_counter() - t0) / per * 1e3)
    return out


for tag in tags:
    case = [c for c in model.SUITES["default"] if c.tag == tag][0]
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x = model.make_input(case, "cuda", torch.bfloat16)
    for blk in (ref, ours, ref, ours):
        for _ in range(5): blk(x).sum().backward()
    torch.cuda.synchronize()
    for name, blk in (("torch", ref), ("tilewright", ours), ("torch", ref), ("tilewright", ours)):
        f, b = host_times(blk, x)
        g = gpu_time(blk, x)
        w = wall_chunks(blk, x)
        print(f"{tag:12s} {name:10s} host fwd {f:6.3f} ms bwd {b:6.3f} ms | GPU/step {g:6.3f} ms | wall/step "
              + " ".join(f"{v:6.3f}" for v in w), flush=True)
    # synchronizing calls in one tilewright step
    torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours(x).sum().backward(); torch.cuda._sleep(1)
    torch.cuda.set_sync_debug_mode(0)
    syncs = [str(w.message)[:200] for w in caught if "synchroniz" in str(w.message).lower()]
    print(f"{tag}: {len(syncs)} synchronizing calls in one tilewright step", syncs[:3], flush=True)
    # cProfile of 30 tilewright steps with the GPU busy (host cost only)
    torch.cuda.synchronize(); torch.cuda._sleep(SLEEP * 6)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(30):
        ours(x).sum().backward()
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats("tottime").print_stats(40)
    st.sort_stats("cumulative").print_stats(45)
    print(f"----- cProfile {tag} tilewright, 30 steps\n" + s.getvalue(), flush=True)
    del ref, ours, x
    torch.cuda.empty_cache()
