"""What every GEMM-shaped CUDA family shares on the host (sm_90 WGMMA, sm_100 tcgen05, sm_120 mma.sync and the sm_90
RMSNorm-GEMM): operand rules (TMA-describable bf16/fp16), launch-argument normalisation, the prepared-launch key,
the build + A/B tensor maps, the epilogue arguments, the GEMM self-check, and :class:`GemmFamily` - the ready /
try_launch / preferred surface the router and the op layer call.

The kernels share ``ptx/gemm_common.cuh`` the same way: activation codes, tile orders and the (R0, P, N) residual.
"""
from __future__ import annotations

import ctypes
import math
import os

import torch

from ..._codes import ACTIVATIONS, TILE_ORDERS  # noqa: F401  (re-exported: the families and tests read them here)
from ..._record import tensor_signature
from . import build, cuda_backend, launch
from .guard import NOT_RUN_NOTE, relative_error, run_self_check, synchronize



# ------------------------------------------------------------------------------------------------ operand rules
def layout(t: torch.Tensor, name: str):
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


def operand_rules(a: torch.Tensor, b: torch.Tensor, bias=None, residual=None,
                  kernel: str = "WGMMA") -> tuple[bool, str]:
    """Whether a GEMM kernel can take these operands at all (dtype, rank, TMA alignment), and why not; ``kernel``
    names it in the reason."""
    if a.dtype not in (torch.bfloat16, torch.float16):
        return False, f"dtype {a.dtype} (the {kernel} kernel takes bfloat16 / float16)"
    if b.dtype != a.dtype or (bias is not None and bias.dtype != a.dtype):
        return False, "mixed dtypes"
    if residual is not None and residual.dtype != a.dtype:
        return False, f"residual dtype {residual.dtype} differs from {a.dtype}"
    if a.dim() != 2 or b.dim() != 2:
        return False, "operands must be 2-D"
    if a.numel() == 0 or b.numel() == 0:
        return False, "empty operand"
    for t, name in ((a, "a"), (b, "b")):
        lay, why = layout(t, name)
        if lay is None:
            return False, why
    N = b.shape[1]
    if (N * a.element_size()) % 16:
        return False, f"N = {N}: output rows are not a multiple of 16 bytes (TMA store)"
    if bias is not None and bias.dim() == 1 and bias.stride(0) != 1 and bias.shape[0] > 1:
        return False, "bias is not contiguous"
    return True, "bf16/fp16 with 16-byte aligned strides (TMA)"


# ------------------------------------------------------------------------------------------------ launch
def launch_args(label: str, a, b, out, bias, residual, activation, tile_order, group, out_align: int):
    """Validate one launch and return (activation code, tile-order code, residual strides, residual pointer,
    residual period). ``out_align``: the byte alignment the kernel's stores need for out's base and rows."""
    M, K = a.shape
    N = b.shape[1]
    ok, why = operand_rules(a, b, bias, residual)
    if not ok:
        raise ValueError(f"{label}: {why}")
    check_out(label, a, out, M, N, out_align)
    if isinstance(activation, str) or activation is None:
        activation = ACTIVATIONS[activation]
    tile_order = tile_order_code(label, tile_order, group)
    if residual is None:
        return activation, tile_order, (0, 0, 0), 0, 1
    r0, p, rn = residual.shape
    if r0 * p != M or rn != N:
        raise ValueError(f"{label}: residual must be (R0, P, N) with R0 * P == M")
    return activation, tile_order, residual.stride(), residual.data_ptr(), p


def check_out(label: str, a, out, M: int, N: int, out_align: int) -> None:
    """ValueError unless ``out`` is a row-major (M, N) tensor of a's dtype whose base and rows are ``out_align``-byte
    aligned (what the kernels' stores need)."""
    if out.shape != (M, N) or out.stride(1) != 1 or out.dtype != a.dtype or (out.stride(0) * 2) % out_align or \
            out.data_ptr() % out_align:
        raise ValueError(f"{label}: out must be a row-major ({M}, {N}) tensor of a's dtype with {out_align}-byte "
                         "aligned rows")


def tile_order_code(label: str, tile_order, group: int) -> int:
    """A TILE_ORDERS name or code as its code; ValueError for a morton / hilbert order with a group that is no power
    of two."""
    if isinstance(tile_order, str):
        tile_order = TILE_ORDERS[tile_order]
    if tile_order in (2, 3) and group & (group - 1):
        raise ValueError(f"{label}: morton/hilbert tile orders need a power-of-two group")
    return tile_order


def resolve_variant(variants: dict, pick, variant, M: int, N: int, K: int):
    """``variant`` as a name, a variant object, or None (then ``pick(M, N, K)``)."""
    return variants[variant] if isinstance(variant, str) else (variant or pick(M, N, K))


def pick_by_size(variants: dict, env: str, small: str, default: str, M: int):
    """A family's static variant choice: the one the environment variable ``env`` names, else ``small`` for
    M <= 256 (decode-sized: fewer, smaller tiles keep more SMs busy), else ``default``."""
    forced = os.environ.get(env)
    if forced:
        return variants[forced]
    return variants[small if M <= 256 else default]


def launch_family(label: str, variants: dict, pick, prepared: dict, prepare, a, b, out, bias, residual, activation,
                  variant, tile_order, group, num_ctas, *, out_align: int, threads: int | None = None,
                  extra: tuple = ()):
    """The launch every GEMM family does: validate (:func:`launch_args`), resolve the variant, and launch the
    prepared (function, grid, arguments) cached per signature, building it with ``prepare(a, b, out, v, bias,
    res_ptr, residual strides, period, activation, tile order, group, num_ctas, *extra)`` on a miss.
    ``threads``: the block size (None: the variant's ``threads``)."""
    activation, tile_order, rs, res_ptr, res_period = launch_args(label, a, b, out, bias, residual, activation,
                                                                  tile_order, group, out_align=out_align)
    M, K = a.shape
    v = resolve_variant(variants, pick, variant, M, b.shape[1], K)
    key = prepared_key(a, b, out, v, bias, res_ptr, rs, res_period, activation, tile_order, group, num_ctas, *extra)
    launch.launch_cached(prepared, key, lambda: prepare(a, b, out, v, bias, res_ptr, rs, res_period, activation,
                                                        tile_order, group, num_ctas, *extra),
                         a.device, threads if threads is not None else v.threads, v.smem_bytes(),
                         operand_roles(a, b, out, bias, residual))
    return out


def launch_per_signature(prepared: dict, bound: dict, prepare, v, residual, roles: dict, scalars: tuple,
                         key, zero: dict | None = None) -> None:
    """Launch a norm GEMM build (384 threads) whose op calls it with fresh outputs every call: bound per call
    signature (``launch.launch_bound``: the roles' tensor signatures, the variant ``v`` and ``scalars`` - every
    non-address argument), or - with a residual, whose map and period stay per address, or a launch that cannot be
    bound - through the per-address cache under ``key()`` (computed only then). ``zero``: as
    ``launch.launch_cached`` takes it (the roles' signatures decide it: it is in the bound launch)."""
    device = next(iter(roles.values())).device
    if residual is None:
        sig = (tuple(tensor_signature(t) for t in roles.values()), tuple(roles), v, *scalars)
        if launch.launch_bound(bound, sig, prepare, device, 384, v.smem_bytes(), roles, zero=zero):
            return
    launch.launch_cached(prepared, key(), prepare, device, 384, v.smem_bytes(), roles, zero=zero)


def operand_roles(a, b, out, bias, residual) -> dict:
    """The address roles of a GEMM family's launch (``launch.launch_cached``), named as the ops' replays name the
    Triton GEMM's pointer arguments; absent operands have none."""
    roles = {"a_ptr": a, "b_ptr": b, "c_ptr": out}
    if bias is not None:
        roles["bias_ptr"] = bias
    if residual is not None:
        roles["res_ptr"] = residual
    return roles


def prepared_key(a, b, out, v, bias, *rest) -> tuple:
    """What a prepared launch depends on: device, pointers, shapes, strides, dtype, variant, bias, then ``rest``
    (the residual, epilogue and schedule values of the family)."""
    return (a.device.index, a.data_ptr(), a.shape, a.stride(), b.data_ptr(), b.shape, b.stride(), out.data_ptr(),
            out.stride(), a.dtype, v, bias.data_ptr() if bias is not None else 0, *rest)


def build_for(source: str, arch: str, a, b, v, activation, bias, res_ptr, fp16: bool | None = None,
              extra_defines: dict | None = None):
    """The cubin of ``v``'s build of ``source`` that :func:`build_and_map_operands` loads for these operands (their
    layouts and dtype, the epilogue), through the build cache - no GPU needed, so a tune can compile ahead (the
    operands may be CPU tensors of the same strides). ``extra_defines``: -D macros beyond the variant's (a family's
    per-launch build switches, e.g. the sm_90a kernel's residual path). Returns (build, (a_mn, lda), (b_mn, ldb))."""
    (a_mn, lda), _ = layout(a, "a")
    (b_kcontig_first, ldb), _ = layout(b, "b")
    b_mn = not b_kcontig_first  # b (K, N) with unit stride on N -> N-major
    fp16 = a.dtype == torch.float16 if fp16 is None else fp16
    defines = v.defines(a_mn, b_mn, fp16, activation, bias is not None, res_ptr != 0)
    bld = build.compile_source(source, arch, {**defines, **(extra_defines or {})})
    return bld, (a_mn, lda), (b_mn, ldb)


def build_and_map_operands(source: str, kernel: str, arch: str, a, b, v, activation, bias, res_ptr,
                           fp16: bool | None = None, extra_defines: dict | None = None, b_box_rows: int | None = None):
    """Compile ``v``'s build of ``source`` for ``arch`` (layouts, dtype and epilogue from the operands; ``fp16``: the
    build's 16-bit type when it is not a's - the FP8 builds' output), load ``kernel`` and encode A's and B's
    128B-swizzled TMA maps, whose K box is one 128-byte swizzle row (64 16-bit or 128 8-bit elements): a K-major
    box of (row, v.bm) for A and (row, ``b_box_rows`` or v.bn) for B - a build that loads its B tile in pieces (the
    gated-linear epilogue's two halves) passes the piece's rows. Returns (driver, function, tm_a, tm_b, a_mn, b_mn,
    SM count)."""
    M, K = a.shape
    N = b.shape[1]
    bld, (a_mn, lda), (b_mn, ldb) = build_for(source, arch, a, b, v, activation, bias, res_ptr, fp16, extra_defines)
    dt, dt_b = launch.tma_dtype(a.dtype), launch.tma_dtype(b.dtype)  # (FP8: e4m3 x e5m2 may mix)
    es = a.element_size()
    row = 128 // es
    drv = launch.driver()
    with torch.cuda.device(a.device):
        fn = drv.function(bld, kernel, v.smem_bytes())
        if a_mn:
            tm_a = drv.encode_tiled(dt, a.data_ptr(), (M, K), (lda * es,), (row, 64), 128)
        else:
            tm_a = drv.encode_tiled(dt, a.data_ptr(), (K, M), (lda * es,), (row, v.bm), 128)
        if b_mn:
            tm_b = drv.encode_tiled(dt_b, b.data_ptr(), (N, K), (ldb * es,), (row, 64), 128)
        else:
            tm_b = drv.encode_tiled(dt_b, b.data_ptr(), (K, N), (ldb * es,), (row, b_box_rows or v.bn), 128)
        launch.tag(tm_a, "a_ptr")
        launch.tag(tm_b, "b_ptr")
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    return drv, fn, tm_a, tm_b, a_mn, b_mn, sms


def epilogue_args(bias, res_ptr, rs, res_period, M: int, N: int, K: int) -> list:
    """The kernel arguments every family passes in this order: bias pointer, residual pointer, its three strides and
    row period, then M, N, K."""
    res = launch.tag(ctypes.c_uint64(res_ptr), "res_ptr") if res_ptr else ctypes.c_uint64(0)
    return [launch.pointer("bias_ptr", bias), res,
            ctypes.c_int64(rs[0]), ctypes.c_int64(rs[1]), ctypes.c_int64(rs[2]), ctypes.c_int32(res_period),
            ctypes.c_int32(M), ctypes.c_int32(N), ctypes.c_int32(K)]


def direct_store_args(tm_a, tm_b, out, bias, res_ptr, rs, res_period, M: int, N: int, K: int, tile_order: int,
                      group: int) -> list:
    """Kernel arguments the sm_100 and sm_120 kernels start with: A/B tensor maps, out's pointer and row stride (they
    store fragments directly, no TMA store), the epilogue arguments, tile order and group."""
    return [tm_a, tm_b, launch.pointer("c_ptr", out), ctypes.c_int64(out.stride(0)),
            *epilogue_args(bias, res_ptr, rs, res_period, M, N, K), ctypes.c_int32(tile_order),
            ctypes.c_int32(group)]


# ------------------------------------------------------------------------------------------------ build-check
def build_check_rows(builds, variants: dict, markers=None) -> list:
    """``tilewright build-check`` rows (label, defines, dynamic smem[, SASS markers]) of ``builds`` = (variant name,
    a_mn, b_mn, fp16, act, bias, res[, extra defines]) tuples - the extra defines as the family's launcher adds them
    (:func:`build_for`'s ``extra_defines``), named in the label; ``markers(variant)`` adds the markers one build must
    carry."""
    out = []
    for name, a_mn, b_mn, fp16, act, bias, res, *more in builds:
        v = variants[name]
        extra = more[0] if more else {}
        epi = f" act{act}" * bool(act) + " bias" * bias + " res" * res
        epi += "".join(f" {k}={val}" for k, val in extra.items())
        dt = ("fp8->" if getattr(v, "fp8", False) else "") + ("fp16" if fp16 else "bf16")
        label = f"{name} {dt} A:{'M' if a_mn else 'K'}-major B:{'N' if b_mn else 'K'}-major{epi}"
        row = (label, {**v.defines(a_mn, b_mn, fp16, act, bias, res), **extra}, v.smem_bytes())
        out.append(row + (tuple(markers(v)),) if markers else row)
    return out


# ------------------------------------------------------------------------------------------------ self-check
def self_check(device, v, a_mn: bool, b_mn: bool, dtype, launch_fn) -> tuple[bool, str]:
    """Small problems with tails in M, N and K and every epilogue piece, against an fp32 reference.

    ``v`` is a variant with ``bm``/``bn``/``name``; ``launch_fn`` takes ``(a, b, out, bias=, residual=, activation=,
    variant=)`` like the families' ``launch_*_gemm``."""
    from ...reference import activation_reference

    g = torch.Generator(device="cpu").manual_seed(1234)

    def measure(M, N, K, act, use_res):
        a = torch.randn(M, K, generator=g).to(device=device, dtype=dtype)
        b = torch.randn(K, N, generator=g).to(device=device, dtype=dtype) / math.sqrt(K)
        if a_mn:
            a = a.t().contiguous().t()
        if not b_mn:
            b = b.t().contiguous().t()
        bias = torch.randn(N, generator=g).to(device=device, dtype=dtype)
        res = torch.randn(M, N, generator=g).to(device=device, dtype=dtype) if use_res else None
        out = torch.full((M, N), float("nan"), device=device, dtype=dtype)
        launch_fn(a, b, out, bias=bias, residual=None if res is None else res.reshape(1, M, N), activation=act,
                  variant=v)
        ref = activation_reference(a.float() @ b.float() + bias.float(), act)
        if res is not None:
            ref = ref + res.float()
        synchronize(device)
        return {"relative error": (relative_error(out, ref), 2e-2)}

    # one epilogue build (bias + gelu + residual) checks the machinery every build shares: TMA, ring, MMA, stores
    # Tails in every dim, but every dim a multiple of 8 elements: an MN-major operand's leading stride is M (or N),
    # and TMA needs 16-byte strides - an odd M made the check itself ineligible and disabled the kernel (H200 run).
    shapes = ((296, 264, 200, "gelu", True), (8, 64, 72, "gelu", True),
              (2 * v.bm + 8, 3 * v.bn + 8, 1000, "gelu", True))
    return run_self_check(v.name, ((f"({M}, {N}, {K})", lambda c=(M, N, K, act, res): measure(*c))
                                   for M, N, K, act, res in shapes))


# ------------------------------------------------------------------------------------------------ the family
def stand_in(region, label: str, measured: tuple, M: int, N: int, K: int, residual: bool = False):
    """Preference of a family with no measurement of its own: ``region`` (the sm_90 kernel's measured one) stands
    in; the reason names ``label`` and, while ``measured`` is empty, says the code has not run on this hardware."""
    ok, why = region(M, N, K, residual)
    return ok, f"{label}: {why}" + ("" if measured else f" ({NOT_RUN_NOTE})")


def residual_kind(residual) -> bool | str:
    """What a family's ``region`` is told of the op layer's (R0, P, N) residual: False (none), ``"repeated"`` (rows
    repeated over the batch: stride 0 over R0 > 1, e.g. a pos_embed) or ``"rows"`` (one row per output row)."""
    if residual is None:
        return False
    return "repeated" if residual.dim() == 3 and residual.shape[0] > 1 and residual.stride(0) == 0 else "rows"


class GemmFamily:
    """What the router and the op layer call on one GEMM family, built from the family's own pieces: its
    :class:`~.guard.Guard`, ``constraints(a, b, bias, residual)``, ``pick_variant(M, N, K)``, ``launch(a, b, out,
    bias=, residual=, activation=, variant=)`` and ``region(M, N, K, residual)`` (its measured win region);
    ``tuned_variants``: the variants ``tilewright tune`` sweeps for this family (name -> variant; None: it sweeps
    none), whose winner a launch then takes (:meth:`tuned_launch`) unless the environment variable ``variant_env``
    names a variant (the user's choice wins); ``residual_variant``: the tile a launch with a fused residual takes
    instead (None: the plain GEMM's), see :meth:`residual_launch`."""

    def __init__(self, guard, constraints, pick_variant, launch_fn, region, tuned_variants: dict | None = None,
                 variant_env: str | None = None, residual_variant=None):
        self.guard, self.constraints, self.pick_variant = guard, constraints, pick_variant
        self.launch, self.region, self.tuned_variants, self.variant_env = launch_fn, region, tuned_variants, variant_env
        self.residual_variant = residual_variant

    def residual_launch(self, a, b, residual) -> dict:
        """The launch keywords of a call with a fused residual: ``{"variant": residual_variant}``, or {} (the plain
        GEMM's choice, :meth:`tuned_launch`) without a residual, without such a variant, when ``variant_env`` names
        one, or when its first-use self-check fails. Why a tile of its own: the plain GEMM's tune and static pick
        time the mainloop alone, and a residual's epilogue changes the winner (the family's constant says where it
        was measured) - so it overrides a tuned plain winner too."""
        v = self.residual_variant
        if residual is None or v is None or (self.variant_env and os.environ.get(self.variant_env)):
            return {}
        static = self.pick_variant(a.shape[0], b.shape[1], a.shape[1])
        if v is not static and not self.variant_checked(a, b, v, fallback=f"variant {static.name}")[0]:
            return {}
        return {"variant": v}

    def tuned_launch(self, a, b) -> dict:
        """The launch keywords (variant, tile_order, group) of the ``tilewright tune`` winner the autotune cache
        holds for this shape when the CUDA family won it, else {} (the static pick). Why: the tuner times every
        variant and tile order and stores the fastest, but the launch took the static pick whatever the tune had
        found - a tuned shape ran the CUDA family at its default tile. A winner this build does not have (a cache
        from another version) or whose first-use self-check fails keeps the static pick."""
        if not self.tuned_variants or (self.variant_env and os.environ.get(self.variant_env)):
            return {}
        from ...autotune import cache

        M, N, K = a.shape[0], b.shape[1], a.shape[1]
        record = cache.lookup("gemm", a.device, a.dtype, M, N, K)
        if not record or record.get("winner") != "cuda":
            return {}
        config = cache.cuda_variant(record) or {}
        v = self.tuned_variants.get(config.get("variant"))
        group = config.get("group", 16)
        # (a record this build cannot launch keeps the static pick: a launch that raised would disable the family)
        if v is None or config.get("tile_order") not in (*TILE_ORDERS, None) or not (
                isinstance(group, int) and group > 0 and group & (group - 1) == 0):
            return {}
        static = self.pick_variant(M, N, K)
        if v is not static and not self.variant_checked(a, b, v, fallback=f"variant {static.name}")[0]:
            return {}  # (the static pick's self-check is ready()'s)
        return {"variant": v, **{k: config[k] for k in ("tile_order", "group") if k in config}}

    def preferred(self, a, b, bias=None, residual=None, epilogue=None) -> tuple[bool, str]:
        """The automatic choice for these operands: not where cuBLAS was measured faster on a plain GEMM
        (``cublas_routes``), else the ``tilewright tune`` winner when the autotune cache has this shape, else the
        family's measured win region."""
        from ...autotune import cache
        from ...cublas_routes import cublas_preferred

        cublas, why = cublas_preferred(a, b, bias, residual, epilogue)
        if cublas:
            return False, f"cuBLAS is faster here ({why})"
        M, N, K = a.shape[0], b.shape[1], a.shape[1]
        rec = cache.lookup("gemm", a.device, a.dtype, M, N, K)
        if rec and "cuda" in rec.get("backends", {}):
            if rec.get("winner") == "cuda":
                return True, f"tuned winner in the autotune cache ({rec['backends']['cuda'].get('name')})"
            return False, "triton won the tuning in the autotune cache"
        return self.region(M, N, K, residual_kind(residual))

    def ready(self, a, b, bias=None, residual=None, epilogue=None) -> tuple[bool, str]:
        """Constraints, toolchain, and the variant's self-check on this device model (once per process; a failure
        disables the variant, a compile failure the family, with one warning)."""
        blocked = self.guard.blocked(self.constraints(a, b, bias, residual))
        if blocked:
            return blocked
        return self.variant_checked(a, b, self.pick_variant(a.shape[0], b.shape[1], a.shape[1]))

    def variant_checked(self, a, b, v, fallback: str = "Triton") -> tuple[bool, str]:
        """The first-use self-check of variant ``v`` in ``a`` / ``b``'s layouts and dtype on this device model (run
        once per process, remembered by the guard); ``fallback`` names what serves the calls a failure turns away."""
        (a_mn, _), _ = layout(a, "a")
        (b_first, _), _ = layout(b, "b")
        return self.guard.check(a.device, v.name, (a_mn, not b_first, a.dtype),
                                lambda: self_check(a.device, v, a_mn, not b_first, a.dtype, self.launch),
                                fallback=fallback)

    def try_launch(self, a, b, out, bias=None, residual=None, activation=None, preact=None) -> bool:
        """The op layer's entry: launches, or False (Triton then runs) when the kernel declines (a pre-activation
        output, an out dtype other than the inputs') or fails; never raises."""
        if preact is not None or out.dtype != a.dtype:
            return False
        return self.guard.run(self.launch, a, b, out, bias=bias, residual=residual, activation=activation,
                              **(self.residual_launch(a, b, residual) or self.tuned_launch(a, b)))

    def backend(self, name: str, kernel: str, archs: tuple[int, ...], env: tuple[str, ...] = ()):
        """The family's "cuda" record for the gemm op: these hooks, its guard's measurements as provenance."""
        return cuda_backend("gemm", name, kernel, archs, env=env, constraints=self.constraints,
                            preferred=self.preferred, ready=self.ready, launch=self.try_launch,
                            measured=self.guard.measured)
