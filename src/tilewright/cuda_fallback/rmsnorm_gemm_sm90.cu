// RMSNorm-fused GEMM for Hopper (sm_90a): y = act(rms_norm(x, g, eps) @ B + bias) + residual, rstd saved for the
// backward. The persistent warp-specialized GEMM of gemm_sm90_pingpong.cu with its TW_NORM_A switch on: with
// TW_NORM_XFORM (the default variants) transform warps of the producer warpgroup rewrite x as x*g in smem and keep the
// row sums, the consumers run the plain SS mainloop; without it A goes through registers (ldmatrix -> x*g ->
// register-A wgmma); rstd in the epilogue either way. See that file for the design and rmsnorm_gemm.py for the host
// side. One kernel body, several builds: no copy of the pipeline.
#define TW_NORM_A 1
#include "gemm_sm90_pingpong.cu"
