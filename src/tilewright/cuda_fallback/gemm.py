"""Host side of the Hopper WGMMA GEMM (``gemm_sm90_pingpong.cu``): variants, constraints, launch, self-check.

Entry points:
* :func:`cuda_gemm` - ``act(a @ b + bias) + residual`` on new output; the benchmark's CUDA column.
* :func:`launch_cuda_gemm` - the same into a given ``out`` with the op layer's (R0, P, N) residual.
* :func:`constraints` - why these tensors can or cannot take this kernel (device-independent; the router's filter).
* :func:`ready` - constraints + toolchain + a first-use self-check of the variant on this device model.
* :func:`try_launch` - what ``ops/gemm.py`` calls: launches, or returns False (after one warning on a failure) so
  the caller falls back to Triton; never raises.
"""
from __future__ import annotations

import ctypes
import math
import os
import threading
import warnings
from dataclasses import dataclass

import torch

from . import build

SOURCE = "gemm_sm90_pingpong.cu"
KERNEL = "tw_gemm_sm90"
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
TILE_ORDERS = {"row_major": 0, "grouped": 1, "morton": 2, "hilbert": 3}
_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
SMEM_LIMIT = 232448  # sm_90 per-block opt-in maximum


@dataclass(frozen=True)
class Variant:
    """One compiled configuration: CTA tile, ring depth, pingpong or cooperative consumers."""

    bm: int
    bn: int
    stages: int
    coop: bool = False

    @property
    def name(self) -> str:
        return f"{'coop' if self.coop else 'pp'}{self.bm}x{self.bn}s{self.stages}"

    @property
    def wm(self) -> int:
        return self.bm // 2 if self.coop else self.bm

    def smem_bytes(self) -> int:
        return 1024 + self.stages * (self.bm + self.bn) * 128 + 2 * self.wm * self.bn * 2 + 16 * self.stages

    def defines(self, a_mn: bool, b_mn: bool, fp16: bool, act: int = 0, bias: bool = False,
                res: bool = False) -> dict:
        """-D macros of one build: this variant, the operand layouts, the dtype and the fused epilogue."""
        return {"TW_BM": self.bm, "TW_BN": self.bn, "TW_STAGES": self.stages, "TW_COOP": int(self.coop),
                "TW_A_MN": int(a_mn), "TW_B_MN": int(b_mn), "TW_FP16": int(fp16), "TW_ACT": int(act),
                "TW_BIAS": int(bias), "TW_RES": int(res)}


VARIANTS = {v.name: v for v in (
    Variant(128, 128, 4), Variant(128, 128, 5), Variant(64, 256, 4),
    Variant(128, 256, 3, coop=True), Variant(256, 128, 3, coop=True),
)}
DEFAULT_VARIANT = "coop128x256s3"  # large problems (H200 run 2: 1.003-1.073x cuBLAS on the 8 LLM/square shapes)
SMALL_M_VARIANT = "pp128x128s5"    # M <= 256: fewer, smaller tiles; the fastest variant on decode16/decode128
# compiled by build-check (CPU CI): the default and the other families, bf16 + one fp16 / K-major-B build
BUILD_CHECK_BUILDS = (
    ("coop128x256s3", False, True, False), ("coop128x256s3", False, False, True), ("pp128x128s5", False, True, False),
    ("pp64x256s4", False, True, False),
)


def pick_variant(M: int, N: int, K: int) -> Variant:
    """Static choice per shape (``TILEWRIGHT_CUDA_GEMM_VARIANT`` overrides)."""
    forced = os.environ.get("TILEWRIGHT_CUDA_GEMM_VARIANT")
    if forced:
        return VARIANTS[forced]
    return VARIANTS[SMALL_M_VARIANT if M <= 256 else DEFAULT_VARIANT]


# Measured preference (router, automatic mode), from one H200 run with Triton's default config and cuBLAS beside it
# (perf/results/h200/cuda_gemm_2026-11-26.csv): this kernel was faster on every suite shape with full 64-row /
# 128-column tiles and M >= 128 (all eight LLM/square shapes, decode128: 157 vs 73 TF/s), Triton on decode16 (22 vs
# 19) and on `odd` (3000x5000x4000: 549 vs 511). Outside that region Triton keeps the default.
# Updated by the tuned side-by-side run (perf/results/h200/2026-11-26/gemm.csv): with Triton's decode defaults,
# decode128 runs 0.84x cuBLAS in Triton and 0.60x in this kernel, so M <= 256 stays with Triton.
PREFER_MIN_M = 257
PREFER_MIN_N = 1024
PREFER_MIN_K = 512


def preferred(M: int, N: int, K: int) -> tuple[bool, str]:
    """Whether the router's automatic choice should take this kernel for an (M, N, K) problem, and why."""
    region = (f"M >= {PREFER_MIN_M}, N >= {PREFER_MIN_N}, K >= {PREFER_MIN_K}, M % 64 == 0, N % 128 == 0")
    if M >= PREFER_MIN_M and N >= PREFER_MIN_N and K >= PREFER_MIN_K and M % 64 == 0 and N % 128 == 0:
        return True, f"cuda: ({M}, {N}, {K}) is in the measured win region ({region})"
    return False, f"cuda: ({M}, {N}, {K}) is outside the measured win region ({region}); Triton is faster there"


# ------------------------------------------------------------------------------------------------ constraints
def _layout(t: torch.Tensor, name: str):
    """((first dim contiguous?, leading stride in elements), "") for a 2-D tensor TMA can describe, else (None, why).

    Row-major (unit stride on dim 1) is preferred; the stride of a size-1 dim is free and replaced by a valid one."""
    rows, cols = t.shape
    es = t.element_size()
    options = []
    if t.stride(1) == 1 or cols == 1:
        options.append((False, t.stride(0), rows, cols))
    if t.stride(0) == 1 or rows == 1:
        options.append((True, t.stride(1), cols, rows))
    if not options:
        return None, f"{name} has no unit stride (strides {tuple(t.stride())})"
    for first_contig, lead, outer, inner in options:
        if outer == 1:
            lead = -(-inner * es // 16) * 16 // es
        if lead > 0 and (lead * es) % 16 == 0:
            if t.data_ptr() % 16:
                return None, f"{name}'s base address is not 16-byte aligned (TMA)"
            return (first_contig, lead), ""
    return None, (f"{name}'s leading stride {options[0][1]} x {es} B is not a multiple of 16 bytes (TMA needs "
                  "16-byte aligned strides)")


def constraints(a: torch.Tensor, b: torch.Tensor, bias=None, residual=None) -> tuple[bool, str]:
    """Whether the kernel can take these operands at all (dtype, rank, TMA alignment), and why not."""
    if a.dtype not in _DTYPES:
        return False, f"dtype {a.dtype} (the WGMMA kernel takes bfloat16 / float16)"
    if b.dtype != a.dtype or (bias is not None and bias.dtype != a.dtype):
        return False, "mixed dtypes"
    if residual is not None and residual.dtype != a.dtype:
        return False, f"residual dtype {residual.dtype} differs from {a.dtype}"
    if a.dim() != 2 or b.dim() != 2:
        return False, "operands must be 2-D"
    if a.numel() == 0 or b.numel() == 0:
        return False, "empty operand"
    for t, name in ((a, "a"), (b, "b")):
        lay, why = _layout(t, name)
        if lay is None:
            return False, why
    N = b.shape[1]
    if (N * a.element_size()) % 16:
        return False, f"N = {N}: output rows are not a multiple of 16 bytes (TMA store)"
    if bias is not None and bias.dim() == 1 and bias.stride(0) != 1 and bias.shape[0] > 1:
        return False, "bias is not contiguous"
    return True, "bf16/fp16 with 16-byte aligned strides (TMA)"


# ------------------------------------------------------------------------------------------------ launch
# What every CUDA GEMM family (this module, gemm_mma.py, gemm_sm100.py) shares on the host: launch-argument
# normalisation, the prepared-launch cache, the build + A/B tensor maps, and the epilogue kernel arguments.
def launch_args(label: str, a, b, out, bias, residual, activation, tile_order, group, out_align: int):
    """Validate one launch and return (activation code, tile-order code, residual strides, residual pointer,
    residual period). ``out_align``: the byte alignment the kernel's stores need for out's base and rows."""
    M, K = a.shape
    N = b.shape[1]
    ok, why = constraints(a, b, bias, residual)
    if not ok:
        raise ValueError(f"{label}: {why}")
    if out.shape != (M, N) or out.stride(1) != 1 or out.dtype != a.dtype or (out.stride(0) * 2) % out_align or \
            out.data_ptr() % out_align:
        raise ValueError(f"{label}: out must be a row-major (M, N) tensor of a's dtype with {out_align}-byte "
                         "aligned rows")
    if isinstance(activation, str) or activation is None:
        activation = ACTIVATIONS[activation]
    if isinstance(tile_order, str):
        tile_order = TILE_ORDERS[tile_order]
    if tile_order in (2, 3) and group & (group - 1):
        raise ValueError(f"{label}: morton/hilbert tile orders need a power-of-two group")
    if residual is None:
        return activation, tile_order, (0, 0, 0), 0, 1
    r0, p, rn = residual.shape
    if r0 * p != M or rn != N:
        raise ValueError(f"{label}: residual must be (R0, P, N) with R0 * P == M")
    return activation, tile_order, residual.stride(), residual.data_ptr(), p


def resolve_variant(variants: dict, pick, variant, M: int, N: int, K: int):
    """``variant`` as a name, a variant object, or None (then ``pick(M, N, K)``)."""
    return variants[variant] if isinstance(variant, str) else (variant or pick(M, N, K))


def prepared_key(a, b, out, v, bias, *rest) -> tuple:
    """What a prepared launch depends on: device, pointers, shapes, strides, dtype, variant, bias, then ``rest``
    (the residual, epilogue and schedule values of the family)."""
    return (a.device.index, a.data_ptr(), a.shape, a.stride(), b.data_ptr(), b.shape, b.stride(), out.data_ptr(),
            out.stride(), a.dtype, v, bias.data_ptr() if bias is not None else 0, *rest)


def launch_cached(cache: dict, key: tuple, prepare, device, threads: int, smem: int) -> None:
    """Launch the (function, grid, kernel arguments) cached under ``key`` (``prepare()`` builds it on a miss; at most
    256 entries, oldest dropped first) on ``device``'s current stream, 1-D grid and block."""
    prepared = cache.get(key)
    if prepared is None:
        prepared = prepare()
        if len(cache) >= 256:
            cache.pop(next(iter(cache)))
        cache[key] = prepared
    fn, grid, args = prepared
    stream = torch.cuda.current_stream(device).cuda_stream
    with torch.cuda.device(device):
        build.driver().launch(fn, (grid, 1, 1), (threads, 1, 1), smem, stream, args)


def build_and_map_operands(source: str, kernel: str, arch: str, a, b, v, activation, bias, res_ptr):
    """Compile ``v``'s build of ``source`` for ``arch`` (layouts, dtype and epilogue from the operands), load
    ``kernel`` and encode A's and B's 128B-swizzled TMA maps (64-element K box; a K-major box of (64, v.bm) for A and
    (64, v.bn) for B). Returns (driver, function, tm_a, tm_b, a_mn, b_mn, SM count)."""
    M, K = a.shape
    N = b.shape[1]
    (a_mn, lda), _ = _layout(a, "a")
    (b_kcontig_first, ldb), _ = _layout(b, "b")
    b_mn = not b_kcontig_first  # b (K, N) with unit stride on N -> N-major
    dt = _DTYPES[a.dtype]
    bld = build.compile_source(source, arch, v.defines(a_mn, b_mn, a.dtype == torch.float16, activation,
                                                       bias is not None, res_ptr != 0))
    drv = build.driver()
    with torch.cuda.device(a.device):
        fn = drv.function(bld, kernel, v.smem_bytes())
        if a_mn:
            tm_a = drv.encode_tiled(dt, a.data_ptr(), (M, K), (lda * 2,), (64, 64), 128)
        else:
            tm_a = drv.encode_tiled(dt, a.data_ptr(), (K, M), (lda * 2,), (64, v.bm), 128)
        if b_mn:
            tm_b = drv.encode_tiled(dt, b.data_ptr(), (N, K), (ldb * 2,), (64, 64), 128)
        else:
            tm_b = drv.encode_tiled(dt, b.data_ptr(), (K, N), (ldb * 2,), (64, v.bn), 128)
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    return drv, fn, tm_a, tm_b, a_mn, b_mn, sms


def epilogue_args(bias, res_ptr, rs, res_period, M: int, N: int, K: int) -> list:
    """The kernel arguments every family passes in this order: bias pointer, residual pointer, its three strides and
    row period, then M, N, K."""
    return [ctypes.c_uint64(bias.data_ptr() if bias is not None else 0), ctypes.c_uint64(res_ptr),
            ctypes.c_int64(rs[0]), ctypes.c_int64(rs[1]), ctypes.c_int64(rs[2]), ctypes.c_int32(res_period),
            ctypes.c_int32(M), ctypes.c_int32(N), ctypes.c_int32(K)]


def launch_cuda_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *, bias=None, residual=None,
                     activation=0, variant: Variant | str | None = None, tile_order: str | int = "grouped",
                     group: int = 16, num_ctas: int | None = None) -> torch.Tensor:
    """``out = act(a @ b + bias) + residual`` with the sm_90a kernel (no checks beyond :func:`constraints`).

    a: (M, K), b: (K, N), out: (M, N) row-major; residual: (R0, P, N) with R0 * P == M (row r reads
    residual[r // P, r % P]) or None; activation: a name or an ACTIVATIONS code; tile_order: a TILE_ORDERS name or
    code (group must be a power of two for morton/hilbert). Grouped-16 won 6 of the 8 large suite shapes on H200.
    """
    activation, tile_order, rs, res_ptr, res_period = launch_args(
        "cuda gemm", a, b, out, bias, residual, activation, tile_order, group, out_align=16)
    M, K = a.shape
    v = resolve_variant(VARIANTS, pick_variant, variant, M, b.shape[1], K)
    key = prepared_key(a, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group, num_ctas)
    launch_cached(_prepared, key, lambda: _prepare(a, b, out, v, bias, res_ptr, rs, res_period, activation,
                                                   tile_order, group, num_ctas), a.device, 384, v.smem_bytes())
    return out


# launch-ready (function, grid, kernel arguments) per (pointers, shapes, strides, variant, epilogue): tensor maps
# depend only on those, so a repeated call (benchmarks, a training step's fixed buffers) costs one cuLaunchKernel.
_prepared: dict = {}


def _prepare(a, b, out, v: Variant, bias, res_ptr, rs, res_period, activation, tile_order, group, num_ctas):
    M, K = a.shape
    N = b.shape[1]
    drv, fn, tm_a, tm_b, _, _, sms = build_and_map_operands(SOURCE, KERNEL, "sm_90a", a, b, v, activation, bias,
                                                            res_ptr)
    with torch.cuda.device(a.device):
        tm_c = drv.encode_tiled(_DTYPES[a.dtype], out.data_ptr(), (N, M), (out.stride(0) * 2,), (64, v.wm), 128)
    tiles = -(-M // v.bm) * -(-N // v.bn)
    pair = (not v.coop) and tiles >= 2 * sms
    grid = num_ctas or min(sms, -(-tiles // (2 if pair else 1)))
    args = [tm_a, tm_b, tm_c, *epilogue_args(bias, res_ptr, rs, res_period, M, N, K),
            ctypes.c_int32(activation), ctypes.c_int32(tile_order), ctypes.c_int32(group), ctypes.c_int32(int(pair))]
    return fn, grid, args


def cuda_gemm(a: torch.Tensor, b: torch.Tensor, bias=None, residual=None, activation=None, **kw) -> torch.Tensor:
    """``activation(a @ b + bias) + residual`` -> new (M, N) tensor; residual broadcastable to (M, N)."""
    M, N = a.shape[0], b.shape[1]
    out = torch.empty((M, N), device=a.device, dtype=a.dtype)
    res3 = None if residual is None else torch.broadcast_to(residual, (M, N)).unsqueeze(0)
    return launch_cuda_gemm(a, b, out, bias=bias, residual=res3, activation=activation, **kw)


# ------------------------------------------------------------------------------------------------ self-check
_checked: dict = {}  # (device model, variant, a_mn, b_mn, dtype) -> (ok, message)
_disabled: str | None = None
_warned: set = set()
_lock = threading.Lock()


def _device_model(device: torch.device) -> str:
    p = torch.cuda.get_device_properties(device)
    return f"{p.name} (sm_{p.major}{p.minor})"


def ready_blocked(constraints_result: tuple[bool, str], disabled: str | None) -> tuple[bool, str] | None:
    """What stops a CUDA kernel family before its self-check, for every family: its input constraints
    (``(ok, why)``), the family-wide disable switch, a missing compiler. None when nothing does."""
    ok, why = constraints_result
    if not ok:
        return False, why
    if disabled:
        return False, disabled
    if build.toolchain() is None:
        return False, "no CUDA compiler (nvcc or NVRTC) found"
    return None


def memo_self_check(checked: dict, lock, key: tuple, check, label: str) -> tuple[bool, str, str | None]:
    """Run ``check()`` -> (ok, message) once per ``key`` (memoized in ``checked``), for every CUDA kernel family.

    Returns (ok, message, disable): ``disable`` is set when the kernel did not compile - the caller then disables its
    whole family (one warning). Any other exception, or a failed check, marks only this key as failed (one warning
    each); nothing raises to the caller, so the router can always fall back to Triton."""
    with lock:
        if key not in checked:
            try:
                checked[key] = check()
            except build.CompileError as e:
                _warn_once(f"{label}-compile", f"tilewright: the {label} did not compile; Triton serves instead.\n{e}")
                return False, "compile failed (see the warning)", "compile failed (see the warning)"
            except Exception as e:  # noqa: BLE001 - any failure here must fall back, never reach the caller
                checked[key] = (False, f"self-check raised {type(e).__name__}: {e}")
            if not checked[key][0]:
                _warn_once(f"{label}{key}", f"tilewright: {label} {key[1]} disabled on {key[0]}: {checked[key][1]}; "
                                            "Triton serves instead")
    ok, msg = checked[key]
    return ok, msg, None


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _self_check_one(device, v, a_mn: bool, b_mn: bool, dtype, launch=None) -> tuple[bool, str]:
    """Small problems with tails in M, N and K and every epilogue piece, against an fp32 reference.

    ``v`` is a variant with ``bm``/``bn``/``name``; ``launch`` (default :func:`launch_cuda_gemm`) takes
    ``(a, b, out, bias=, residual=, activation=, variant=)`` - the other CUDA GEMM families reuse this check."""
    launch = launch or launch_cuda_gemm
    g = torch.Generator(device="cpu").manual_seed(1234)
    worst = 0.0
    # one epilogue build (bias + gelu + residual) checks the machinery every build shares: TMA, ring, wgmma, stores
    # Tails in every dim, but every dim a multiple of 8 elements: an MN-major operand's leading stride is M (or N),
    # and TMA needs 16-byte strides - an odd M made the check itself ineligible and disabled the kernel (H200 run).
    for (M, N, K, act, use_res) in ((296, 264, 200, "gelu", True), (8, 64, 72, "gelu", True),
                                    (2 * v.bm + 8, 3 * v.bn + 8, 1000, "gelu", True)):
        a = torch.randn(M, K, generator=g).to(device=device, dtype=dtype)
        b = torch.randn(K, N, generator=g).to(device=device, dtype=dtype) / math.sqrt(K)
        if a_mn:
            a = a.t().contiguous().t()
        if not b_mn:
            b = b.t().contiguous().t()
        bias = torch.randn(N, generator=g).to(device=device, dtype=dtype)
        res = torch.randn(M, N, generator=g).to(device=device, dtype=dtype) if use_res else None
        out = torch.full((M, N), float("nan"), device=device, dtype=dtype)
        launch(a, b, out, bias=bias, residual=None if res is None else res.reshape(1, M, N), activation=act,
               variant=v)
        z = a.float() @ b.float() + bias.float()
        from ..reference import activation_reference

        ref = activation_reference(z, act)
        if res is not None:
            ref = ref + res.float()
        torch.cuda.synchronize(device)
        err = ((out.float() - ref).norm() / ref.norm().clamp_min(1e-6)).item()
        if not math.isfinite(err) or err > 2e-2:
            return False, f"self-check failed for {v.name} on ({M}, {N}, {K}): relative error {err:.3g}"
        worst = max(worst, err)
    return True, f"self-check passed (max relative error {worst:.2e})"


def ready(a: torch.Tensor, b: torch.Tensor, bias=None, residual=None) -> tuple[bool, str]:
    """Everything the router needs before routing here: constraints, toolchain, and the variant's self-check on
    this device model (run once per process; a failure disables the variant with one warning)."""
    global _disabled
    blocked = ready_blocked(constraints(a, b, bias, residual), _disabled)
    if blocked:
        return blocked
    M, K = a.shape
    N = b.shape[1]
    v = pick_variant(M, N, K)
    (a_mn, _), _ = _layout(a, "a")
    (b_first, _), _ = _layout(b, "b")
    key = (_device_model(a.device), v.name, a_mn, not b_first, a.dtype)
    ok, msg, off = memo_self_check(_checked, _lock, key, lambda: _self_check_one(a.device, v, a_mn, not b_first,
                                                                                  a.dtype), "CUDA GEMM")
    if off:
        _disabled = off
    return ok, f"{v.name}: {msg}"


def try_launch(a, b, out, bias=None, residual=None, activation=None, preact=None) -> bool:
    """Launch for the op layer; False (Triton then runs) when the kernel declines or fails - never raises."""
    global _disabled
    if preact is not None or out.dtype != a.dtype or _disabled:
        return False  # pre-activation output and mixed output dtypes are Triton's
    try:
        launch_cuda_gemm(a, b, out, bias=bias, residual=residual, activation=activation)
        return True
    except Exception as e:  # noqa: BLE001
        _disabled = f"launch failed: {type(e).__name__}: {e}"
        _warn_once("launch", f"tilewright: CUDA GEMM launch failed ({e}); Triton serves from now on")
        return False
