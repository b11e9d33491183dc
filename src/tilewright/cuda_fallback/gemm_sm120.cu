// Persistent GEMM on the warp-level tensor cores: out = act(A @ B + bias) + residual, fp32 accumulation.
// ldmatrix.x4 + mma.sync.m16n8k16 from a TMA-filled shared-memory ring. This is the GEMM path for sm_120/121
// (RTX 50xx / RTX PRO 6000 Blackwell: no WGMMA, no TMEM, 99 KB of shared memory per block); every instruction it
// uses exists from sm_90 on (TMA, mbarrier try_wait.parity), so the same source is built and tested for sm_90.
//
// CTA = CONSUMER_WARPS + 1 warps.
//   Last warp, lane 0 (producer): TMA loads of every k-block of every tile this CTA owns into a STAGES-deep ring
//     (128B swizzle, BK = 64 = one 128-byte swizzle row of 16-bit elements), full/empty mbarriers with parity.
//   Consumer warps (WARPS_M x WARPS_N, each a WM x WN sub-tile): wait full[s], ldmatrix the fragments of ALL four
//     k16-steps of the stage into registers, release the stage (empty[s]) at once, then run the stage's MMAs from
//     registers. With only 2-3 stages fitting in 99 KB, releasing before the MMAs instead of after them gives the
//     producer a whole stage of MMA time to refill the slot - the register-resident-fragment trick.
//   Epilogue: + bias, activation, + residual (row r read at (r / P, r % P), arbitrary strides) in fp32, one
//   rounding, 4-byte stores straight from the accumulator fragments (masked at the M/N tails). The producer keeps
//   loading the next tile's k-blocks meanwhile (persistence hides the epilogue's latency behind TMA, not MMAs).
// Tails: TMA zero-fills out-of-bounds loads (M, N and K), so the MMAs need no masks.
// Tile order: the same mapping as the sm_90a kernel and triton_kernels/tile_order.py (ptx/gemm_common.cuh).
//
// Compile-time variant (-D): TW_BM, TW_BN, TW_STAGES, TW_WARPS_M, TW_WARPS_N, TW_A_MN (A stored M-major), TW_B_MN
// (B stored N-major, i.e. a row-major (K, N) matrix), TW_FP16, and the epilogue TW_ACT, TW_BIAS, TW_RES.
#include "ptx/common.cuh"
#include "ptx/gemm_common.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/mma_sync.cuh"
#include "ptx/st_global.cuh"
#include "ptx/tma.cuh"

#ifndef TW_BM
#define TW_BM 128
#endif
#ifndef TW_BN
#define TW_BN 128
#endif
#ifndef TW_STAGES
#define TW_STAGES 3
#endif
#ifndef TW_WARPS_M
#define TW_WARPS_M 2
#endif
#ifndef TW_WARPS_N
#define TW_WARPS_N 4
#endif
#ifndef TW_B_MN
#define TW_B_MN 1
#endif

namespace tw {

constexpr int BM = TW_BM;
constexpr int BN = TW_BN;
constexpr int BK = 64;  // one 128-byte swizzle row of 16-bit elements
constexpr int STAGES = TW_STAGES;
constexpr int WARPS_M = TW_WARPS_M;
constexpr int WARPS_N = TW_WARPS_N;
constexpr int CONSUMER_WARPS = WARPS_M * WARPS_N;
constexpr int THREADS = 32 * (CONSUMER_WARPS + 1);
constexpr bool A_MN = TW_A_MN != 0;
constexpr bool B_MN = TW_B_MN != 0;
constexpr bool FP16 = TW_FP16 != 0;
constexpr int WM = BM / WARPS_M;  // rows of one consumer warp
constexpr int WN = BN / WARPS_N;  // columns of one consumer warp
constexpr int MT = WM / 16;       // m16 MMA tiles per warp
constexpr int NT = WN / 8;        // n8 MMA tiles per warp
constexpr int KS = BK / 16;       // k16 steps per stage
constexpr int A_STAGE = BM * BK * 2;
constexpr int B_STAGE = BN * BK * 2;
constexpr int STAGE_BYTES = A_STAGE + B_STAGE;
constexpr int BAR_OFFSET = STAGES * STAGE_BYTES;
constexpr int SMEM_BYTES = 1024 + BAR_OFFSET + 2 * STAGES * 8;  // + slack to align the base to 1024
// Registers per consumer thread: accumulators + the fragments of one whole stage (the trick above). The cap keeps
// the total under the 224 a 288-thread CTA gets (65536 / 288, rounded down to 8) with ~50 left for addressing and
// the epilogue - measured 0 spills with ptxas at 128x128 (2 x 4 warps of 64 x 32).
constexpr int FRAG_REGS = MT * NT * 4 + KS * (MT * 4 + NT * 2);

static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16 x 16 (ldmatrix.x4 covers 2 n8 tiles)");
static_assert(!A_MN || BM % 64 == 0, "M-major A is loaded in 64-row TMA boxes");
static_assert(!B_MN || BN % 64 == 0, "N-major B is loaded in 64-column TMA boxes");
static_assert(BM <= 256 && BN <= 256, "TMA boxes hold at most 256 rows");
static_assert(SMEM_BYTES <= 101376, "over sm_120's 99 KB per-block shared memory");
static_assert(FRAG_REGS <= 176, "accumulators + one stage of fragments would not fit the register budget");

// Shared address of the 16-byte row that lane `lane` supplies to ldmatrix.x4 for matrix q = lane / 8, row lane % 8.
// K-major operand (rows = M or N, 128 bytes of K each): 8x8 matrix (row block rb, k chunk kc) -> row rb*8 + lane%8,
// chunk kc. MN-major operand (rows = K, 128 bytes = 64 M/N elements each, one 8 KB block per 64 of M/N): matrix
// (k block kb, mn chunk mc). 128B swizzle: 16-byte chunk c of row r sits at chunk c ^ (r % 8) (1024-byte aligned
// tile), which also makes each 8-lane phase of ldmatrix hit 8 distinct bank groups.
TW_DEVICE tw_u32 kmajor_addr(tw_u32 base, int row, int chunk) {
  return base + row * 128 + ((chunk ^ (row & 7)) << 4);
}
TW_DEVICE tw_u32 mnmajor_addr(tw_u32 base, int krow, int mn) {
  return base + (mn >> 6) * (BK * 128) + krow * 128 + ((((mn & 63) >> 3) ^ (krow & 7)) << 4);
}


}  // namespace tw

using namespace tw;

// A: K-major -> map over (K, M), box (64, BM); M-major -> map over (M, K), box (64, 64), BM/64 boxes.
// B: N-major -> map over (N, K), box (64, 64), BN/64 boxes; K-major -> map over (K, N), box (64, BN).
// out: row-major (M, N) with row stride ldo (elements, even). bias: (N,) when TW_BIAS. res (TW_RES): element (r, n) at
// res[(r / res_period) * rs0 + (r % res_period) * rs1 + n * rs2].
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    tw_gemm_mma(const __grid_constant__ TwTensorMap tm_a, const __grid_constant__ TwTensorMap tm_b,
                unsigned short* __restrict__ out, long long ldo, const unsigned short* __restrict__ bias,
                const unsigned short* __restrict__ res, long long rs0, long long rs1, long long rs2, int res_period,
                int M, int N, int K, int tile_order, int group) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ unsigned char smem_raw[];
  const tw_u32 sbase = (smem_u32(smem_raw) + 1023) & ~1023u;  // 128B swizzle atoms need 1024-byte alignment
  const tw_u32 bar_full = sbase + BAR_OFFSET;
  const tw_u32 bar_empty = bar_full + STAGES * 8;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int num_m = (M + BM - 1) / BM;
  const int num_n = (N + BN - 1) / BN;
  const int num_tiles = num_m * num_n;
  const int kt = (K + BK - 1) / BK;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bar_full + 8 * s, 1);                // the producer's arrive.expect_tx (+ the TMA bytes)
      mbar_init(bar_empty + 8 * s, CONSUMER_WARPS);  // lane 0 of every consumer warp, after its ldmatrix reads
    }
    fence_mbarrier_init();  // inits visible to the other threads and to the TMA unit before first use
  }
  __syncthreads();

  if (warp == CONSUMER_WARPS) {
    // ---------------- producer ----------------
    if (lane == 0) {
      tma_prefetch_desc(&tm_a);
      tma_prefetch_desc(&tm_b);
      int s = 0;
      tw_u32 phase = 0;
      for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
        int pm, pn;
        tile_coords(t, num_m, num_n, tile_order, group, pm, pn);
        const int m0 = pm * BM, n0 = pn * BN;
        for (int kb = 0; kb < kt; ++kb) {
          const tw_u32 full = bar_full + 8 * s;
          mbar_wait(bar_empty + 8 * s, phase ^ 1);  // parity 1 of a fresh barrier counts as done: first lap free
          mbar_arrive_expect_tx(full, STAGE_BYTES);  // OOB-filled bytes count too, so always the full stage
          const tw_u32 sa = sbase + s * STAGE_BYTES;
          const tw_u32 sb = sa + A_STAGE;
          const int k0 = kb * BK;
          tma_load_stage<A_MN, B_MN, BM, BN, BK>(sa, sb, &tm_a, &tm_b, full, m0, n0, k0);
          if (++s == STAGES) {
            s = 0;
            phase ^= 1;
          }
        }
      }
    }
    return;  // no CTA-wide barrier follows: the consumers never wait on the producer warp again
  }

  // ---------------- consumers ----------------
  const int warp_m = warp / WARPS_N;
  const int warp_n = warp % WARPS_N;
  const int q = lane >> 3;  // which 8x8 matrix of an ldmatrix.x4 this lane addresses
  const int r8 = lane & 7;  // which row of it
  int s = 0;
  tw_u32 phase = 0;
  for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
    int pm, pn;
    tile_coords(t, num_m, num_n, tile_order, group, pm, pn);
    const int m0 = pm * BM, n0 = pn * BN;
    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    for (int kb = 0; kb < kt; ++kb) {
      mbar_wait(bar_full + 8 * s, phase);  // acquire: the stage's TMA bytes are visible
      const tw_u32 sa = sbase + s * STAGE_BYTES;
      const tw_u32 sb = sa + A_STAGE;
      tw_u32 af[KS][MT][4];
      tw_u32 bfr[KS][NT][2];
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int mrow = warp_m * WM + mt * 16;
          // matrices: 0 = (m 0-7, k 0-7), 1 = (m 8-15, k 0-7), 2 = (m 0-7, k 8-15), 3 = (m 8-15, k 8-15)
          if constexpr (A_MN) ldmatrix_x4_trans(mnmajor_addr(sa, ks * 16 + (q >> 1) * 8 + r8, mrow + (q & 1) * 8),
                                                af[ks][mt]);
          else ldmatrix_x4(kmajor_addr(sa, mrow + (q & 1) * 8 + r8, ks * 2 + (q >> 1)), af[ks][mt]);
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          const int ncol = warp_n * WN + np * 16;
          // matrices: 0 = (n 0-7, k 0-7), 1 = (n 0-7, k 8-15), 2 = (n 8-15, k 0-7), 3 = (n 8-15, k 8-15)
          tw_u32 r[4];
          if constexpr (B_MN) ldmatrix_x4_trans(mnmajor_addr(sb, ks * 16 + (q & 1) * 8 + r8, ncol + (q >> 1) * 8), r);
          else ldmatrix_x4(kmajor_addr(sb, ncol + (q >> 1) * 8 + r8, ks * 2 + (q & 1)), r);
          bfr[ks][2 * np][0] = r[0];
          bfr[ks][2 * np][1] = r[1];
          bfr[ks][2 * np + 1][0] = r[2];
          bfr[ks][2 * np + 1][1] = r[3];
        }
      }
      // Release the stage before the MMAs. __syncwarp orders every lane's ldmatrix reads before lane 0's arrive
      // (whose release semantics is cumulative); the producer's acquire-wait then orders its TMA overwrite after.
      __syncwarp();
      if (lane == 0) mbar_arrive(bar_empty + 8 * s);
      if (++s == STAGES) {
        s = 0;
        phase ^= 1;
      }
#pragma unroll
      for (int ks = 0; ks < KS; ++ks)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            if constexpr (FP16) mma_m16n8k16_f16(acc[mt][nt], af[ks][mt], bfr[ks][nt][0], bfr[ks][nt][1]);
            else mma_m16n8k16_bf16(acc[mt][nt], af[ks][mt], bfr[ks][nt][0], bfr[ks][nt][1]);
          }
    }

    // ---- epilogue: fragment (g = lane/4, t = lane%4) holds rows g, g+8 and columns 2t, 2t+1 of each m16n8 tile ----
    const int g = lane >> 2;
    const int tq = lane & 3;
    float b0[NT], b1[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = n0 + warp_n * WN + nt * 8 + 2 * tq;
      b0[nt] = 0.0f;
      b1[nt] = 0.0f;
      if constexpr (TW_BIAS) {
        if (col < N) {  // N is a multiple of 8 (launcher constraint), so col < N implies col + 1 < N
          b0[nt] = elem_to_f32<FP16>(bias[col]);
          b1[nt] = elem_to_f32<FP16>(bias[col + 1]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + warp_m * WM + mt * 16 + g + 8 * h;
        if (row >= M) continue;
        const long long roff = TW_RES ? (long long)(row / res_period) * rs0 + (long long)(row % res_period) * rs1 : 0;
        unsigned short* orow = out + (long long)row * ldo;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int col = n0 + warp_n * WN + nt * 8 + 2 * tq;
          if (col >= N) continue;
          const unsigned short* rp = TW_RES ? res + roff + (long long)col * rs2 : nullptr;
          const float v0 = epilogue_value<TW_ACT>(acc[mt][nt][2 * h], b0[nt], rp);
          const float v1 = epilogue_value<TW_ACT>(acc[mt][nt][2 * h + 1], b1[nt], TW_RES ? rp + rs2 : nullptr);
          st_global_b32(orow + col, pack_pair<FP16>(v0, v1));
        }
      }
    }
  }
#endif
}
