"""Host time of the small blocks' training step, split: forward (autograd recording) and backward() host time
(no sync inside), torch vs tilewright interleaved; then cProfile of tilewright's steps (tottime and cumulative)."""
import cProfile, io, pstats, statistics, sys, time
import torch
from tilewright.bench import model

def split_times(blk, x, n=40):
    f, b, w = [], [], []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = blk(x)
        loss = y.sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        f.append((t1 - t0) * 1e6); b.append((t2 - t1) * 1e6); w.append((t3 - t0) * 1e6)
    return statistics.median(f), statistics.median(b), statistics.median(w)

for case in model.SUITES["default"]:
    if case.size != "small":
        continue
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x = model.make_input(case, "cuda", torch.bfloat16)
    for blk in (ref, ours):
        for _ in range(5):
            blk(x).sum().backward()
    for r in range(3):
        for name, blk in (("torch", ref), ("tilewright", ours)):
            fh, bh, wall = split_times(blk, x)
            print(f"{case.block}-small round {r} {name:10s}: fwd host {fh:7.0f} us | backward() host {bh:7.0f} us | "
                  f"step wall (synced) {wall:7.0f} us", flush=True)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(50):
        ours(x).sum().backward()
    torch.cuda.synchronize()
    pr.disable()
    for key, n in (("tottime", 45), ("cumulative", 60)):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(key).print_stats(n)
        print(f"### {case.block} cProfile by {key} (50 steps)\n" + s.getvalue()[:9000], flush=True)
