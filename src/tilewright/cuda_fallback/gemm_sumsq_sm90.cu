// GEMM for Hopper (sm_90a) that also returns its output rows' sums of squares: out = act(A @ B + bias) + residual
// as gemm_sm90.cu, plus sumsq_part[pn, r] = sum over tile column pn of out[r, n]^2 (the stored, rounded values) - a
// pre-norm transformer's residual stream hands them to the RMSNorm after it, which then sums nothing itself. The
// persistent warp-specialized GEMM of gemm_sm90.cu with its TW_SUMSQ_OUT switch on (that file's header has the
// design); gemm_sumsq_sm90.py is the host side. One kernel body: no copy of the pipeline.
#ifndef TW_SUMSQ_OUT
#define TW_SUMSQ_OUT 1
#endif
#include "gemm_sm90.cu"
