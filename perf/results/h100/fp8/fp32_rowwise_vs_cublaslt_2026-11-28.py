"""Issue 19: fp32-output rowwise scaled_mm - tilewright vs torch._scaled_mm (cuBLASLt) against a float64 reference
and against torch's emulated fp32 reference (what torch's tests compare to)."""
import torch, tilewright
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
torch.manual_seed(0)
for (M, N, K) in [(16, 32, 64), (256, 512, 1024), (1000, 3008, 1536), (512, 512, 8192), (2048, 2048, 16384)]:
    for fast in (False, True):
        a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn).t()
        sa = torch.rand(M, 1, device="cuda") + 0.5
        sb = torch.rand(1, N, device="cuda") + 0.5
        ref64 = (a.double() @ b.double()) * sa.double() * sb.double()
        emu32 = (a.float() @ b.float()) * sa * sb  # torch-test style emulation in fp32
        outs = {"torch": torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=fast),
                "tw": tilewright.scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=fast)}
        scale = ref64.abs().max().item()
        line = [f"{M}x{N}x{K} fast={int(fast)}"]
        for k, o in outs.items():
            e64 = (o.double() - ref64).abs()
            eem = (o - emu32).abs()
            bad = (eem > 2e-3 + 2e-3 * emu32.abs()).float().mean().item()
            line.append(f"{k}: max|e| vs f64 {e64.max().item():.3g} (rel {e64.max().item()/scale:.2e}) "
                        f"rms {e64.pow(2).mean().sqrt().item():.3g} | vs emu32 max {eem.max().item():.3g} "
                        f"frac>tol {bad:.4f}")
        d = (outs["torch"] - outs["tw"]).abs().max().item()
        print("  ".join(line) + f" | tw-torch max {d:.3g}", flush=True)
# K = 0 with -inf scales
a = torch.empty(8, 0, device="cuda").to(torch.float8_e4m3fn); b = torch.empty(16, 0, device="cuda").to(torch.float8_e4m3fn).t()
sa = torch.full((8, 1), float("-inf"), device="cuda"); sb = torch.full((1, 16), float("-inf"), device="cuda")
try:
    print("K=0 -inf torch", torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32).unique().tolist())
except Exception as e:
    print("K=0 torch raises", type(e).__name__, str(e)[:100])
print("K=0 -inf tw", tilewright.scaled_mm(a, b, sa, sb, out_dtype=torch.float32).unique().tolist())
