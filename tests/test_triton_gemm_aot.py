"""CPU tier: the Triton GEMM compiled ahead of time for sm_90 - wgmma (HGMMA) in SASS, TMA, zero spills.

Every large-tile config of the autotune space that the pruner keeps for an epilogue is compiled with that epilogue,
the way a real launch specializes it (unit strides constant, aligned pointers and strides).
"""
import pytest

from tilewright.autotune.space import gemm_configs, prune_gemm_configs
from tilewright.triton_kernels.aot import compile_reports
from tilewright.triton_kernels.tile_order import GROUPED

PTRS = ("a_ptr", "b_ptr", "c_ptr", "bias_ptr", "res_ptr", "preact_ptr", "g_ptr", "rstd_ptr")
UNIT_STRIDES = ("stride_ak", "stride_bn", "stride_cn", "stride_res2")  # row-major a, b, out, residual
INTS = ("M", "N", "K", "stride_am", "stride_bk", "stride_cm", "stride_res0", "stride_res1", "RES_PERIOD", "M_BUCKET")
ALIGNED = PTRS + ("stride_am", "stride_bk", "stride_cm", "stride_res0", "stride_res1")

EPILOGUES = {  # name: (flags, use_tma)
    "plain": (dict(HAS_BIAS=False, ACTIVATION=0, HAS_RESIDUAL=False, RES_PERIODIC=False), True),
    "bias-gelu_tanh-residual": (dict(HAS_BIAS=True, ACTIVATION=3, HAS_RESIDUAL=True, RES_PERIODIC=False), True),
    "bias-silu-pos_embed": (dict(HAS_BIAS=True, ACTIVATION=4, HAS_RESIDUAL=True, RES_PERIODIC=True), True),
    "pointer-bias-relu-residual": (dict(HAS_BIAS=True, ACTIVATION=1, HAS_RESIDUAL=True, RES_PERIODIC=False), False),
}


def _cases():
    for epi_name, (flags, use_tma) in EPILOGUES.items():
        yield epi_name, flags, use_tma, 8192
    # decode: the small-tile half of the space (BLOCK_M < 64 runs on mma.sync, not wgmma)
    yield "decode-bias-gelu_tanh-residual", EPILOGUES["bias-gelu_tanh-residual"][0], True, 16


def _jobs():
    jobs, names = [], []
    for epi_name, flags, use_tma, m in _cases():
        configs = prune_gemm_configs(gemm_configs(), m, 8192, 8192, 2, 2, tma_store=use_tma, use_tma=use_tma,
                                     periodic_residual=flags["RES_PERIODIC"])
        seen = set()
        for cfg in configs:
            kw = cfg.all_kwargs()
            tile = (kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], kw["num_warps"], kw["num_stages"], kw["EPI_SPLIT"],
                    kw["FLATTEN"], kw["TMA_LOADS"])
            if tile in seen:  # tile orders / grid size differ only in scalar index math: one compile per tile shape
                continue
            seen.add(tile)
            constexprs = {**{k: 1 for k in UNIT_STRIDES}, **flags, "A_K_CONTIG": True, "B_K_CONTIG": False,
                          "USE_TMA": use_tma, "TMA_STORE": use_tma, "STORE_PREACT": False, "INDEX_64": False,
                          "NORM": False, "RESCALE_G": False, "STORE_RSTD": False,
                          "DOT_PRECISION": "tf32", "UPCAST_DOT": False, "GROUP": 8, "TILE_ORDER": GROUPED,
                          **{k: kw[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "EPI_SPLIT", "PERSISTENT",
                                                "FLATTEN", "TMA_LOADS")}}
            jobs.append(dict(kernel="tilewright.triton_kernels.gemm:_gemm_kernel",
                             signature={**{k: "*bf16" for k in PTRS}, **{k: "i32" for k in INTS}, "eps": "fp32"},
                             constexprs=constexprs, arch=90, num_warps=kw["num_warps"],
                             num_stages=kw["num_stages"], divisible_by_16=ALIGNED))
            names.append(f"{epi_name}:{tile}")
    return jobs, names


JOBS, NAMES = _jobs()


@pytest.fixture(scope="module")
def reports():
    return compile_reports(JOBS)


@pytest.mark.parametrize("i", range(len(JOBS)), ids=NAMES)
def test_gemm_compiles_for_sm90_with_wgmma_and_no_spills(reports, i):
    rep = reports[i]
    use_tma = JOBS[i]["constexprs"]["USE_TMA"]
    block_m = JOBS[i]["constexprs"]["BLOCK_M"]
    # wgmma needs 64-row tiles; decode tiles of 16/32 rows use mma.sync
    assert rep.has("HGMMA") if block_m >= 64 else rep.has("HMMA"), "tensor-core instruction missing from SASS"
    assert rep.spill_bytes == 0, f"{rep.spill_bytes} bytes spilled ({rep.registers} registers)"
    if use_tma and JOBS[i]["constexprs"]["TMA_LOADS"]:
        assert rep.has("UTMALDG"), "TMA path without TMA loads"
        assert rep.has("UTMASTG"), "TMA store missing"
    assert rep.shared_bytes <= 227 * 1024


def test_fp32_gemm_sums_each_k_slice_apart():
    """fp32 operands: each BLOCK_K slice is summed from zero and added to the accumulator (one FADD per output per
    slice next to BLOCK_K FFMAs; Triton folds a plain ``acc + dot`` back into one chain, which leaves no FADD at all
    in the plain kernel), and the FFMA tiles compile without spills with the heaviest epilogue and with the RMSNorm
    prologue, TMA or pointer loads."""
    import re

    from tilewright.autotune.space import _FP32_TILES

    ptrs = PTRS + ("gscale_ptr", "scale_a_ptr", "scale_b_ptr")
    jobs, names = [], []
    for (bm, bn, bk, warps, stages) in _FP32_TILES:
        for tma in (True, False):
            for heavy in (False, True):  # plain: the FADD count is the slice sums alone; heavy: spills
                ce = {**{k: 1 for k in UNIT_STRIDES}, "HAS_BIAS": heavy, "ACTIVATION": 3 if heavy else 0,
                      "HAS_RESIDUAL": heavy, "RES_PERIODIC": heavy, "A_K_CONTIG": True, "B_K_CONTIG": False,
                      "USE_TMA": tma, "TMA_STORE": tma, "STORE_PREACT": heavy, "INDEX_64": heavy, "NORM": heavy,
                      "RESCALE_G": False, "STORE_RSTD": heavy, "SCALE_MODE": 0, "PRECISE_ACC": False,
                      "DOT_PRECISION": "ieee", "UPCAST_DOT": False, "GROUP": 8, "TILE_ORDER": GROUPED,
                      "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "EPI_SPLIT": 1, "PERSISTENT": True,
                      "FLATTEN": False, "TMA_LOADS": tma}
                jobs.append(dict(kernel="tilewright.triton_kernels.gemm:_gemm_kernel",
                                 signature={**{k: "*fp32" for k in ptrs}, **{k: "i32" for k in INTS}, "eps": "fp32"},
                                 constexprs=ce, arch=90, num_warps=warps, num_stages=stages,
                                 divisible_by_16=ALIGNED + ("gscale_ptr", "scale_a_ptr", "scale_b_ptr")))
                names.append((bm, bn, bk, warps, tma, heavy))
    for (bm, bn, bk, warps, tma, heavy), rep in zip(names, compile_reports(jobs)):
        assert rep.spill_bytes == 0, f"{bm}x{bn}x{bk} tma={tma}: {rep.spill_bytes} bytes spilled"
        if not heavy:
            per_thread = bm * bn // (32 * warps)
            ffma, fadd = len(re.findall(r"\bFFMA\b", rep.sass)), len(re.findall(r"\bFADD\b", rep.sass))
            assert ffma == per_thread * bk, (ffma, per_thread * bk)
            assert fadd == per_thread, f"{fadd} FADD for {per_thread} outputs a thread: slice sums folded away?"


def test_split_k_configs_compile_with_wgmma_atomics_and_no_spills():
    """Every split-K tile of the space, TMA and pointer loads, an M-major A (the weight gradient's) and the heaviest
    epilogue: wgmma, the arrival atomic (ATOMG) and no spills - the partial tiles' reload sits beside the
    accumulator."""
    from tilewright.autotune import space

    configs = [c for c in space.gemm_configs() if c.kwargs["SPLIT_K"] == 2]
    assert configs
    jobs = []
    for cfg in configs:
        kw = cfg.all_kwargs()
        tma = kw["TMA_LOADS"]
        flags = EPILOGUES["bias-gelu_tanh-residual"][0] if tma else EPILOGUES["pointer-bias-relu-residual"][0]
        constexprs = {**{k: 1 for k in UNIT_STRIDES}, **flags, "A_K_CONTIG": False, "B_K_CONTIG": False,
                      "USE_TMA": tma, "TMA_STORE": tma, "STORE_PREACT": True, "INDEX_64": False,
                      "NORM": False, "RESCALE_G": False, "STORE_RSTD": False, "SCALE_MODE": 0, "PRECISE_ACC": False,
                      "DOT_PRECISION": "tf32", "UPCAST_DOT": False, "GROUP": 8, "TILE_ORDER": GROUPED,
                      **{k: kw[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "EPI_SPLIT", "PERSISTENT", "FLATTEN",
                                            "TMA_LOADS", "SPLIT_K")}}
        # an M-major A, as the weight gradient's a.T: stride_am is the unit stride, stride_ak the row pitch
        del constexprs["stride_ak"]
        constexprs["stride_am"] = 1
        sig = {**{k: "*bf16" for k in PTRS}, "ws_ptr": "*fp32", "arrivals_ptr": "*i32",
               **{k: "i32" for k in INTS + ("stride_ak",) if k != "stride_am"}, "eps": "fp32"}
        jobs.append(dict(kernel="tilewright.triton_kernels.gemm:_gemm_kernel", signature=sig, constexprs=constexprs,
                         arch=90, num_warps=kw["num_warps"], num_stages=kw["num_stages"],
                         divisible_by_16=tuple(k for k in ALIGNED if k != "stride_am") + ("ws_ptr", "arrivals_ptr",
                                                                                          "stride_ak")))
    for cfg, rep in zip(configs, compile_reports(jobs)):
        name = f"{cfg.kwargs['BLOCK_M']}x{cfg.kwargs['BLOCK_N']} w{cfg.num_warps} tma={cfg.kwargs['TMA_LOADS']}"
        assert rep.has("HGMMA"), f"{name}: no wgmma"
        assert rep.has("ATOMG"), f"{name}: no arrival atomic"
        assert rep.spill_bytes == 0, f"{name}: {rep.spill_bytes} bytes spilled ({rep.registers} registers)"
        assert rep.shared_bytes <= 227 * 1024
