"""TP=2 llama-size model: torch.profiler of 3 training steps, torch vs tilewright modules (rank 0 prints)."""
import os, time, torch, torch.distributed as dist, torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity
from torch.distributed.device_mesh import init_device_mesh
from tilewright.bench import parallel as P
dist.init_process_group("nccl"); rank = dist.get_rank()
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"])); torch.cuda.set_device(dev)
mode = os.environ.get("MODE", "tp")
dims = P.LLAMA
mesh = init_device_mesh("cuda", (2,))
torch.manual_seed(0)
ref = P.Model(dims, "torch", dev, torch.bfloat16); ours = P.Model(dims, "tilewright", dev, torch.bfloat16)
ours.load_state_dict(ref.state_dict())
batch = torch.randint(0, dims.vocab, (dims.batch, dims.seq + 1), device=dev)
for name, m in (("torch", ref), ("tilewright", ours)):
    m = P.parallelize(m, mode, mesh)
    def step():
        logits = m(batch[:, :-1])
        loss = F.cross_entropy(P._local(logits).float().reshape(-1, dims.vocab), batch[:, 1:].reshape(-1))
        loss.backward()
        for p in m.parameters(): p.grad = None
    for _ in range(4): step()
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(5): step()
    torch.cuda.synchronize(); wall = (time.perf_counter() - t0) / 5 * 1e3
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3): step()
        torch.cuda.synchronize()
    if rank == 0:
        print(f"===== {mode} {name}: wall {wall:.2f} ms/step", flush=True)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=90), flush=True)
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=90), flush=True)
dist.destroy_process_group()
