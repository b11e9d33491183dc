"""FP8 quantization with block scales, one pass over the input: each program loads one block of x - TILE_M (16)
rows x 128 columns with one scale per row (the 1 x 128 activation recipe of FP8 training), or 128 x 128 with one
scale (the weight recipe) - takes its absolute maximum, and writes the block's dequantization scale (amax / the
format's largest value, so that x ~ q * scale) and q = x / scale cast to FP8.

NaN entries are left out of the maximum (each stays NaN in q; the rest of its block is scaled by the others), an
infinite one makes its block's scale infinite. Only core ``tl`` ops, so the interpreter runs the same code - except
the final cast: Triton 3.6's interpreter rounds fp32 -> FP8 without the exponent carry (-1.969 became -1.0, not
-2.0), so under it the kernel stores q in fp32 and torch casts it; on a GPU the cast is the kernel's (one pass).
"""
import torch
import triton
import triton.language as tl

# smallest amax a scale is formed from: an all-zero block gets a tiny finite scale (q = 0), not 0 / 0
MIN_AMAX = 1e-12
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


@triton.jit
def _quantize_fp8_kernel(x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_xk, stride_qm, stride_sm, stride_sk,
                         fp8_max, min_amax, TILE_M: tl.constexpr, BLOCK_K: tl.constexpr, PER_ROW: tl.constexpr):
    # (q_ptr is FP8 on a GPU; fp32 under the interpreter, whose FP8 cast is wrong - see the module docstring)
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_m * TILE_M + tl.arange(0, TILE_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows[:, None] < M) & (cols[None, :] < K)
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + cols[None, :].to(tl.int64) * stride_xk, mask=mask,
                other=0.0).to(tl.float32)
    ax = tl.where(x == x, tl.abs(x), 0.0)  # NaN out of the maximum (a reduction's NaN handling differs by target)
    if PER_ROW:
        amax = tl.max(ax, axis=1)
    else:
        amax = tl.max(tl.max(ax, axis=1), axis=0)
    # comparisons, not tl.maximum / tl.minimum: on the GPU those are fmax / fmin, which would drop a NaN
    # IEEE divisions (div_rn): fp32 `/` compiles to an approximate divide on the GPU, and the scales and q must be
    # what the torch formula (ops/scaled_mm.quantize_fp8_reference) computes, bit for bit
    scale = tl.div_rn(tl.where(amax < min_amax, min_amax, amax), fp8_max)
    if PER_ROW:
        q = tl.div_rn(x, scale[:, None])
        tl.store(s_ptr + rows * stride_sm + pid_k * stride_sk, scale, mask=rows < M)
    else:
        q = tl.div_rn(x, scale)
        tl.store(s_ptr + pid_m * stride_sm + pid_k * stride_sk, scale)
    # |x| <= amax, so |q| exceeds the format's largest value only by the division's rounding: clamp before the cast
    q = tl.where(q > fp8_max, fp8_max, q)
    q = tl.where(q < -fp8_max, -fp8_max, q)
    tl.store(q_ptr + rows[:, None].to(tl.int64) * stride_qm + cols[None, :], q.to(q_ptr.dtype.element_ty),
             mask=mask)


def launch_quantize_fp8(x: torch.Tensor, block_m: int, block_k: int, dtype: torch.dtype):
    """(q (M, K) contiguous in ``dtype``, scale fp32) for a 2-D ``x`` read through its strides; ``block_m`` 1
    (scale (M, ceil(K / block_k))) or equal to ``block_k`` (scale (ceil(M / block_m), ceil(K / block_k)))."""
    from .._env import interpreting
    from ._runtime import retry_after_oom

    M, K = x.shape
    q = torch.empty((M, K), device=x.device, dtype=torch.float32 if interpreting() else dtype)
    per_row = block_m == 1
    tile_m = 16 if per_row else block_m  # per-row blocks: 16 rows a program (one row would be a 128-wide program)
    scale = torch.empty((M if per_row else triton.cdiv(M, block_m), triton.cdiv(K, block_k)), device=x.device,
                        dtype=torch.float32)
    if M and K:
        grid = (triton.cdiv(M, tile_m), triton.cdiv(K, block_k))
        retry_after_oom(lambda: _quantize_fp8_kernel[grid](
            x, q, scale, M, K, x.stride(0), x.stride(1), q.stride(0), scale.stride(0), scale.stride(1),
            FP8_MAX[dtype], MIN_AMAX, TILE_M=tile_m, BLOCK_K=block_k, PER_ROW=per_row, num_warps=4 if per_row else 8))
    return (q.to(dtype) if q.dtype != dtype else q), scale
