"""Issue 17: fp32 rms_norm_linear on the GPU (reported OutOfResources: shared memory, M 199, N 192-4096)."""
import torch, traceback
import tilewright
from tilewright.reference import rms_norm_linear_reference
torch.manual_seed(0)
ok = fail = 0
for M in (199, 1, 4096):
    for N in (192, 1000, 4096):
        for K in (64, 123, 1024, 4096):
            try:
                x = torch.randn(M, K, device="cuda", requires_grad=True)
                g = (1 + 0.1 * torch.randn(K, device="cuda")).requires_grad_()
                w = (torch.randn(N, K, device="cuda") / K ** 0.5).requires_grad_()
                y = tilewright.rms_norm_linear(x, g, w, eps=1e-6)
                y.backward(torch.randn_like(y))
                ref = rms_norm_linear_reference(x.double(), g.double(), w.double(), None, 1e-6)
                own = torch.nn.functional.linear(torch.nn.functional.rms_norm(x, (K,), g, 1e-6), w)
                e, e0 = (y.double() - ref).abs().max().item(), (own.double() - ref).abs().max().item()
                good = e <= 2 * e0 + 1e-6
                ok += good; fail += not good
                if not good: print("ERR", M, N, K, e, e0)
            except Exception as ex:
                fail += 1
                print("EXC", M, N, K, type(ex).__name__, str(ex)[:300])
print("fp32 rms_norm_linear cases ok", ok, "failed", fail)
