import torch, tilewright
from tilewright.ops.scaled_mm import quantize_fp8_reference
torch.manual_seed(2)
for xd in (torch.bfloat16, torch.float32):
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        for block in ((1, 128), (128, 128)):
            x = (torch.randn(1000, 1500, device="cuda") * torch.logspace(-4, 4, 1500, device="cuda")).to(xd)
            x[3, 7] = float("nan"); x[500, 1400] = float("inf")
            q, s = tilewright.quantize_fp8(x, block, dt)
            qr, sr = quantize_fp8_reference(x, block, dt)
            d = (q.view(torch.uint8) != qr.view(torch.uint8)).nonzero()
            print(xd, dt, block, "q differ", d.shape[0], "scales equal", torch.equal(s, sr), "scale diff",
                  (s != sr).sum().item())
            sf = sr.repeat_interleave(block[0], 0)[:1000].repeat_interleave(128, 1)[:, :1500]
            for i, j in d[:6].tolist():
                xf = x[i, j].float().item(); sc = sf[i, j].item()
                print(f"   [{i},{j}] x={xf!r} scale={sc!r} x/scale={xf/sc!r} (fp32 {(x[i,j].float()/sf[i,j]).item()!r}) "
                      f"q={q[i,j].float().item()!r} ({q.view(torch.uint8)[i,j].item():#x}) "
                      f"ref={qr[i,j].float().item()!r} ({qr.view(torch.uint8)[i,j].item():#x})")
