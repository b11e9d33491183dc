import sys, time
sys.path.insert(0, "tests")
from test_attention import attention_aot_job
from tilewright.triton_kernels.aot import compile_reports
cfgs = [(32, 64, 4, 3), (32, 64, 4, 2), (32, 64, 4, 1), (16, 64, 4, 3), (16, 64, 4, 2), (16, 128, 8, 3),
        (32, 128, 8, 3), (32, 128, 8, 2), (64, 64, 4, 2), (64, 128, 8, 2), (16, 32, 4, 3), (32, 32, 4, 3)]
t0 = time.time()
for causal in (True, False):
    reps = compile_reports([attention_aot_job("dkdv", 128, c, causal=causal) for c in cfgs])
    for c, r in zip(cfgs, reps):
        print(f"causal={causal} {c}: regs {r.registers} spill {r.spill_bytes} hgmma {r.has('HGMMA')}", flush=True)
print(f"{time.time() - t0:.0f}s")
