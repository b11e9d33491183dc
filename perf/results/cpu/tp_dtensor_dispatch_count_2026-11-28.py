"""Count, per TP training step on two gloo CPU ranks, collectives and DTensor dispatches: torch vs tilewright."""
import os, sys, time, collections, torch, torch.distributed as dist, torch.nn.functional as F
import torch.multiprocessing as mp

def worker(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TILEWRIGHT_ATEN_BELOW="0")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from tilewright.bench import parallel as P
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor import DTensor
    dims = P.Dims(d_model=64, n_heads=4, n_kv_heads=2, ffn=128, layers=1, vocab=64, seq=16, batch=2)
    mesh = P.make_mesh("tp", "cpu", 2)
    torch.manual_seed(0)
    ref = P.Model(dims, "torch", torch.device("cpu"), torch.float32)
    ours = P.Model(dims, "tilewright", torch.device("cpu"), torch.float32)
    ours.load_state_dict(ref.state_dict())
    batch = torch.randint(0, dims.vocab, (dims.batch, dims.seq + 1))
    # count DTensor.__torch_dispatch__ calls by wrapping the dispatcher
    counts = collections.Counter()
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(isinstance(a, DTensor) for a in tree_leaves((args, kwargs or {}))):
                counts[str(func)] += 1
            return func(*args, **(kwargs or {}))
    for name, m in (("torch", ref), ("tilewright", ours)):
        m = P.parallelize(m, "tp", mesh)
        def step():
            logits = m(batch[:, :-1])
            loss = F.cross_entropy(P._local(logits).float().reshape(-1, dims.vocab), batch[:, 1:].reshape(-1))
            loss.backward()
            for p in m.parameters(): p.grad = None
        step(); step()
        counts.clear()
        with CommDebugMode() as comm:
            with Count():
                step()
        if rank == 0:
            print(f"== {name}: collectives {comm.get_total_counts()} {dict(comm.get_comm_counts())}")
            print(f"   DTensor dispatches {sum(counts.values())}: " + ", ".join(f"{k.split('.')[-2] if '.' in k else k}:{v}" for k, v in counts.most_common()))
    dist.destroy_process_group()

if __name__ == "__main__":
    import socket
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    mp.spawn(worker, args=(port,), nprocs=2)
