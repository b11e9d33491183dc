// RMSNorm-linear for Hopper (sm_90a) with the norm out of the mainloop: y = act(rstd * (x @ (g * W)^T) + bias) +
// residual, the norm weight folded into the GEMM's B by the host and rstd computed in the epilogue from each row's
// sum of squares (an input). The persistent warp-specialized GEMM of gemm_sm90.cu with its TW_NORM_SUMSQ switch on
// (that file's header has the design); rstd_gemm_sm90.py is the host side. One kernel body: no copy of the pipeline.
#ifndef TW_NORM_SUMSQ
#define TW_NORM_SUMSQ 1
#endif
#include "gemm_sm90.cu"
