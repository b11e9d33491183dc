// RMSNorm-fused GEMM for Hopper (sm_90a): y = act(rms_norm(x, g, eps) @ B + bias) + residual, rstd saved for the
// backward. The persistent warp-specialized GEMM of gemm_sm90_pingpong.cu with its TW_NORM_A switch on (A through
// registers: ldmatrix -> x*g -> register-A wgmma, row sums of squares beside it, rstd in the epilogue); see that file
// for the design and rmsnorm_gemm.py for the host side. One kernel body, two builds: no copy of the pipeline.
#define TW_NORM_A 1
#include "gemm_sm90_pingpong.cu"
