"""FSDP2 x 2, llama widths: wall per training step (fwd + bwd, no optimizer) of the torch and tilewright builds, then
cProfile of 5 steps on rank 0 (top functions by own time and by cumulative time). Issue 18's FSDP2 step is
host-bound; this says where tilewright's extra host time goes."""
import cProfile, io, os, pstats, time
import torch, torch.distributed as dist, torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from tilewright.bench import parallel as P
dist.init_process_group("nccl"); rank = dist.get_rank()
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"])); torch.cuda.set_device(dev)
dims = P.LLAMA
mesh = init_device_mesh("cuda", (2,))
torch.manual_seed(0)
ref = P.Model(dims, "torch", dev, torch.bfloat16); ours = P.Model(dims, "tilewright", dev, torch.bfloat16)
ours.load_state_dict(ref.state_dict())
batch = torch.randint(0, dims.vocab, (dims.batch, dims.seq + 1), device=dev)
for name, m in (("torch", ref), ("tilewright", ours)):
    m = P.parallelize(m, "fsdp", mesh)
    def step():
        logits = m(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, dims.vocab), batch[:, 1:].reshape(-1))
        loss.backward()
        for p in m.parameters(): p.grad = None
    for _ in range(4): step()
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(8): step()
    torch.cuda.synchronize(); wall = (time.perf_counter() - t0) / 8 * 1e3
    # host time of the forward alone and of the step, no sync inside (queue as far ahead as the host can)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(4):
        logits = m(batch[:, :-1]); loss = F.cross_entropy(logits.float().reshape(-1, dims.vocab), batch[:, 1:].reshape(-1))
        t1 = time.perf_counter(); loss.backward(); t2 = time.perf_counter()
        for p in m.parameters(): p.grad = None
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    if rank == 0: pr.enable()
    for _ in range(5): step()
    torch.cuda.synchronize()
    if rank == 0:
        pr.disable()
        print(f"===== fsdp {name}: wall {wall:.2f} ms/step (last forward host {1e3*(t1-t0)/4:.2f} ms/step avg incl. backward of earlier steps; last backward call host {1e3*(t2-t1):.2f} ms)", flush=True)
        for key, n in (("tottime", 45), ("cumulative", 70)):
            s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats(key).print_stats(n); print(s.getvalue()[-14000:], flush=True)
dist.destroy_process_group()
