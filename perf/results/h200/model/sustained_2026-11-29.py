"""Burst vs sustained kernel time of the Llama B8 x S2048 forward's GEMMs, tilewright vs torch, with the SM clock and
board power nvidia-smi reports while each runs.

Why: in kernels_2026-11-29.py's runs the tilewright forward's kernels took 2.44 ms a step under the profiler (5 steps
after a sync) but 2.61-2.75 ms a step fed back to back (every kernel 12-20% slower), while torch.compile's stayed
within 1.3% (2.79 / 2.75). If our kernels draw more power per FLOP, the board's power limit lowers their clock under
sustained load - and every burst-timed benchmark of ours (CUDA-graph replays after 0.25 s idle) overstates them.

Per (shape, provider): a CUDA graph of 10 calls; burst = median of 5 replays after 0.5 s idle each; sustained = the
graph replayed back to back for 3 s, the last 1.5 s timed, while a sampler thread reads `nvidia-smi
--query-gpu=clocks.sm,power.draw` every 100 ms (medians over the timed part). Providers: torch (F.rms_norm + F.linear,
F.linear, F.linear + residual add) and tilewright (rms_norm_linear / linear(..., residual=) under no_grad, the
router's choice; the norm weight folded as in inference). `PYTHONPATH=src python <this file>`."""
import statistics
import subprocess
import threading
import time

import torch
import torch.nn.functional as F

import tilewright

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
M, D, FF, QKV = 16384, 2048, 5632, 3072
print(torch.cuda.get_device_name(), torch.__version__, flush=True)


def rnd(*shape, scale=1.0):
    return (scale * torch.randn(*shape, device=dev)).to(dt)


x, g = rnd(M, D), (1 + 0.1 * torch.randn(D, device=dev)).to(dt)
w_qkv, w_gu = rnd(QKV, D, scale=D ** -0.5), rnd(2 * FF, D, scale=D ** -0.5)
a_o, w_o = rnd(M, D), rnd(D, D, scale=D ** -0.5)
a_d, w_d = rnd(M, FF), rnd(D, FF, scale=FF ** -0.5)
res = rnd(M, D)
CASES = {
    "norm+qkv 16384x3072x2048": (lambda: F.linear(F.rms_norm(x, (D,), g, 1e-5), w_qkv),
                                 lambda: tilewright.rms_norm_linear(x, g, w_qkv, eps=1e-5)),
    "norm+gate_up 16384x11264x2048": (lambda: F.linear(F.rms_norm(x, (D,), g, 1e-5), w_gu),
                                      lambda: tilewright.rms_norm_linear(x, g, w_gu, eps=1e-5)),
    "wo+res 16384x2048x2048": (lambda: F.linear(a_o, w_o) + res, lambda: tilewright.linear(a_o, w_o, residual=res)),
    "down+res 16384x2048x5632": (lambda: F.linear(a_d, w_d) + res, lambda: tilewright.linear(a_d, w_d, residual=res)),
}


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.rows, self.stop = [], threading.Event()

    def run(self):
        p = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                              "-lms", "100"], stdout=subprocess.PIPE, text=True)
        for line in p.stdout:
            try:
                self.rows.append((time.perf_counter(), *map(float, line.split(","))))
            except ValueError:
                pass
            if self.stop.is_set():
                break
        p.kill()


def graph_of(fn, n=10):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        for _ in range(n):
            fn()
    return graph


def timed(graph, reps):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        graph.replay()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / reps / 10 * 1e3  # us per call


sampler = Sampler()
sampler.start()
time.sleep(1.0)
for name, (torch_fn, tw_fn) in CASES.items():
    for prov, fn in (("torch", torch_fn), ("tilewright", tw_fn)):
        graph = graph_of(fn)
        bursts = []
        for _ in range(5):
            torch.cuda.synchronize()
            time.sleep(0.5)
            bursts.append(timed(graph, 1))
        # sustained: ~1.5 s of warm-up replays, then ~1.5 s timed
        per = bursts[2] * 10 * 1e-6
        timed(graph, max(1, int(1.5 / per)))
        t0 = time.perf_counter()
        sus = timed(graph, max(1, int(1.5 / per)))
        t1 = time.perf_counter()
        inside = [r for r in sampler.rows if t0 <= r[0] <= t1]
        clk = statistics.median(r[1] for r in inside) if inside else float("nan")
        pwr = statistics.median(r[2] for r in inside) if inside else float("nan")
        print(f"{name:32s} {prov:10s} burst {statistics.median(bursts):8.1f} us  sustained {sus:8.1f} us "
              f"({sus / statistics.median(bursts):.3f}x)  SM clock {clk:6.0f} MHz  power {pwr:5.0f} W", flush=True)
        del graph
        time.sleep(1.0)
sampler.stop.set()
