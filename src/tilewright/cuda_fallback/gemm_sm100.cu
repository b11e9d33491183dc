// Persistent warp-specialized GEMM for datacenter Blackwell (sm_100a / sm_103a): out = act(A @ B + bias) + residual,
// fp32 accumulation in tensor memory (TMEM).
//
// NEVER RUN: no sm_100 GPU has been available to the project. This file compiles for sm_100a and passes the SASS
// checks of build-check (UTCHMMA, TMEM alloc, UTMALDG, 0 spills); the router only routes here after the first-use
// self-check passed on the device, and falls back to Triton with one warning otherwise.
//
// CTA = 6 warps (cta_group::1, no cluster):
//   warp 0, lane 0  TMA producer: k-blocks of A and B into a STAGES-deep smem ring (128B swizzle, BK = 64 =
//                   one 128-byte swizzle row of 16-bit elements); full/empty mbarriers with parity.
//   warp 1          TMEM owner: allocates 2 x BN columns (two accumulators), relinquishes the allocation permit,
//                   deallocates at the end (alloc and dealloc must be the same warp). Lane 0 is the MMA issuer:
//                   one thread issues every tcgen05.mma (M = 128, N = BN, K = 16 each) into accumulator it & 1,
//                   releases each smem stage with tcgen05.commit -> empty[s] (arrives when those MMAs finished
//                   reading it) and hands a finished accumulator over with tcgen05.commit -> tmem_full[buf].
//   warps 2-5       epilogue: warp w may only touch TMEM lanes 32 * (w % 4) .. + 31, i.e. rows of the tile;
//                   tcgen05.ld 32x32b.x16 (16 fp32 columns of one row per thread) + wait::ld, + bias, activation,
//                   + residual in fp32, one rounding, 2 x 16-byte stores per chunk, then arrive tmem_empty[buf].
//   Double-buffered accumulators: the MMA warp runs tile i + 1's K loop into the other buffer while the epilogue
//   drains tile i (2 x BN <= 512 columns).
// Descriptors: instruction descriptor and smem-descriptor high bits come from sm100_descriptors.py as kernel
// arguments (CPU unit-tested against the PTX ISA tables); the static_asserts below pin ptx/tcgen05.cuh's constexpr
// mirror to the same examples.
// Compile-time variant (-D): TW_BN (64..256), TW_STAGES, TW_A_MN, TW_B_MN, TW_FP16, TW_ACT, TW_BIAS, TW_RES.
//
// FP8 variant (TW_FP8=1, never run either): A and B are 8-bit (e4m3 or e5m2, mixed allowed - the formats live in the
// run-time instruction descriptor, so one build serves all four pairs), K-major only, tcgen05.mma kind::f8f6f4
// (K = 32 per instruction), fp32 accumulation in TMEM. A 128-byte swizzle row holds BK = 128 fp8 elements, so a
// stage has the same bytes, boxes and smem-descriptor fields as the 16-bit build and the k-step inside a row is
// still +32 bytes. The epilogue scales the fp32 accumulator before bias / activation / residual (the
// torch._scaled_mm order): TW_SCALE=1 per-tensor (scale_a[0] * scale_b[0]), TW_SCALE=2 row-wise (scale_a[row] *
// scale_b[col], fp32 vectors of M and N). Output (and bias / residual) are bf16, or fp16 with TW_FP16.
//
// 2-CTA variant (TW_CTA2=1, never run either; K-major A and B): a 2x1 cluster (__cluster_dims__, so a plain
// cuLaunchKernel with an even grid launches it as clusters) computes 256 x BN tiles with tcgen05.mma cta_group::2
// (M = 256). CTA rank r loads A rows m0 + 128 r and B rows n0 + r BN / 2 into its own smem (same offsets in both
// CTAs); both TMA loads complete_tx on rank 0's full[s], where rank 0's producer expected both CTAs' bytes. Rank 0's
// warp-1 lane 0 issues every MMA; its commits multicast to empty[s] / tmem_full[buf] in both CTAs. Each CTA's
// epilogue drains its own TMEM (its 128 rows) and arrives on rank 0's tmem_empty[buf] (count 2 x 128). TMEM is
// allocated with cta_group::2 by warp 1 of each CTA. Cluster barriers after init and before teardown.
#include "ptx/common.cuh"
#include "ptx/gemm_common.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/st_global.cuh"
#include "ptx/tcgen05.cuh"
#include "ptx/tma.cuh"

#ifndef TW_BN
#define TW_BN 256
#endif
#ifndef TW_STAGES
#define TW_STAGES 4
#endif
#ifndef TW_B_MN
#define TW_B_MN 0
#endif
#ifndef TW_CTA2
#define TW_CTA2 0
#endif
#if TW_CTA2
#define TW_CLUSTER_ATTR __cluster_dims__(2, 1, 1)
#else
#define TW_CLUSTER_ATTR
#endif
#include "ptx/fp8_scale.cuh"  // TW_FP8 (default 0), TW_SCALE, TW_SCALE_PARAMS

namespace tw {

constexpr int BM = 128;  // cta_group::1 MMA M; one TMEM lane per output row
constexpr int BN = TW_BN;
constexpr bool FP8 = TW_FP8 != 0;
constexpr int ELEM_BYTES = FP8 ? 1 : 2;
constexpr int BK = 128 / ELEM_BYTES;   // one 128-byte swizzle row of K per operand row: 64 x 16-bit or 128 x 8-bit
constexpr int MMA_K = 32 / ELEM_BYTES;  // K of one tcgen05.mma: 32 bytes of each row (16 for kind::f16, 32 for f8f6f4)
constexpr int SCALE = TW_SCALE;
constexpr bool CTA2 = TW_CTA2 != 0;
constexpr int PAIR = CTA2 ? 2 : 1;        // CTAs per cluster (per output tile)
constexpr int TILE_M = BM * PAIR;        // output rows per tile: 128, or 256 for a CTA pair
constexpr int B_ROWS = BN / PAIR;        // B rows (N) this CTA loads: a pair splits B's N between its CTAs
constexpr int STAGES = TW_STAGES;
constexpr bool A_MN = TW_A_MN != 0;
constexpr bool B_MN = TW_B_MN != 0;
constexpr bool FP16 = TW_FP16 != 0;
constexpr int THREADS = 192;
constexpr int EPI_THREADS = 128;
constexpr int A_STAGE = BM * BK * ELEM_BYTES;  // 16 KB either way
constexpr int B_STAGE = B_ROWS * BK * ELEM_BYTES;
constexpr int STAGE_BYTES = A_STAGE + B_STAGE;
constexpr int BAR_OFFSET = STAGES * STAGE_BYTES;
// barriers: full[STAGES], empty[STAGES], tmem_full[2], tmem_empty[2]; then the 4-byte TMEM address slot
constexpr int SMEM_BYTES = 1024 + BAR_OFFSET + (2 * STAGES + 4) * 8 + 16;
// TMEM columns: two fp32 accumulators of BN columns, rounded up to the power of two alloc requires
constexpr int TMEM_COLS = 2 * BN <= 32 ? 32 : 2 * BN <= 64 ? 64 : 2 * BN <= 128 ? 128 : 2 * BN <= 256 ? 256 : 512;

static_assert(BN % 16 == 0 && BN >= 32 && BN <= 256, "M = 128 MMAs take N in 16..256, multiples of 16");
static_assert(BN % 32 == 0 || !B_MN, "N-major B is loaded in 64-column boxes");
static_assert(!B_MN || BN % 64 == 0, "N-major B is loaded in 64-column boxes");
static_assert(2 * BN <= 512, "two accumulators must fit TMEM's 512 columns");
static_assert(SMEM_BYTES <= TW_SMEM_OPTIN_BYTES, "over the sm_100 per-block shared memory limit");
static_assert(!FP8 || (!A_MN && !B_MN), "FP8 build: K-major A and B only (the layout scaled_mm passes)");
static_assert(FP8 ? (SCALE == 1 || SCALE == 2) : SCALE == 0, "TW_SCALE: 1 per-tensor / 2 row-wise, FP8 builds only");
static_assert(!CTA2 || (!A_MN && !B_MN && B_ROWS % 16 == 0), "2-CTA build: K-major operands, BN / 2 rows of B");
static_assert(BK / MMA_K == 4, "four MMAs per k-block, each one 32-byte step along the swizzle row");

// The constexpr mirror of sm100_descriptors.py, checked on the examples tests/cpu/test_sm100_descriptors.py checks.
static_assert(tc_idesc_f16(128, 256, true, false, false) == 0x08400490u, "idesc bf16 M128 N256 K-major");
static_assert(tc_idesc_f16(128, 128, false, false, true) == 0x08210010u, "idesc f16 M128 N128 B MN-major");
static_assert(tc_idesc_f16(64, 64, true, true, true) == 0x04118490u, "idesc bf16 M64 N64 both MN-major");
static_assert(tc_smem_desc_hi(16, 1024, 2) == 0x4000404000010000ull, "smem desc K-major SW128");
static_assert(tc_smem_desc_hi(8192, 1024, 2) == 0x4000404002000000ull, "smem desc MN-major SW128");
static_assert(tc_idesc_f8(128, 256, 0, 0) == 0x08400010u, "idesc e4m3 x e4m3 M128 N256");
static_assert(tc_idesc_f8(128, 128, 0, 1) == 0x08200410u, "idesc e4m3 x e5m2 M128 N128");
static_assert(tc_idesc_f8(128, 256, 1, 1) == 0x08400490u, "idesc e5m2 x e5m2 M128 N256 (bit-equal to bf16's)");
static_assert(tc_idesc_f16(256, 256, true, false, false) == 0x10400490u, "idesc bf16 M256 N256 (cta_group::2)");

}  // namespace tw

using namespace tw;

// A: K-major -> map (K, M), box (64, 128); M-major -> map (M, K), box (64, 64), 2 boxes.
// B: K-major -> map (K, N), box (64, BN); N-major -> map (N, K), box (64, 64), BN/64 boxes.
// idesc: instruction descriptor; a_hi / b_hi: smem-descriptor fields above the start address (sm100_descriptors.py).
// out: row-major (M, N), row stride ldo (elements, multiple of 8). bias (TW_BIAS): (N,). res (TW_RES): element (r, n)
// at res[(r / res_period) * rs0 + (r % res_period) * rs1 + n * rs2].
extern "C" __global__ void TW_CLUSTER_ATTR __launch_bounds__(THREADS, 1)
    tw_gemm_sm100(const __grid_constant__ TwTensorMap tm_a, const __grid_constant__ TwTensorMap tm_b,
                  unsigned short* __restrict__ out, long long ldo, const unsigned short* __restrict__ bias,
                  const unsigned short* __restrict__ res, long long rs0, long long rs1, long long rs2,
                  int res_period, int M, int N, int K, int tile_order, int group, unsigned int idesc,
                  unsigned long long a_hi, unsigned long long b_hi TW_SCALE_PARAMS) {
#if defined(TW_HAS_TCGEN05)
  extern __shared__ unsigned char smem_raw[];
  const tw_u32 sbase = (smem_u32(smem_raw) + 1023) & ~1023u;  // 128B swizzle atoms need 1024-byte alignment
  const tw_u32 bar_full = sbase + BAR_OFFSET;
  const tw_u32 bar_empty = bar_full + 8 * STAGES;
  const tw_u32 bar_tfull = bar_empty + 8 * STAGES;
  const tw_u32 bar_tempty = bar_tfull + 16;
  const tw_u32 tmem_slot = bar_tempty + 16;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int num_m = (M + TILE_M - 1) / TILE_M;
  const int num_n = (N + BN - 1) / BN;
  const int num_tiles = num_m * num_n;
  const int kt = (K + BK - 1) / BK;  // >= 1: the launcher rejects K == 0 (TMEM would be read uninitialised)
  // Tiles are walked per cluster: both CTAs of a pair take the same tile sequence (PAIR == 1: per CTA, as before).
  // TW_TILE0 / TW_TILE_STEP: written out in each role's loop (as blockIdx.x / gridDim.x were) so that the 1-CTA build
  // keeps its SASS; the launcher's grid is a multiple of PAIR (a cluster launch requires it).
#define TW_TILE0 (blockIdx.x / PAIR)
#define TW_TILE_STEP (gridDim.x / PAIR)
  const int rank = CTA2 ? (int)cluster_ctarank() : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bar_full + 8 * s, 1);   // producer's arrive.expect_tx + TMA bytes
      mbar_init(bar_empty + 8 * s, 1);  // one tcgen05.commit by the MMA thread
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(bar_tfull + 8 * b, 1);             // one tcgen05.commit after a tile's last MMA
      // every epilogue thread (of both CTAs for a pair: only rank 0's copy is used), after its last tcgen05.ld
      mbar_init(bar_tempty + 8 * b, EPI_THREADS * PAIR);
    }
    fence_mbarrier_init();  // inits visible to all threads and to the async proxy (TMA, tcgen05.commit)
  }
  if (warp == 1) {
    __syncwarp();
    if constexpr (CTA2) {
      tmem_alloc_cg2(tmem_slot, TMEM_COLS);  // collectively with the peer's warp 1: the same columns in both CTAs
      tmem_relinquish_alloc_permit_cg2();
    } else {
      tmem_alloc(tmem_slot, TMEM_COLS);  // whole warp; writes the TMEM base address to tmem_slot
      tmem_relinquish_alloc_permit();    // we never allocate again: let a co-resident CTA's alloc proceed
    }
  }
  // Publish the TMEM address: alloc's write is ordered by the before/after fence pair around the CTA barrier.
  // A pair syncs the whole cluster instead: the peer must not signal (TMA complete_tx, remote arrive) our barriers
  // before they are initialised, nor we theirs.
  tc_fence_before_sync();
  if constexpr (CTA2) cluster_sync();
  else __syncthreads();
  tc_fence_after_sync();
  const tw_u32 tmem_base = *reinterpret_cast<volatile tw_u32*>(smem_raw + (tmem_slot - smem_u32(smem_raw)));

  if (warp == 0) {
    // ---------------- TMA producer ----------------
    if (lane == 0) {
      tma_prefetch_desc(&tm_a);
      tma_prefetch_desc(&tm_b);
      int s = 0;
      tw_u32 phase = 0;
      for (int t = TW_TILE0; t < num_tiles; t += TW_TILE_STEP) {
        int pm, pn;
        tile_coords(t, num_m, num_n, tile_order, group, pm, pn);
        const int m0 = pm * TILE_M + rank * BM, n0 = pn * BN + rank * B_ROWS;  // this CTA's rows of A and B
        for (int kb = 0; kb < kt; ++kb) {
          const tw_u32 full = bar_full + 8 * s;
          mbar_wait(bar_empty + 8 * s, phase ^ 1);  // fresh barrier: parity 1 counts as complete, first lap free
          // OOB zero-filled bytes count: always the whole stage. A pair: both CTAs' boxes complete on rank 0's
          // full[s] and rank 0 expects both; a peer's complete_tx may land before that expect_tx - the tx-count goes
          // transiently negative, harmless, since the phase cannot complete while rank 0's arrival is pending.
          if (rank == 0) mbar_arrive_expect_tx(full, PAIR * STAGE_BYTES);
          const tw_u32 sa = sbase + s * STAGE_BYTES;
          const tw_u32 sb = sa + A_STAGE;
          const int k0 = kb * BK;
          if constexpr (CTA2) {
            const tw_u32 full0 = mapa_shared(full, 0);
            tma_load_2d_cg2(sa, &tm_a, full0, k0, m0);
            tma_load_2d_cg2(sb, &tm_b, full0, k0, n0);
          } else {
            tma_load_stage<A_MN, B_MN, BM, BN, BK>(sa, sb, &tm_a, &tm_b, full, m0, n0, k0);
          }
          if (++s == STAGES) {
            s = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else if (warp == 1) {
    // ---------------- MMA issuer (one thread) ----------------
    if (lane == 0 && rank == 0) {  // a pair's MMAs are all issued by rank 0 (the peer's warp 1 only owns TMEM)
      int s = 0;
      tw_u32 phase = 0;
      int it = 0;
      for (int t = TW_TILE0; t < num_tiles; t += TW_TILE_STEP, ++it) {
        const int buf = it & 1;
        const tw_u32 d_tmem = tmem_base + buf * BN;  // column offset; lane field 0
        // The epilogue must have drained this accumulator (its use two tiles ago); first use of each is free.
        // (A pair: the peer's arrivals are remote release.cluster ones, so acquire at cluster scope.)
        if constexpr (CTA2) mbar_wait_cluster(bar_tempty + 8 * buf, ((it >> 1) & 1) ^ 1);
        else mbar_wait(bar_tempty + 8 * buf, ((it >> 1) & 1) ^ 1);
        tc_fence_after_sync();  // order our MMAs after the epilogue's tcgen05.ld of this buffer
        for (int kb = 0; kb < kt; ++kb) {
          mbar_wait(bar_full + 8 * s, phase);  // TMA bytes of the stage have landed
          tc_fence_after_sync();
          const tw_u32 sa = sbase + s * STAGE_BYTES;
          const tw_u32 sb = sa + A_STAGE;
#pragma unroll
          for (int k16 = 0; k16 < BK / MMA_K; ++k16) {
            // K-major: the next MMA_K elements (16 x 16-bit or 32 x 8-bit) are the next 32 bytes inside the
            // 128-byte swizzle row (the hardware applies the swizzle to the computed addresses; base offset 0 stays
            // valid because the atom itself is 1024-aligned); MN-major (16-bit only): the next 16 K rows, 16 x 128
            // bytes on.
            const tw_u32 a_off = A_MN ? k16 * 16 * 128 : k16 * 32;
            const tw_u32 b_off = B_MN ? k16 * 16 * 128 : k16 * 32;
            // A pair: rank 0's smem addresses; the hardware reads the peer's halves at the same offsets.
            if constexpr (CTA2 && FP8) {
              tc_mma_f8f6f4_cg2(d_tmem, tc_smem_desc(a_hi, sa + a_off), tc_smem_desc(b_hi, sb + b_off), idesc,
                                (kb | k16) != 0);
            } else if constexpr (CTA2) {
              tc_mma_f16_cg2(d_tmem, tc_smem_desc(a_hi, sa + a_off), tc_smem_desc(b_hi, sb + b_off), idesc,
                             (kb | k16) != 0);
            } else if constexpr (FP8) {
              tc_mma_f8f6f4(d_tmem, tc_smem_desc(a_hi, sa + a_off), tc_smem_desc(b_hi, sb + b_off), idesc,
                            (kb | k16) != 0);
            } else {
              tc_mma_f16(d_tmem, tc_smem_desc(a_hi, sa + a_off), tc_smem_desc(b_hi, sb + b_off), idesc,
                         (kb | k16) != 0);
            }
          }
          // stage s is free once these MMAs have read it (a pair: free in both CTAs, each producer waits its own)
          // (mask 0x3: cluster ranks 0 and 1, the whole 2x1 cluster)
          if constexpr (CTA2) tc_commit_multicast_cg2(bar_empty + 8 * s, 0x3);
          else tc_commit(bar_empty + 8 * s);
          if (++s == STAGES) {
            s = 0;
            phase ^= 1;
          }
        }
        // accumulator complete once every MMA above has finished (a pair: both CTAs' TMEM halves, both epilogues)
        if constexpr (CTA2) tc_commit_multicast_cg2(bar_tfull + 8 * buf, 0x3);
        else tc_commit(bar_tfull + 8 * buf);
      }
    }
  } else {
    // ---------------- epilogue (warps 2..5) ----------------
    const int quarter = warp % 4;  // the TMEM lane quarter (tile rows) this warp may access
    const int row_in_tile = quarter * 32 + lane;
    float tensor_scale = 1.0f;
#if TW_FP8
    // Per-tensor dequantisation factor, read once (plain global loads: the scales are written before the launch).
    if constexpr (SCALE == 1) tensor_scale = scale_a[0] * scale_b[0];
#endif
    int it = 0;
    for (int t = TW_TILE0; t < num_tiles; t += TW_TILE_STEP, ++it) {
      int pm, pn;
      tile_coords(t, num_m, num_n, tile_order, group, pm, pn);
      const int buf = it & 1;
      mbar_wait(bar_tfull + 8 * buf, (it >> 1) & 1);
      __syncwarp();           // lanes leave the spin loop independently; tcgen05.ld is .sync.aligned
      tc_fence_after_sync();  // order our tcgen05.ld after the MMAs the commit covered
      const int row = pm * TILE_M + rank * BM + row_in_tile;  // a pair: each CTA's TMEM holds its 128 rows
      const bool row_ok = row < M;
      const long long roff = TW_RES ? (long long)(row / res_period) * rs0 + (long long)(row % res_period) * rs1 : 0;
      unsigned short* orow = out + (long long)row * ldo;
      float row_scale = tensor_scale;
#if TW_FP8
      if constexpr (SCALE == 2) row_scale = row_ok ? scale_a[row] : 0.0f;  // no read past M
#endif
      const tw_u32 taddr = tmem_base + ((tw_u32)(quarter * 32) << 16) + buf * BN;
#pragma unroll 1
      for (int c0 = 0; c0 < BN; c0 += 16) {
        tw_u32 v[16];
        tmem_ld_32x32b_x16(taddr + c0, v);  // warp-collective: every lane issues it, even rows past M
        tc_wait_ld();
        tc_reg_fence(v);
        const int col0 = pn * BN + c0;
        if (!row_ok || col0 >= N) continue;  // N % 8 == 0: a 16-column chunk is either in, half in, or out
        tw_u32 packed[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int col = col0 + 2 * j;
          packed[j] = 0;
          if (col < N) {  // N % 8 == 0: col < N implies col + 1 < N
            float b0 = 0.0f, b1 = 0.0f;
            float s0 = 1.0f, s1 = 1.0f;  // dequantisation of the fp8 product, before bias (scaled_mm semantics)
#if TW_FP8
            s0 = s1 = row_scale;
            if constexpr (SCALE == 2) {
              s0 *= scale_b[col];
              s1 *= scale_b[col + 1];
            }
#endif
            if constexpr (TW_BIAS) {
              b0 = elem_to_f32<FP16>(bias[col]);
              b1 = elem_to_f32<FP16>(bias[col + 1]);
            }
            const unsigned short* rp = TW_RES ? res + roff + (long long)col * rs2 : nullptr;
            const float a0 = FP8 ? __uint_as_float(v[2 * j]) * s0 : __uint_as_float(v[2 * j]);
            const float a1 = FP8 ? __uint_as_float(v[2 * j + 1]) * s1 : __uint_as_float(v[2 * j + 1]);
            const float v0 = epilogue_value<TW_ACT>(a0, b0, rp);
            const float v1 = epilogue_value<TW_ACT>(a1, b1, TW_RES ? rp + rs2 : nullptr);
            packed[j] = pack_pair<FP16>(v0, v1);
          }
        }
        st_global_v4_b32(orow + col0, packed[0], packed[1], packed[2], packed[3]);
        if (col0 + 8 < N) st_global_v4_b32(orow + col0 + 8, packed[4], packed[5], packed[6], packed[7]);
      }
      tc_fence_before_sync();          // our tcgen05.ld of this buffer are ordered before the arrive below
      // the MMA warp may overwrite it (a pair: rank 0's MMA thread waits for both CTAs' epilogues there)
      if constexpr (CTA2) mbar_arrive_cluster(mapa_shared(bar_tempty + 8 * buf, 0));
      else mbar_arrive(bar_tempty + 8 * buf);
    }
  }

  // Teardown: every role is done (the epilogue waited for the last accumulator, so every MMA has completed).
  // A pair syncs the cluster: no CTA may exit or free TMEM while its peer can still arrive on its barriers (the
  // multicast commits, remote tmem_empty arrives) or the pair's MMAs could still touch its TMEM / smem.
  tc_fence_before_sync();
  if constexpr (CTA2) {
    __syncwarp();  // barrier.cluster .aligned: each warp converged (warp 0/1 lane 0 ran the role loops alone)
    cluster_sync();
  } else {
    __syncthreads();
  }
  if (warp == 1) {
    __syncwarp();  // .sync.aligned: the whole warp, converged
    tc_fence_after_sync();
    if constexpr (CTA2) tmem_dealloc_cg2(tmem_base, TMEM_COLS);  // each CTA's warp 1, collectively with the peer
    else tmem_dealloc(tmem_base, TMEM_COLS);  // by the allocating warp, same column count
  }
#endif
}
#undef TW_TILE0
#undef TW_TILE_STEP
