"""Device sweep: Triton attention backward configs (dK/dV and dQ kernels) at model shapes vs SDPA backends.
usage: python scratch/attn_bwd_sweep.py OUTDIR"""
import os, sys, time, json, itertools
import concurrent.futures as cf, multiprocessing as mp
import torch, triton
import torch.nn.functional as F

CASES = {  # name: (B, Hq, Hkv, S, D, causal)
    "d256": (2, 16, 16, 4096, 256, True),
}
DKDV = {256: [(16, 64, 8, 2), (16, 64, 4, 1), (16, 64, 4, 2), (32, 64, 4, 1), (32, 64, 4, 2), (32, 64, 8, 1),
              (16, 128, 8, 1), (32, 128, 8, 1), (16, 32, 4, 2), (32, 32, 4, 2), (64, 64, 4, 1), (64, 64, 8, 1),
              (16, 16, 4, 2), (16, 32, 4, 3)]}
DQ = {256: [(64, 32, 4, 2), (64, 64, 4, 2), (64, 64, 8, 2), (128, 32, 8, 2), (64, 16, 4, 2), (64, 32, 4, 3),
            (128, 64, 8, 1), (32, 32, 4, 2)]}


def make(case, dtype=torch.bfloat16, dev="cuda"):
    B, Hq, Hkv, S, D, causal = CASES[case]
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, Hq, S, D, device=dev, dtype=dtype, generator=g)
    k = torch.randn(B, Hkv, S, D, device=dev, dtype=dtype, generator=g)
    v = torch.randn(B, Hkv, S, D, device=dev, dtype=dtype, generator=g)
    do = torch.randn(B, Hq, S, D, device=dev, dtype=dtype, generator=g)
    return q, k, v, do, causal


def args_for(case):
    from tilewright.triton_kernels import attention as A
    q, k, v, do, causal = make(case)
    B, Hq, S, D = q.shape
    lse = torch.empty((B, Hq, S), device=q.device, dtype=torch.float32)
    dkdv, dq = A._bwd_args(do, q, k, v, lse, torch.empty_like(lse), torch.empty_like(q), torch.empty_like(k),
                           torch.empty_like(v), causal, A.default_scale(D), None)
    return dkdv, dq


def compile_chunk(task):
    case, which, cfgs = task
    from tilewright.triton_kernels import attention as A
    A.ensure_allocator()
    dkdv, dq = args_for(case)
    plain, args, names = ((A._attn_bwd_dkdv_kernel, dkdv, A._DKDV_NAMES) if which == "dkdv"
                          else (A._attn_bwd_dq_kernel, dq, A._DQ_NAMES))
    out = []
    for bm, bn, w, s in cfgs:
        t = time.time()
        try:
            k = plain.warmup(**args, **{names[0]: bm, names[1]: bn}, num_warps=w, num_stages=s, grid=(1,))
            k._init_handles()
            out.append((case, which, (bm, bn, w, s), k.n_regs, k.n_spills, k.metadata.shared, time.time() - t, ""))
        except Exception as e:
            out.append((case, which, (bm, bn, w, s), -1, -1, -1, time.time() - t, repr(e)[:200]))
    return out


def bench(fn, reps=60):
    return triton.testing.do_bench(fn, warmup=20, rep=reps, return_mode="median")


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    log = open(os.path.join(outdir, "attn_bwd_sweep.log"), "w")

    def p(*a):
        s = " ".join(str(x) for x in a)
        print(s, flush=True)
        log.write(s + "\n"); log.flush()

    p("card", torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    tasks = []
    for case, (B, Hq, Hkv, S, D, causal) in CASES.items():
        if case == "long":
            continue  # same constexprs as llama
        for which, table in (("dkdv", DKDV), ("dq", DQ)):
            cfgs = table[D]
            for i in range(0, len(cfgs), 2):
                tasks.append((case, which, cfgs[i:i + 2]))
    t0 = time.time()
    info = {}
    with cf.ProcessPoolExecutor(14, mp_context=mp.get_context("spawn")) as pool:
        for res in pool.map(compile_chunk, tasks):
            for case, which, cfg, regs, spills, smem, secs, err in res:
                info[(case, which, cfg)] = (regs, spills, smem)
                p("compiled", case, which, cfg, "regs", regs, "spills", spills, "smem", smem, f"{secs:.1f}s", err)
    p(f"compile phase {time.time() - t0:.0f}s")

    from tilewright.triton_kernels import attention as A
    import tilewright
    rows = []
    for case, (B, Hq, Hkv, S, D, causal) in CASES.items():
        q, k, v, do, causal = make(case)
        scale = A.default_scale(D)
        flops_bwd = 2.5 * 4 * B * Hq * S * S * D * (0.5 if causal else 1.0)
        # peers: SDPA backends, bwd = (fwd+bwd) - fwd
        kk, vv = (k.repeat_interleave(Hq // Hkv, 1), v.repeat_interleave(Hq // Hkv, 1)) if Hq != Hkv else (k, v)
        from torch.nn.attention import sdpa_kernel, SDPBackend
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                qq, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, kk, vv))
                with sdpa_kernel([be]):
                    def fb():
                        o = F.scaled_dot_product_attention(qq, k2, v2, is_causal=causal)
                        torch.autograd.grad(o, (qq, k2, v2), do)
                    def f():
                        F.scaled_dot_product_attention(qq, k2, v2, is_causal=causal)
                    tfb, tf = bench(fb), bench(f)
                p(case, name, f"fwd {tf:.3f} fwd+bwd {tfb:.3f} bwd {tfb - tf:.3f} ms  bwd TFLOP/s {flops_bwd / (tfb - tf) / 1e9:.0f}")
                rows.append(dict(case=case, provider=name, fwd=tf, fwdbwd=tfb, bwd=tfb - tf))
            except Exception as e:
                p(case, name, "failed", repr(e)[:200])
        # ours, default path through the op
        qq, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
        def fb():
            o = tilewright.flash_attention(qq, k2, v2, causal=causal)
            torch.autograd.grad(o, (qq, k2, v2), do)
        def f():
            tilewright.flash_attention(qq, k2, v2, causal=causal)
        fb(); tfb, tf = bench(fb), bench(f)
        p(case, "tilewright op", f"fwd {tf:.3f} fwd+bwd {tfb:.3f} bwd {tfb - tf:.3f}")
        rows.append(dict(case=case, provider="tilewright", fwd=tf, fwdbwd=tfb, bwd=tfb - tf))
        # kernel level: fixed configs
        out = torch.empty_like(q); lse = torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
        A.attention_forward(q, k, v, out, lse, causal, scale)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        base_dkdv = A._DKDV_TILES[D][0]; base_dq = A._DQ_TILES[D][0]
        cfg = lambda t, names: triton.Config({names[0]: t[0], names[1]: t[1]}, num_warps=t[2], num_stages=t[3])
        for which, table in (("dkdv", DKDV), ("dq", DQ)):
            for t in table[D]:
                c_dkdv = cfg(t if which == "dkdv" else base_dkdv, A._DKDV_NAMES)
                c_dq = cfg(t if which == "dq" else base_dq, A._DQ_NAMES)
                try:
                    fn = lambda: A.attention_backward(do, q, k, v, out, lse, dq, dk, dv, causal, scale,
                                                      configs=(c_dkdv, c_dq))
                    fn(); torch.cuda.synchronize()
                    ms = bench(fn)
                except Exception as e:
                    p(case, which, t, "failed", repr(e)[:200]); continue
                regs, spills, smem = info.get(("llama" if case == "long" else case, which, t), (-1, -1, -1))
                p(case, which, t, f"bwd {ms:.3f} ms {flops_bwd / ms / 1e9:.0f} TFLOP/s regs {regs} spills {spills}")
                rows.append(dict(case=case, provider=f"{which}{t}", bwd=ms, regs=regs, spills=spills))
        del q, k, v, do, kk, vv
        torch.cuda.empty_cache()
    json.dump(rows, open(os.path.join(outdir, "attn_bwd_sweep.json"), "w"), indent=1)


if __name__ == "__main__":
    sys.path.insert(0, "src")
    main(sys.argv[1])
