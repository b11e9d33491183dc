"""Encoders (and decoders, for tests and debugging) of the two descriptors a ``tcgen05.mma`` takes on sm_100a.

The kernel (``gemm_sm100.cu``) receives the instruction descriptor and the high fields of its shared-memory
descriptors from these functions as kernel arguments, so this module is the one encoding that runs; the constexpr
mirrors in ``ptx/tcgen05.cuh`` are static_asserted against the same examples the CPU tests check here.

Instruction descriptor, kind::f16 / kind::f8f6f4 (32 bits; PTX ISA, "Instruction descriptor"):

    bits  0-1 sparsity selector (0)     bit 2 sparse (0 = dense)      bit 3 saturate (0)
    bits  4-5 D format: 0 F16, 1 F32    bit 6 reserved
    bits  7-9 A format, 10-12 B format: kind::f16 0 F16, 1 BF16 (2 TF32 for kind::tf32);
                                        kind::f8f6f4 0 E4M3, 1 E5M2, 3 E2M3, 4 E3M2, 5 E2M1
    bit  13/14 negate A/B               bit 15/16 A/B major: 0 K-major, 1 MN-major
    bits 17-22 N >> 3                   bit 23 reserved
    bits 24-28 M >> 4                   bit 29 reserved               bits 30-31 max shift (.ws only, 0)

Shared-memory matrix descriptor (64 bits; PTX ISA, "Shared memory descriptor", tcgen05 variant):

    bits  0-13 start address >> 4       bits 16-29 leading byte offset >> 4 (LBO)
    bits 32-45 stride byte offset >> 4 (SBO)
    bits 46-47 version: 1 on sm_100 (Hopper's wgmma descriptor has no such field)
    bits 49-51 base offset (0: tiles on 1024-byte boundaries)   bit 52 LBO mode (0: byte offset)
    bits 61-63 layout: 0 none, 1 128B with 32B atomic base, 2 128B, 4 64B, 6 32B
               (Hopper: bits 62-63 with 1 = 128B - copying a Hopper encoder here silently yields garbage)

For a 128B-swizzled K-major tile whose rows are one 128-byte swizzle row (BK = 64 16-bit elements): SBO = 1024
(eight rows of 128 bytes = one swizzle atom), LBO unused (16, i.e. 1 after the shift, as CUTLASS writes it).
MN-major (rows run along K, 64 M/N elements per 128-byte row): LBO = bytes between 64-element M/N blocks,
SBO = 1024 (eight K rows) - the same meanings as on Hopper, where the sm_90a kernel of this package ran them.
"""
from __future__ import annotations

F16_FORMATS = {"float16": 0, "bfloat16": 1}
F8_FORMATS = {"e4m3": 0, "e5m2": 1}
LAYOUTS = {"none": 0, "128B_base32B": 1, "128B": 2, "64B": 4, "32B": 6}
VALID_M = (64, 128)  # cta_group::1
# M per cta_group this package encodes: cta_group::2 (a CTA pair, 128 rows of D in each CTA's TMEM) only as M = 256
VALID_M_BY_GROUP = {1: VALID_M, 2: (256,)}
# K of one dense MMA: always 32 bytes of each K-major row (16 x 16-bit, 32 x 8-bit), so a 128-byte swizzle row holds
# four MMAs' worth of K for either kind (BK = 64 16-bit or 128 8-bit elements per k-block)
MMA_K = {"f16": 16, "f8f6f4": 32}
ELEMENT_BYTES = {"f16": 2, "f8f6f4": 1}


def k_block(kind: str = "f16", swizzle_bytes: int = 128) -> int:
    """Elements of K in one swizzle row of ``kind``'s operands (the TMA box's inner extent): 64 or 128 for 128B."""
    return swizzle_bytes // ELEMENT_BYTES[kind]


def instr_desc(m: int, n: int, a_format: str = "bfloat16", b_format: str | None = None, *, a_mn: bool = False,
               b_mn: bool = False, kind: str = "f16", d_f32: bool = True, cta_group: int = 1) -> int:
    """32-bit instruction descriptor of a dense ``tcgen05.mma.cta_group::{1,2}.kind::{f16,f8f6f4}`` of shape M x N
    (for cta_group::2, M counts the pair's rows: 256 = 128 per CTA; the M field is still M >> 4)."""
    b_format = b_format or a_format
    table = F16_FORMATS if kind == "f16" else F8_FORMATS if kind == "f8f6f4" else None
    if table is None:
        raise ValueError(f"kind {kind!r}: expected 'f16' or 'f8f6f4'")
    if a_format not in table or b_format not in table:
        raise ValueError(f"formats {a_format}/{b_format} are not valid for kind::{kind} ({sorted(table)})")
    if cta_group not in VALID_M_BY_GROUP:
        raise ValueError(f"cta_group {cta_group}: expected 1 or 2")
    if m not in VALID_M_BY_GROUP[cta_group]:
        raise ValueError(f"M = {m}: cta_group::{cta_group} takes M in {VALID_M_BY_GROUP[cta_group]} here")
    step = 8 if m == 64 else 16
    if n % step or not step <= n <= 256:
        raise ValueError(f"N = {n}: must be a multiple of {step} in [{step}, 256] for M = {m}")
    if kind == "f16" and not d_f32:
        d = 0
    else:
        d = 1  # kind::f8f6f4 accumulates in F32 (F16 D exists but this package never uses it)
    return (d << 4) | (table[a_format] << 7) | (table[b_format] << 10) | (int(a_mn) << 15) | (int(b_mn) << 16) | \
        ((n >> 3) << 17) | ((m >> 4) << 24)


def decode_instr_desc(desc: int) -> dict:
    """Fields of an instruction descriptor (inverse of :func:`instr_desc`, plus the reserved bits for checks)."""
    return {"sparse_id2": desc & 3, "sparse": (desc >> 2) & 1, "saturate": (desc >> 3) & 1,
            "d_format": (desc >> 4) & 3, "a_format": (desc >> 7) & 7, "b_format": (desc >> 10) & 7,
            "negate_a": (desc >> 13) & 1, "negate_b": (desc >> 14) & 1, "a_mn": (desc >> 15) & 1,
            "b_mn": (desc >> 16) & 1, "n": ((desc >> 17) & 0x3F) << 3, "m": ((desc >> 24) & 0x1F) << 4,
            "reserved": ((desc >> 6) & 1) | ((desc >> 23) & 1) << 1 | ((desc >> 29) & 1) << 2,
            "max_shift": (desc >> 30) & 3}


def smem_desc_hi(lbo_bytes: int, sbo_bytes: int, layout: str = "128B") -> int:
    """The descriptor without its start address (the kernel ORs in ``addr >> 4`` per stage and k-step)."""
    for name, v in (("LBO", lbo_bytes), ("SBO", sbo_bytes)):
        if v % 16 or not 0 <= v >> 4 < 1 << 14:
            raise ValueError(f"{name} = {v} bytes: must be a multiple of 16 below 256 KB")
    return ((lbo_bytes >> 4) << 16) | ((sbo_bytes >> 4) << 32) | (1 << 46) | (LAYOUTS[layout] << 61)


def smem_desc(addr: int, lbo_bytes: int, sbo_bytes: int, layout: str = "128B") -> int:
    """A complete 64-bit shared-memory descriptor for a tile at shared-window address ``addr``."""
    if addr % 16 or not 0 <= addr < 1 << 18:
        raise ValueError(f"start address 0x{addr:x}: must be 16-byte aligned and below 256 KB")
    # no 1024-byte check: k-steps legitimately start inside a swizzle atom (+32 B per k16 step, base offset 0)
    return smem_desc_hi(lbo_bytes, sbo_bytes, layout) | (addr >> 4)


def decode_smem_desc(desc: int) -> dict:
    """Fields of a shared-memory descriptor, byte values where the field is a shifted byte count."""
    layout = (desc >> 61) & 7
    return {"addr": (desc & 0x3FFF) << 4, "lbo": ((desc >> 16) & 0x3FFF) << 4, "sbo": ((desc >> 32) & 0x3FFF) << 4,
            "version": (desc >> 46) & 3, "base_offset": (desc >> 49) & 7, "lbo_mode": (desc >> 52) & 1,
            "layout": next((k for k, v in LAYOUTS.items() if v == layout), f"reserved({layout})")}


def operand_desc_hi(mn_major: bool, bk: int = 64) -> int:
    """High descriptor fields of one 128B-swizzled operand tile as gemm_sm100.cu stores it: K-major
    (rows = M or N, 128 bytes of K each) or MN-major (rows = K, one bk x 128-byte block per 64 of M/N)."""
    if mn_major:
        return smem_desc_hi(bk * 128, 1024)
    return smem_desc_hi(16, 1024)
