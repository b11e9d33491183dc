// RMSNorm-fused GEMM for Hopper (sm_90a): y = act(rms_norm(x, g, eps) @ B + bias) + residual, rstd saved for the
// backward. The persistent warp-specialized GEMM of gemm_sm90.cu with its TW_NORM_A switch on: by default A goes
// through registers (ldmatrix -> x*g -> register-A wgmma, row sums in the consumers); with TW_NORM_XFORM (the
// host's "-xf" variants, measured slower) transform warps of the producer warpgroup rewrite x as x*g in smem and keep
// the row sums, and the consumers run the plain SS mainloop; rstd in the epilogue either way. See that file for the
// design and rmsnorm_gemm_sm90.py for the host side. One kernel body, several builds: no copy of the pipeline.
#define TW_NORM_A 1
#include "gemm_sm90.cu"
