// Flash-attention FORWARD for Hopper (sm_90a), FA3-style: O = softmax(scale * Q K^T [band mask]) V and the
// natural-log LSE, in exactly the layout the backwards read (triton_kernels/attention.py, attention_bwd_sm90.cu), so
// training pairs this forward with either.
//
// One CTA = one BM-row Q tile of one (batch, query head); grid (ceil(Sq / BM), Hq, B). Causal grids run the longest
// tiles (last rows) first so the short ones fill the tail of the wave - over every head at once where Skv <= 4096
// (ptx/attention_tile.cuh, cta_coords), head by head above, where L2 reuse of a head's K / V wins. TW_PERSISTENT
// builds (cp / c176p) launch min(tiles, SMs) CTAs instead, each looping over the tiles in that same order (below).
//   WG0  producer: one thread issues TMA for Q (once) and for K and V (one BN-row block per step) into a STAGES-deep
//        ring; K and V have separate full/empty mbarriers so QK^T of a block can start before its V has landed.
//   WG1.. consumers (TW_CONSUMERS = 1, 2 or 3): each owns 64 Q rows (one m64 wgmma atom); S = Q K^T (SS wgmma, fp32 in
//        registers), online softmax in base 2 with the scale folded in, P packed to bf16/fp16 in registers and fed
//        as the register-A operand of O += P V (RS wgmma); epilogue: O / l -> stmatrix into the (now dead) Q tile ->
//        TMA store (clips the Sq tail); LSE written directly.
//
// Variants (compile-time -D, ordered from simplest to full; the host names them a/b/c):
//   TW_CONSUMERS=1                       (a) 256 threads, BM = 64, no setmaxnreg, no pingpong, no overlap
//   TW_CONSUMERS=2 TW_PINGPONG=1         (b) 384 threads, BM = 128; named barriers order the two warpgroups' QK^T
//                                            GEMMs so one runs its softmax while the other's GEMM uses the tensor core
//   ... TW_OVERLAP=1                     (c) + intra-warpgroup overlap: QK^T of block j+1 is issued together with
//                                            P_j V_j, and the softmax of block j+1 runs while P_j V_j is in flight
//                                            (with TW_PIN_WAIT, see the loop; otherwise ptxas hoists the PV wait above
//                                            the exponentials and only masking + row max overlap the PV wgmma)
//   c with TW_BN=64 at hdim 128 ("c64" on the host): registers for the pinned wait, i.e. the full overlap in SASS
//   TW_CONSUMERS=3, hdim 64 only        (b3 / c3) 512 threads, BM = 192: b / c with three consumer warpgroups taking
//                                            the GEMM turn round robin (0, 1, 2, 0, ...), 160 registers each
//   TW_PINGPONG=0 with 2 or 3 consumers is valid too (the warpgroups free-running).
// Why three consumers at hdim 64: a 64 x 128 key block costs one warpgroup ~512 tensor-core clocks (QK^T and PV, 64 x
// 128 x 64 each) but ~512 MUFU clocks of exp2 (64 x 128 exponentials at 16 a clock) plus the softmax's FMA / ALU work
// (scale, max, sum, pack). The tensor core stays busy only while some warpgroup has a GEMM in flight: with two, one
// warpgroup's softmax has to fit into the other's GEMM slot (~512 clocks), which it cannot, and the tensor core idles
// for the difference; with three, a softmax has the other two warpgroups' GEMM slots (~1024 clocks) to hide in. The
// price is registers: (65536 - 24 x 128 for the producer) / 384 consumer threads leaves 160 each (a multiple of 8),
// which holds S (BN/2) + P (BN/4) + O (D/2) = 128 at hdim 64 x key block 128 but not at hdim 128 (O alone doubles),
// hence hdim 64 only; and not the pinned PV wait (below), which spilled there.
// Other switches: TW_HDIM (64 / 128 / 256), TW_BN (key block; 128 for D <= 128, 64 for D = 256: registers; 176 / 192
// at D = 128 for variants c176 / c192 - c176 where it measured faster, attention_sm90.py's WIDE_KEYS_BY_HEAD_DIM),
// TW_STAGES (K/V ring depth), TW_CAUSAL / TW_UPPER_OFFSET / TW_WINDOW (the band's edges) and TW_SOFTCAP (logit soft
// cap; ptx/attention_tile.cuh), TW_FP16 (fp16 instead of bf16), TW_PIN_WAIT (overlap schedule: keep the softmax ahead
// of the PV wait in SASS), TW_EXP_FMA, TW_PRODUCER_REGS / TW_CONSUMER_REGS.
//
// Masks: one band per call (ptx/attention_tile.cuh, KeyBand): key j is visible to row i iff j <= i + upper (TW_CAUSAL
// builds) and i + lower <= j (TW_WINDOW builds) - top-left causal (upper 0), bottom-right causal (Skv - Sq) and
// sliding windows (lower = the left edge) are runtime offsets of those builds. A tile visits only the key blocks its
// rows can see; elements are masked only in blocks that straddle an edge or the Skv tail. Soft cap (TW_SOFTCAP,
// Gemma 2): scores become cap * tanh(scale * s / cap) before the mask, one tanh.approx per score (the exp2's MUFU
// unit).
// Tails: TMA zero-fills out-of-bounds rows (Sq and Skv tails; the 4-D (D, S, H, B) maps keep a tile inside its own
// head), padded keys are masked to -inf per element, the O store clips rows >= Sq, LSE stores are row-masked.
// Packed variable-length batches (TW_VARLEN, flash-attn's varlen layout): the maps cover the packed (total, H, D)
// tensors as one sequence of `total` rows, blockIdx.z is the sequence, whose rows start at cu_q[b] / cu_k[b]; Sq / Skv
// become its own lengths and the band is bottom-right aligned per sequence (host offsets + Skv_b - Sq_b). A tile
// reaching past its sequence reads the next one's rows, which are harmless for Q and K (those rows are not stored,
// those keys are masked to -inf) but not for V: P is 0 there, yet 0 x inf is NaN, so the consumers zero those V rows
// in shared memory before the last PV. The O store of a tile that straddles its sequence's end goes from registers,
// row-masked (a TMA box would write the next sequence's rows).
// Descriptors: a consumer builds its Q rows' and stage 0's K and V wgmma descriptors once, and each wgmma's is one of
// them advanced by its byte offset (ptx/wgmma_typed.cuh: a 32-bit add to the low word); its warpgroup index comes
// through a warp shuffle, so that ptxas knows it warp-uniform and keeps them in uniform registers. Built per wgmma from
// the index as threadIdx.x / 128 (per-thread to ptxas), the Q descriptors sat in ordinary registers, two R2UR before
// each HGMMA (SASS, nvcc 13.0, c hdim 128: 36 R2URs among the 32 HGMMAs -> 0, 2360 -> 2176 instructions; hdim 256:
// 68 -> 0, 2656 -> 2392; the same HGMMAs in the same order, 0 spills before and after).
// All PTX lives in ptx/*.cuh.
#include "ptx/attention_tile.cuh"
#include "ptx/common.cuh"
#include "ptx/math.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/stmatrix.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "ptx/wgmma_typed.cuh"

#ifndef TW_HDIM
#define TW_HDIM 128
#endif
#ifndef TW_BN
#define TW_BN (TW_HDIM > 128 ? 64 : 128)
#endif
#ifndef TW_STAGES
#define TW_STAGES 2
#endif
#ifndef TW_CONSUMERS
#define TW_CONSUMERS 2
#endif
#ifndef TW_PINGPONG
#define TW_PINGPONG 1
#endif
#ifndef TW_OVERLAP
#define TW_OVERLAP 1
#endif
#ifndef TW_CAUSAL
#define TW_CAUSAL 0
#endif
// Every TW_EXP_FMA-th 8-column chunk of S takes its exponentials on the FMA pipe (ex2_fma) instead of MUFU (0: none).
// Why it exists: at head dim 64 a 128-key block costs the two consumers ~940 tensor-core clocks and 1024 MUFU clocks
// (16 ex2 a clock per SM). Measured on H100 it did not pay (every 4th chunk: +3% non-causal, -1..-3% causal; the
// softmax's other FMA / ALU work shares those pipes), so the host leaves it off (EXP_FMA_DEFAULT).
#ifndef TW_EXP_FMA
#define TW_EXP_FMA 0
#endif
// Keep the softmax of the overlap schedule ahead of the PV wait (see the loop); the host turns it on where ptxas has
// the registers for it (two consumers at hdim 64, or key block 64 at hdim 128; three consumers' 160 registers at hdim
// 64 spilled 320 B with it and serialised the wgmmas, C7512).
#ifndef TW_PIN_WAIT
#define TW_PIN_WAIT 0
#endif
// 1 producer + 2 consumers at 384 threads: 24 * 128 + 240 * 256 = 64512 <= 65536 registers; + 3 consumers at 512
// threads: 24 * 128 + 160 * 384 = 64512 (168, the next multiple of 8, would need 67584). The producer needs only loop
// counters and coordinates; a consumer holds S (BN/2) + P (BN/4) + O (D/2) fp32/b32 registers plus addresses.
// Persistent CTAs (variants cp / c176p on the host): gridDim.x CTAs, at most one per SM, each running a sequence of
// tiles instead of one, so that a CTA's fill and drain (barrier init, descriptor prefetch, setmaxnreg, the first K / V
// loads' latency) is paid once per SM rather than once per tile; the K / V ring runs on across tiles and the next
// tile's first K / V block loads during the previous tile's epilogue. The next Q cannot: O is staged in Q's rows (a
// second Q tile does not fit beside c176's 214 KB). Dense builds with the overlap schedule (c) only (see
// static_asserts): a packed batch's tiles past a sequence's end return early, which a tile loop would have to turn
// into skips that still arrive on q_empty - the host runs packed batches on variant c only, so none is built.
#ifndef TW_PERSISTENT
#define TW_PERSISTENT 0
#endif
#ifndef TW_PRODUCER_REGS
#define TW_PRODUCER_REGS 24
#endif
#ifndef TW_CONSUMER_REGS
#define TW_CONSUMER_REGS (TW_CONSUMERS == 3 ? 160 : 240)
#endif

namespace twa {

constexpr int D = TW_HDIM;
constexpr int BN = TW_BN;
constexpr int STAGES = TW_STAGES;
constexpr int NC = TW_CONSUMERS;
constexpr bool PINGPONG = TW_PINGPONG != 0 && NC >= 2;
constexpr bool OVERLAP = TW_OVERLAP != 0;
constexpr bool CAUSAL = TW_CAUSAL != 0;
constexpr bool SOFTCAP = TW_SOFTCAP != 0;
constexpr bool WINDOW = TW_WINDOW != 0;  // the band's lower edge
constexpr bool UPPER_OFFSET = TW_UPPER_OFFSET != 0;
constexpr bool PIN_WAIT = TW_PIN_WAIT != 0;
constexpr bool VARLEN = TW_VARLEN != 0;
constexpr bool PERSISTENT = TW_PERSISTENT != 0;
constexpr bool HEAVY_FIRST = CAUSAL && !VARLEN;  // dense causal grids may run longest tiles first (cta_coords)
constexpr int BM = 64 * NC;           // Q rows per CTA: one m64 wgmma atom per consumer warpgroup
constexpr int THREADS = 128 * (NC + 1);
constexpr int DC = D / 64;            // 64-element (128-byte) column chunks of a row: one TMA box / swizzle span each
constexpr int Q_BYTES = BM * D * 2;
constexpr int KV_BYTES = BN * D * 2;  // one K (or V) block
constexpr int Q_OFF = 0;
constexpr int K_OFF = Q_OFF + Q_BYTES;
constexpr int V_OFF = K_OFF + STAGES * KV_BYTES;
constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES;
// bar_q, full / empty K and V per stage, q_empty (persistent); + slack to align the base to 1024
constexpr int SMEM_BYTES = 1024 + BAR_OFF + (1 + 4 * STAGES + (PERSISTENT ? 1 : 0)) * 8;

// Named barriers (0 is __syncthreads): consumer c may issue its GEMMs after bar.sync TURN_BAR + c (pingpong; ids
// TURN_BAR .. TURN_BAR + NC - 1); EPI_BAR + c orders one warpgroup's epilogue steps (128 threads).
constexpr int TURN_BAR = 1;
constexpr int EPI_BAR = TURN_BAR + NC;
// Varlen: every consumer thread has zeroed its share of the V rows past the sequence before any PV wgmma reads them.
constexpr int VTAIL_BAR = EPI_BAR + NC;

static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
static_assert(BN == 64 || BN == 128 || BN == 176 || BN == 192, "key block 64, 128, 176 or 192 (the generated SS "
              "wgmma shapes)");
// 176 / 192 keys a block (A/B variants "c176" / "c192"): S (BN/2) + P (BN/4) = 132 / 144 registers beside O's D/2;
// at head dim 256 O alone takes 128 (the 256 build runs 64-key blocks)
static_assert(BN <= 128 || D <= 128, "key blocks over 128 at head dim <= 128 only (registers)");
// Each K / V block is DC chunks of BN rows x 128 B (one TMA box each); the 128B swizzle repeats every 8 rows (1024 B),
// so every chunk, stage and the V region must start on a 1024-byte boundary - true for any BN that is a multiple of 8
// (176 rows: 22528 B a chunk).
static_assert((BN * 128) % 1024 == 0 && Q_BYTES % 1024 == 0, "K / V chunks on 1024-byte swizzle atoms");
static_assert(NC >= 1 && NC <= 3, "one, two or three consumer warpgroups");
static_assert(NC < 3 || D == 64, "three consumers at head dim 64 only: S + P + O must fit in 160 registers");
static_assert(VTAIL_BAR < 16, "16 named barriers per CTA");
static_assert(SMEM_BYTES <= TW_SMEM_OPTIN_BYTES, "shared memory over the sm_90 per-block limit");
static_assert(TW_PRODUCER_REGS * 128 + TW_CONSUMER_REGS * 128 * NC <= 65536, "register split over the file");
static_assert(BN <= 256 && BM <= 256, "TMA boxes hold at most 256 rows");
static_assert(!PERSISTENT || (OVERLAP && !VARLEN), "persistent CTAs: dense builds of the overlap schedule only (the "
              "tile loop has no skip for a packed batch's tiles past a sequence's end; (a)/(b) keep their own ring)");

// One query tile's work: its query head, KV head and batch coordinate (the sequence, varlen), the rows of its
// sequence and their band (ptx/attention_tile.cuh), its query rows and key blocks.
struct Tile {
  int hq, hkv, b;
  SequenceRows seq;
  QueryTile q;
};

// S(64 x BN) (+)= Q(64 x 16) K^T(16 x BN): A = Q, B = K rows, both K-major: mma_ss<BN>. O(64 x D) += P(64 x 16,
// registers) V(16 x D): V is stored (key, d) row-major, MN-major for this B operand: mma_rs_mn<D>
// (ptx/wgmma_typed.cuh).

}  // namespace twa

using namespace twa;

// tm_q / tm_o: maps over (D, Sq, Hq, B) with box (64, BM | 64, 1, 1); tm_k / tm_v: over (D, Skv, Hkv, B) with box
// (64, BN, 1, 1); all 128B-swizzled. lse: contiguous fp32 (B, Hq, Sq). group = Hq / Hkv (query head h reads kv head
// h / group). scale_log2 = scale * log2(e) (1 with the soft cap: its post factor carries log2(e)). band_upper /
// band_lower: the KeyBand. softcap_pre = scale / cap and softcap_post = cap * log2(e) (read by TW_SOFTCAP builds).
// TW_VARLEN builds: maps over (D, total, H, 1); Sq = total_q (lse is (Hq, total_q)); cu_q / cu_k the sequences' row
// offsets; band_upper / band_lower are added to each sequence's Skv_b - Sq_b; out / out_row_stride / out_head_stride
// (elements) / head_dim address the row-masked O store of a tile at its sequence's end. Dense builds ignore them.
// TW_PERSISTENT builds: batch = B (their tiles: ceil(Sq / BM) x Hq x batch, walked by gridDim.x CTAs).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    tw_attn_fwd_sm90(const __grid_constant__ TwTensorMap tm_q, const __grid_constant__ TwTensorMap tm_k,
                     const __grid_constant__ TwTensorMap tm_v, const __grid_constant__ TwTensorMap tm_o,
                     float* __restrict__ lse, int Sq, int Skv, int Hq, int group, float scale_log2, int band_upper,
                     int band_lower, float softcap_pre, float softcap_post, const int* __restrict__ cu_q,
                     const int* __restrict__ cu_k, unsigned short* __restrict__ out, long long out_row_stride,
                     long long out_head_stride, int head_dim
#if TW_PERSISTENT
                     ,
                     int batch
#endif
                     ) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const tw_u32 raw = smem_u32(smem_raw);
  const tw_u32 sbase = (raw + 1023) & ~1023u;  // 128B-swizzle atoms (8 rows x 128 B) need 1024-byte alignment
  const tw_u32 sq = sbase + Q_OFF;
  const tw_u32 bar_q = sbase + BAR_OFF;
  const tw_u32 full_k = bar_q + 8;
  const tw_u32 full_v = full_k + 8 * STAGES;
  const tw_u32 empty_k = full_v + 8 * STAGES;
  const tw_u32 empty_v = empty_k + 8 * STAGES;
  const tw_u32 q_empty = empty_v + 8 * STAGES;  // persistent builds only (SMEM_BYTES has its 8 bytes then)

  const int wg = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;
  // A tile's work from its coordinates in dispatch order (cta_coords / tile_coords; `tiles`: the query tiles of one
  // sequence): its query head and KV head, the rows of its sequence (ptx/attention_tile.cuh: the batch index of a
  // dense map, or (varlen) row offsets in the packed tensors, the sequence's own lengths and its bottom-right band;
  // seq_q / seq_k bound every index below), its query rows and the key blocks its band reaches (longest causal tiles
  // first).
  auto tile_of = [&](const CtaCoords& cta, int tiles) -> Tile {
    const int hq = cta.y;
    const int b = cta.z;
    const int hkv = hq / group;
    const SequenceRows seq = sequence_rows<VARLEN, UPPER_OFFSET>(cu_q, cu_k, b, Sq, Skv, band_upper, band_lower);
    return {hq, hkv, b, seq, query_tile<BM, BN, CAUSAL, WINDOW>(seq.seq_k, seq.band, cta.rank, tiles)};
  };
  // The tiles this CTA runs: linear positions t = first_tile, first_tile + tile_step, ... below num_tiles.
  // Persistent builds: gridDim.x CTAs (at most one per SM: the host's grid) walk the tiles_x x Hq x batch tiles that
  // the other builds launch one CTA each for, in the same order (tile_coords: the causal grid's longest tiles
  // first); each role computes a tile's coordinates itself (tile_at), after its setmaxnreg. Other builds: the CTA's
  // own tile, computed once here - before the barriers' init, since a packed batch's tile past its sequence returns
  // at once.
#if TW_PERSISTENT
  const int tiles_x = (Sq + BM - 1) / BM;
  const int num_tiles = tiles_x * Hq * batch;  // < 2^30, so t + tile_step stays an int (the host checks)
  const int first_tile = blockIdx.x, tile_step = gridDim.x;
  const Tile own{};
  auto tile_at = [&](int t) { return tile_of(tile_coords(HEAVY_FIRST, Skv, t, tiles_x, Hq, batch), tiles_x); };
#else
  constexpr int num_tiles = 1, first_tile = 0, tile_step = 1;
  const Tile own = tile_of(cta_coords(HEAVY_FIRST, Skv), gridDim.x);
  auto tile_at = [&](int) { return own; };
#endif
  // The grid covers the longest sequence: a tile past this one's end has nothing to do (uniform over the CTA, before
  // any barrier).
  if (VARLEN && own.q.m0 >= own.seq.seq_q) return;

  if (threadIdx.x == 0) {
    mbar_init(bar_q, 1);  // one arrive.expect_tx + the Q bytes
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_k + 8 * s, 1);    // producer's arrive.expect_tx + TMA bytes
      mbar_init(full_v + 8 * s, 1);
      mbar_init(empty_k + 8 * s, NC);  // one arrive per consumer warpgroup once its wgmma read the stage
      mbar_init(empty_v + 8 * s, NC);
    }
    // persistent: one arrive per consumer warpgroup once its O store has read the Q rows it was staged in
    if constexpr (PERSISTENT) mbar_init(q_empty, NC);
    fence_mbarrier_init();  // inits visible to the other threads and to the TMA unit before first use
  }
  __syncthreads();

  if (wg == 0) {
    // ------------------------------------------------------------------ producer
    // Give registers back to the consumers (they need S + P + O in registers). With one consumer the per-thread
    // cap at entry (launch bounds 256 threads) already allows 255, so there is nothing to redistribute.
    if constexpr (NC >= 2) setmaxnreg_dec<TW_PRODUCER_REGS>();
    if (tid == 0) {
      tma_prefetch_desc(&tm_q);
      tma_prefetch_desc(&tm_k);
      tma_prefetch_desc(&tm_v);
      // The K / V ring's position, carried across a persistent CTA's tiles (the consumers count the same blocks).
      int s = 0;
      tw_u32 phase = 0;
      for (int t = first_tile, it = 0; t < num_tiles; t += tile_step, ++it) {
        const Tile w = tile_at(t);
        const int hq = w.hq, hkv = w.hkv, q_start = w.seq.q_start, k_start = w.seq.k_start, map_b = w.seq.map_b;
        const int m0 = w.q.m0, kb0 = w.q.kb0, nblk = w.q.nblk;
        auto load_q = [&]() {
          // Persistent: the consumer warpgroups staged the previous tile's O in these rows, and q_empty completes
          // its phase it - 1 once both of their TMA stores have read them. No phase is skipped: the consumers
          // arrive for this tile only after its Q, loaded below.
          if (PERSISTENT && it > 0) mbar_wait(q_empty, (it - 1) & 1);
          // Q: DC boxes of (64 columns x BM rows), chunk j at sq + j * BM * 128. Out-of-bounds rows still count
          // bytes.
          mbar_arrive_expect_tx(bar_q, Q_BYTES);
#pragma unroll
          for (int j = 0; j < DC; ++j) tma_load_4d(sq + j * BM * 128, &tm_q, bar_q, 64 * j, q_start + m0, hq, map_b);
        };
        // K / V blocks issued before Q: a persistent CTA's later tile issues its first one ahead of the q_empty wait,
        // so that it lands while the previous tile's epilogue runs. This cannot deadlock: its ring stage last held
        // the block STAGES before it, which the consumers released by the previous tile's last PV, before its
        // epilogue. Only one: a block after it may need a stage that frees up only as this tile runs, on its Q.
        const int q_after = PERSISTENT && it > 0 ? min(nblk, 1) : 0;
        if (q_after == 0) load_q();
        for (int kb = 0; kb < nblk; ++kb) {
          const tw_u32 sk = sbase + K_OFF + s * KV_BYTES;
          const tw_u32 sv = sbase + V_OFF + s * KV_BYTES;
          // The first pass over the ring waits on parity 1 of fresh barriers, which counts as complete.
          mbar_wait(empty_k + 8 * s, phase ^ 1);
          mbar_arrive_expect_tx(full_k + 8 * s, KV_BYTES);
#pragma unroll
          for (int j = 0; j < DC; ++j)
            tma_load_4d(sk + j * BN * 128, &tm_k, full_k + 8 * s, 64 * j, k_start + (kb0 + kb) * BN, hkv, map_b);
          mbar_wait(empty_v + 8 * s, phase ^ 1);
          mbar_arrive_expect_tx(full_v + 8 * s, KV_BYTES);
#pragma unroll
          for (int j = 0; j < DC; ++j)
            tma_load_4d(sv + j * BN * 128, &tm_v, full_v + 8 * s, 64 * j, k_start + (kb0 + kb) * BN, hkv, map_b);
          if (PERSISTENT && kb + 1 == q_after) load_q();
          if (++s == STAGES) {
            s = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    // ------------------------------------------------------------------ consumers
    if constexpr (NC >= 2) setmaxnreg_inc<TW_CONSUMER_REGS>();
    // Key blocks this warpgroup consumed in a persistent CTA's earlier tiles: the ring's stage and parity run on
    // across tiles, as the producer fills it (0 in the other builds: block kb is stage kb % STAGES).
    int kb_done = 0;
    for (int t = first_tile, it = 0; t < num_tiles; t += tile_step, ++it) {
      // The warpgroup index through a shuffle: the same value, but one ptxas knows to be warp-uniform, so this
      // consumer's Q descriptors (below) stay in uniform registers (wg - 1 is per-thread to it: threadIdx.x / 128).
      // Shuffled again in each tile of a persistent CTA: carried across the tile loop, it was no longer uniform to
      // ptxas (the Q descriptors sat in ordinary registers, 16 R2UR in the key-block loop; nvcc 13.0).
      const int c = __shfl_sync(0xffffffffu, wg, 0) - 1;
      const int warp = tid / 32;
      const int lane = tid % 32;
      const int col_lane = 2 * (lane & 3);  // columns 8j + col_lane + {0, 1} of chunk j
      const tw_u32 sq_c = sq + c * 64 * 128;  // this warpgroup's 64 rows inside each Q column chunk
      const Tile w = tile_at(t);
      const int hq = w.hq, b = w.b, q_start = w.seq.q_start, seq_q = w.seq.seq_q, seq_k = w.seq.seq_k;
      const int map_b = w.seq.map_b, m0 = w.q.m0, kb0 = w.q.kb0, nblk = w.q.nblk;
      const KeyBand band = w.seq.band;
      const int row_base = m0 + 64 * c;  // first Q row of this warpgroup
      // This thread's two rows of every accumulator fragment: warp's 16-row slice, rows lane/4 and lane/4 + 8.
      const int row0 = row_base + warp * 16 + (lane >> 2);

      float s_acc[BN / 2];  // S = Q K^T of one block; softmax turns it into unnormalised P in place
      tw_u32 p[BN / 4];     // P as 16-bit pairs: p[2j + h] = row h, columns 8j + col_lane + {0,1}
      float o[D / 2];
      float m_run[2] = {TW_NEG_INF, TW_NEG_INF};  // running max of the scaled (base-2) scores per row
      float l_run[2] = {0.0f, 0.0f};           // running row sum, this thread's columns only (quad-reduced at the end)
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

      // Pingpong, round robin: warpgroup 0 issues first, then 1, .., NC - 1, 0 again. The last warpgroup pre-arrives
      // on warpgroup 0's turn barrier; afterwards every GEMM section of warpgroup c ends with an arrive on the barrier
      // of c + 1 (mod NC). Each turn barrier has 256 participants: its syncing warpgroup and the one before it,
      // arriving. Balance: each warpgroup has the same number of sections S; WG0 syncs S times on TURN+0 and gets
      // 1 + (S - 1) arrivals (WG NC-1 skips the arrive after its last section); WG c > 0 syncs S times on TURN+c and
      // gets S arrivals from WG c - 1. So no barrier is left half-arrived at a tile's end, and a persistent CTA's next
      // tile starts from a fresh CTA's state; a tile with no key block (nblk = 0, the same for every warpgroup) has no
      // sections and no pre-arrive. One token goes round, so an arriver never runs a generation ahead of its syncer:
      // WG c - 1's (k+1)-th arrive needs its own (k+1)-th turn, which comes after WG c's k-th. Across a persistent
      // CTA's tiles too: WG NC-1 pre-arrives for the next tile after its last turn of this one, which needed WG 0's
      // last sync on TURN+0; and WG 0's first turn there waits for that pre-arrive.
      if (PINGPONG && c == NC - 1 && nblk > 0) named_barrier_arrive(TURN_BAR + 0, 256);
      const int sections = OVERLAP ? nblk + 1 : nblk;
      int section = 0;
      auto turn_begin = [&]() {
        if constexpr (PINGPONG) named_barrier_sync(TURN_BAR + c, 256);
      };
      auto turn_end = [&]() {
        if constexpr (PINGPONG) {
          // the next warpgroup's turn; at NC = 2 as 1 - c (the select cost 8 more SASS instructions)
          const int next = NC == 2 ? 1 - c : (c == NC - 1 ? 0 : c + 1);
          if (!(c == NC - 1 && section == sections - 1)) named_barrier_arrive(TURN_BAR + next, 256);
        }
        ++section;
      };

      // Descriptors of this warpgroup's Q rows and of stage 0's K and V blocks, built once (a tile) from warp-uniform
      // addresses; every wgmma's is one of them advanced by its byte offset (stage, chunk, k-step:
      // ptx/wgmma_typed.cuh), which keeps them in uniform registers - built per wgmma from sq_c of a per-thread c, the
      // Q descriptors sat in 2 x D/16 ordinary registers, each moved with two R2UR before its HGMMA, and K's took a
      // mask, shift and OR apiece.
      const tw_u64 desc_q = wgmma_desc_sw128(sq_c, 16, 1024);
      const tw_u64 desc_k0 = wgmma_desc_sw128(sbase + K_OFF, 16, 1024);
      // V: MN-major B, LBO = bytes between 64-column chunks of d (one box: BN rows x 128 B), SBO = 8 rows x 128 B
      const tw_u64 desc_v0 = wgmma_desc_sw128(sbase + V_OFF, BN * 128, 1024);
      // Issue S = Q K^T for the K block of stage s (D/16 k-steps; scale_d = 0 on the first overwrites S).
      auto issue_qk = [&](int s) {
        tw_u64 dq = desc_q;
        if constexpr (D > 128) {
          // Q's low word made opaque each block, so that its D/16 advanced descriptors are formed at the wgmmas (one
          // uniform add each) and not hoisted ahead of the loop: 16 of them there (32 uniform registers) spilled into
          // ordinary ones and came back with R2UR. At D <= 128 the hoisted ones fit and save the adds (16 fewer
          // instructions). No instruction is emitted for this.
          const tw_u32 lo = opaque_u32((tw_u32)dq);
          dq = (dq & 0xFFFFFFFF00000000ull) | lo;
        }
        mma_ss_head_dim<BN, D>(s_acc, dq, BM * 128, wgmma_desc_advance(desc_k0, s * KV_BYTES), BN * 128);
      };
      // Issue O += P V for the V block of stage s: BN/16 k-steps over keys; k-step kk takes P columns 16kk..16kk+15,
      // which are accumulator chunks 2kk and 2kk+1 -> A fragment {p[4kk], p[4kk+1], p[4kk+2], p[4kk+3]} (rows g / g+8
      // of columns 2t.., then rows g / g+8 of columns 8+2t..), and 16 key rows (16 * 128 B) of V.
      auto issue_pv = [&](int s) { mma_rs_frags<BN / 16, D>(o, p, wgmma_desc_advance(desc_v0, s * KV_BYTES)); };
      // Soft cap (if any), mask, new running max, exponentials in place and row sums of block kb (counted from kb0);
      // returns the O rescale factors.
      auto softmax = [&](int kb, float (&alpha)[2]) {
        const int k0 = (kb0 + kb) * BN;
        if constexpr (SOFTCAP) {
          // cap * tanh(scale * s / cap) in base-2 units (softcap_post carries log2 e; scale_log2 is 1); before the
          // mask, which then writes -inf over the capped value
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) s_acc[i] = tanh_approx(s_acc[i] * softcap_pre) * softcap_post;
        }
        // Per-element masking only where needed: the Skv tail block, and blocks that reach past the band's upper edge
        // of the warpgroup's first row or below the lower edge of its last row. Uniform per warpgroup, so no
        // divergence.
        const bool need_mask = (k0 + BN > seq_k) || (CAUSAL && k0 + BN - 1 > row_base + band.upper) ||
                               (WINDOW && k0 < row_base + 63 + band.lower);
        if (need_mask) {
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int col = k0 + 8 * j + col_lane + e;
                const int row = row0 + 8 * h;
                if (masked_out<CAUSAL, WINDOW>(row, col, seq_k, band)) s_acc[4 * j + 2 * h + e] = TW_NEG_INF;
              }
            }
          }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = TW_NEG_INF;
#pragma unroll
          // NaN-propagating max: a NaN score makes the row max NaN, so the whole row (O and LSE) is NaN, as in torch
          for (int j = 0; j < BN / 8; ++j) mx = max_nan(mx, max_nan(s_acc[4 * j + 2 * h], s_acc[4 * j + 2 * h + 1]));
          mx = quad_max(mx);  // the 4 lanes of a quad hold one row
          const float m_new = max_nan(m_run[h], mx * scale_log2);
          // A row with no visible key so far keeps m = -inf; subtract 0 instead so exp2 gives 0, never NaN.
          const float m_use = m_new == TW_NEG_INF ? 0.0f : m_new;
          alpha[h] = ex2_approx(m_run[h] - m_use);  // 0 on the first visible block (m_run = -inf)
          m_run[h] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float arg = fmaf(s_acc[4 * j + 2 * h + e], scale_log2, -m_use);
              const float x = TW_EXP_FMA > 0 && j % TW_EXP_FMA == TW_EXP_FMA - 1 ? ex2_fma(arg) : ex2_approx(arg);
              s_acc[4 * j + 2 * h + e] = x;
              sum += x;
            }
          }
          l_run[h] = l_run[h] * alpha[h] + sum;
        }
      };
      auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          o[4 * j + 0] *= alpha[0];
          o[4 * j + 1] *= alpha[0];
          o[4 * j + 2] *= alpha[1];
          o[4 * j + 3] *= alpha[1];
        }
      };
      auto pack_p = [&]() {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          p[2 * j + 0] = pack2(s_acc[4 * j + 0], s_acc[4 * j + 1]);
          p[2 * j + 1] = pack2(s_acc[4 * j + 2], s_acc[4 * j + 3]);
        }
      };
      // Varlen: zero the rows of V block kb (at smem `sv`) past the sequence's last key - the next sequence's rows,
      // which P (0 there) would otherwise multiply; only the last block can reach past it. The consumer warpgroups
      // share the stage: each zeroes its 1/NC of it, then the fence (generic writes -> the wgmma's async proxy) and one
      // barrier over all of them come before any PV. Uniform over the CTA (every consumer reaches it on the same
      // block).
      auto zero_v_tail = [&](int kb, tw_u32 sv) {
        if constexpr (VARLEN) {
          const int valid = seq_k - (kb0 + kb) * BN;
          if (valid < BN) {
            zero_tile_rows<D>(sv, BN, max(valid, 0), c * 128 + tid, 128 * NC);
            fence_proxy_async_smem();
            named_barrier_sync(VTAIL_BAR, 128 * NC);
          }
        }
      };
      auto release = [&](tw_u32 empty_bar) {
        // One arrive per warpgroup, after a wgmma wait that covers every wgmma that read the stage (predicated, not
        // branched: it can sit between a wgmma and its wait).
        mbar_arrive_if(empty_bar, tid == 0);
      };

      // Ring position of this tile's block kb: blocks are counted across a persistent CTA's tiles, as the producer
      // fills the ring. The other builds keep their code: a literal 0 base (carried through the one-trip tile loop,
      // it reached the first block's K descriptor too late to fold: 8 more uniform instructions there, nvcc 13.0)
      // and signed arithmetic; the persistent ones' running count is unsigned (a mask and a shift, 4 fewer a block).
      const int kb_base = PERSISTENT ? kb_done : 0;
      auto stage_of = [&](int kb) {
        return PERSISTENT ? (int)((tw_u32)(kb_base + kb) % STAGES) : (kb_base + kb) % STAGES;
      };
      auto phase_of = [&](int kb) -> tw_u32 {
        return PERSISTENT ? ((tw_u32)(kb_base + kb) / STAGES) & 1 : ((kb_base + kb) / STAGES) & 1;
      };

      // Phase `it` is this tile's Q (one phase per tile; the producer loads the next Q only after this tile's q_empty
      // phase, so the phase seen is never one ahead).
      mbar_wait(bar_q, it & 1);

      if (OVERLAP && nblk > 0) {
        // ---- (c) intra-warpgroup overlap: section j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} together ----
        float alpha[2];
        mbar_wait(full_k + 8 * stage_of(0), phase_of(0));  // stage 0, phase 0 in a one-tile CTA
        turn_begin();
        wgmma_fence();  // O was zeroed by ordinary stores
        issue_qk(stage_of(0));
        wgmma_commit();
        turn_end();
        wgmma_wait<0>();
        wgmma_reg_fence(s_acc);
        release(empty_k + 8 * stage_of(0));
        softmax(0, alpha);  // alpha = 0 and O = 0: no rescale on the first block
        pack_p();
        for (int kb = 1; kb < nblk; ++kb) {
          const int s = stage_of(kb), sp = stage_of(kb - 1);
          const tw_u32 ph = phase_of(kb), php = phase_of(kb - 1);
          // Both operands' waits come before the section: a spin loop between two wgmmas of one batch is a divergent
          // path to ptxas and would serialise the wgmma pipeline (C7520).
          mbar_wait(full_k + 8 * s, ph);
          mbar_wait(full_v + 8 * sp, php);
          turn_begin();
          wgmma_fence();  // S, P and O were written by the softmax / rescale since the last wgmma batch
          issue_qk(s);
          wgmma_commit();
          issue_pv(sp);
          wgmma_commit();
          turn_end();
          wgmma_wait<1>();  // S_j complete (groups retire in order); P_{j-1} V_{j-1} may still run
          wgmma_reg_fence(s_acc);
          release(empty_k + 8 * s);
          softmax(kb, alpha);  // overlaps the PV wgmma (it reads p and writes o, not s_acc)
          if constexpr (PIN_WAIT) {
            // Never true (kb >= 1, Skv >= 1), but opaque and warp-uniform: a basic-block boundary. ptxas schedules
            // within a block and otherwise hoists the wait below to just after the masking, i.e. before the
            // exponentials, which removes the overlap (seen in SASS). Only where registers allow: with S + P + O of
            // hdim 128 x BN 128 (or hdim 64 in 160 registers, three consumers) it reports C7512 and serialises every
            // wgmma instead (build-check catches that).
            if (kb + Skv == 0) __trap();
          }
          wgmma_wait<0>();     // P_{j-1} V_{j-1} done: o is final for this step, p and V_{j-1} are free
          wgmma_reg_fence(o);
          wgmma_reg_fence(p);
          release(empty_v + 8 * sp);
          rescale_o(alpha);
          pack_p();
        }
        const int sl = stage_of(nblk - 1);
        mbar_wait(full_v + 8 * sl, phase_of(nblk - 1));
        zero_v_tail(nblk - 1, sbase + V_OFF + sl * KV_BYTES);
        turn_begin();
        wgmma_fence();
        issue_pv(sl);
        wgmma_commit();
        turn_end();
        wgmma_wait<0>();
        wgmma_reg_fence(o);
        wgmma_reg_fence(p);
        release(empty_v + 8 * sl);
      } else if (!OVERLAP) {
        // ---- (a)/(b): S_j, softmax, P_j V_j in sequence; pingpong orders only the QK^T sections ----
        int s = 0;
        tw_u32 ph = 0;
        for (int kb = 0; kb < nblk; ++kb) {
          float alpha[2];
          mbar_wait(full_k + 8 * s, ph);
          turn_begin();
          wgmma_fence();  // S / O / P were written by ordinary instructions since the last batch
          issue_qk(s);
          wgmma_commit();
          turn_end();
          wgmma_wait<0>();
          wgmma_reg_fence(s_acc);
          release(empty_k + 8 * s);
          softmax(kb, alpha);
          rescale_o(alpha);
          pack_p();
          mbar_wait(full_v + 8 * s, ph);
          if (kb == nblk - 1) zero_v_tail(kb, sbase + V_OFF + s * KV_BYTES);
          wgmma_fence();  // P and O were just written by ordinary instructions
          issue_pv(s);
          wgmma_commit();
          wgmma_wait<0>();
          wgmma_reg_fence(o);
          wgmma_reg_fence(p);
          release(empty_v + 8 * s);
          if (++s == STAGES) {
            s = 0;
            ph ^= 1;
          }
        }
      }

      // ------------------------------------------------------------------ epilogue
      float inv[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float l = quad_sum(l_run[h]);
        // l == 0: the row sees no key (its band is empty, or every visible score is -inf): O = 0 and LSE -inf, as
        // SDPA's fused kernels and the reference give. A NaN score makes l NaN: O is NaN, not 0.
        inv[h] = l == 0.0f ? 0.0f : 1.0f / l;
        const int row = row0 + 8 * h;
        if ((lane & 3) == 0 && row < seq_q) {
          // natural-log LSE of the scaled scores, log2(sum 2^(x - m)) + m, times ln 2, like torch's logsumexp:
          // -inf for l == 0, +inf when a score is +inf (m = +inf, where m - m made l NaN), NaN for a NaN score (m is
          // NaN then: the row max propagates it)
          const float v = l == 0.0f ? TW_NEG_INF
                          : m_run[h] == -TW_NEG_INF ? m_run[h] : (m_run[h] + log2f(l)) * 0.69314718055994531f;
          lse[(VARLEN ? (long long)hq * Sq + q_start : ((long long)b * Hq + hq) * Sq) + row] = v;
        }
      }
      if (VARLEN && row_base + 64 > seq_q) {
        // the warpgroup's rows straddle the sequence's end: each thread stores its two rows from registers, masked
        // (uniform per warpgroup: the TMA path below with its barriers is skipped by all 128 threads)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + 8 * h;
          if (row < seq_q)
            store_row_pairs<D, true>(out + (q_start + row) * out_row_stride + hq * out_head_stride, o, h, col_lane,
                                     inv[h], head_dim);
        }
        return;
      }
      // Every wgmma of this warpgroup (the readers of its Q rows) has completed in every warp before any warp
      // overwrites those rows with the O tile.
      named_barrier_sync(EPI_BAR + c, 128);
      const int q = lane >> 3;  // stmatrix: lane supplies the row address of matrix q, row r8
      const int r8 = lane & 7;
#pragma unroll
      for (int j = 0; j < D / 8; j += 2) {
        tw_u32 packed[4];
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
#pragma unroll
          for (int h = 0; h < 2; ++h)
            packed[2 * jj + h] = pack2(o[4 * (j + jj) + 2 * h] * inv[h], o[4 * (j + jj) + 2 * h + 1] * inv[h]);
        }
        // matrix q: rows +8 for odd q, the next 8-column chunk for q >= 2; the 16-byte unit is XOR-swizzled with the
        // row (mod 8) exactly as TMA's 128B swizzle lays the tile out (1024-byte aligned chunks).
        const int rloc = warp * 16 + (q & 1) * 8 + r8;
        const int chunk = j + (q >> 1);
        const tw_u32 addr = sq_c + (chunk >> 3) * (BM * 128) + rloc * 128 + (((chunk & 7) ^ r8) << 4);
        stmatrix_x4(addr, packed[0], packed[1], packed[2], packed[3]);
      }
      fence_proxy_async_smem();  // stmatrix (generic proxy) writes -> visible to the TMA store (async proxy)
      named_barrier_sync(EPI_BAR + c, 128);
      auto store_o = [&]() {
#pragma unroll
        for (int j = 0; j < DC; ++j) tma_store_4d(&tm_o, sq_c + j * BM * 128, 64 * j, q_start + row_base, hq, map_b);
        bulk_commit_group();
      };
      if constexpr (!PERSISTENT) {
        if (tid == 0 && row_base < seq_q) {
          store_o();
          bulk_wait_group<0>();  // the store has read shared memory (and finished) before the CTA exits
        }
      } else if (tid == 0) {
        if (row_base < seq_q) store_o();
        // The next tile's Q overwrites these rows: once the store has read them (with no store nothing is pending), one
        // arrive for this warpgroup on q_empty, whose release orders that read before the producer's next Q load.
        // The warp's other lanes wait at the branch's end; the warpgroup's other warps go on to the next tile's
        // bar_q wait, which completes only after this arrive anyway.
        bulk_wait_group_read<0>();
        mbar_arrive(q_empty);
      }
      kb_done += nblk;
    }
    // the last tile's stores have finished before the CTA exits, as the one-tile builds' (their wait above)
    if (PERSISTENT && tid == 0) bulk_wait_group<0>();
  }
#endif
}
