// Flash-attention BACKWARD for Hopper (sm_90a): the key-block pass of an FA3-style backward (dK, dV and, in the
// TW_DQ_ATOMIC builds, dQ's partial sums), and a deterministic query-block dQ kernel.
//
// One CTA = one BN-row key block of one (batch, kv head); grid (ceil(Skv / BN), Hkv, B), causal grids' first key
// blocks (seen by the most queries) first, in the forward's order (cta_coords). It walks every query block
// (BM rows) of every query head of its GQA group that can see its keys and accumulates, in registers,
//   dV += P^T dO        dK += dS^T Q        (dK scaled once at the end)
// with P^T = exp2(S^T * scale_log2 - lse_log2) recomputed from S^T = K Q^T, and dS^T = P^T * (dP^T - delta),
// dP^T = V dO^T. Computing the transposed products directly (keys as the wgmma M dimension) leaves P^T and dS^T
// in the accumulator layout that the register-A operand of the next wgmma takes, so neither goes through shared
// memory for dK / dV. delta = rowsum(dO * O) comes from the Triton backward's preprocess kernel
// (triton_kernels/attention.py); the LSE is the forward's (natural log, fp32 (B, Hq, Sq)).
// Soft cap (TW_SOFTCAP): the forward's scores were cap * tanh(scale * s / cap), so P^T = exp2(t * cap * log2 e - lse)
// with t = tanh(scale * s / cap) recomputed, and dS^T takes the cap's derivative: dS^T = P^T (1 - t^2) (dP^T - delta)
// (the factor scale stays in the final dK / dQ scaling). P^T (1 - t^2) replaces P^T in place once P^T is packed for
// dV, so the cap costs a tanh and no registers.
//
//   WG0  producer: one thread issues TMA for K and V of this key block (once) and for Q and dO of each query block
//        into a STAGES-deep ring (one full / empty mbarrier pair per stage); with dQ in the pass, warp 1 is the dQ
//        writer (TMA reduce-adds of the consumers' staged partials into an fp32 workspace).
//   WG1.. consumers (TW_CONSUMERS = 1 or 2, 64 keys each): per query block, S^T then dP^T (SS wgmma, 64 x BM, two
//        commit groups), P^T's exp2 while dP^T runs, dV += P^T dO issued, dS^T while it runs, dK += dS^T Q; with dQ
//        in the pass, dS^T also goes to shared memory and dQ(64 x 64 columns a consumer) = dS K is staged for the
//        writer. One consumer ("a") is the simplest schedule; two ("b", the default) share each Q / dO load over a
//        128-key block and take the producer's registers (setmaxnreg 24 / 240).
//
// Registers (one consumer thread, hdim 128, BM 64): dK 64 + dV 64 + S^T 32 + dP^T 32 + packed P^T / dS^T 16 + 16
// (dQ's 32 take S^T's place once P^T is packed).
// Masks: the forward's band (ptx/attention_tile.cuh, KeyBand: key j visible to query i iff j <= i + upper in TW_CAUSAL
// builds and i + lower <= j in TW_WINDOW builds - top-left / bottom-right causal, sliding windows); a key block
// visits only the query blocks that see one of its keys, and masks elements only where it straddles an edge. The Sq
// tail (query columns >= Sq get P = 0 through a +inf statistic: their Q / dO rows are TMA zero-fill, their LSE
// unread).
// Keys >= Skv are zero-filled K / V rows; they only produce their own dK / dV rows, which the store masks (and, with
// dQ in the pass, get P = 0 so they add nothing to dQ).
//
// The second kernel of the file, tw_attn_bwd_dq_sm90, is the query-block half: one CTA per BM-row query block of
// one (batch, query head) - the forward's structure with the backward's arithmetic. Q and dO stay resident, K and V
// stream through the ring; S = Q K^T and dP = dO V^T (SS wgmma), P = exp2(S * scale_log2 - lse_log2) and
// dS = P * (dP - delta) in registers (two rows a thread: their LSE and delta live in registers), then
// dQ += dS K with dS as the register-A operand (K stored (key, d): MN-major B, as V is in the forward's P V). No
// atomics: each CTA owns its dQ rows, so the result is deterministic (the op uses it under
// torch.use_deterministic_algorithms).
//
// Packed variable-length batches (TW_VARLEN, both kernels; the forward's convention, attention_sm90.cu): the maps
// cover the packed (total, H, D) tensors as one sequence, blockIdx.z is the sequence (rows from cu_q[b] / cu_k[b]),
// its lengths bound every index and the band is bottom-right per sequence. A block reaching past its sequence loads
// the next one's rows, and a zero factor does not neutralise them (0 x inf is NaN): the dK / dV pass zeroes the
// foreign Q and dO rows of its last query block (they would reach dV = P^T dO and dK = dS^T Q) and, with dQ in the
// pass, the foreign K and V rows (dQ = dS K, dS through V); the dQ kernel zeroes the foreign K and V rows of its last
// key block. Stores are row-masked register stores already; the dQ partials of foreign query rows (this sequence's
// possibly non-finite K times zero dS) are staged as zeros, so their reduce-adds add nothing to the next sequence.
//
// Descriptors (both kernels): each operand's wgmma descriptor is built once a step (query block / key block) and each
// wgmma's is that one advanced by its byte offset (ptx/wgmma_typed.cuh: a 32-bit add to the low word), all in
// uniform registers: the dK / dV consumers' warpgroup index comes through a warp shuffle (ptxas then knows their K / V
// rows' address warp-uniform), and both kernels form the step's descriptors from an opaque base address (see the
// loops), not ahead of the loop. Before, the S^T / dP^T wgmmas of two consumers took their A descriptors from ordinary
// registers, two R2UR before each HGMMA, and the dQ kernel's hoisted Q / dO descriptors one each (SASS, nvcc 13.0,
// hdim 128 causal: dK / dV b 34 R2URs among its 24 HGMMAs -> 4 (a division's), 2096 -> 1968 instructions; b+dq
// 46 -> 4, 2456 -> 2264; dQ 15 -> 0, 1640 -> 1512; the same HGMMAs in the same order, 0 spills before and after).
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
#ifndef TW_STAGES
#define TW_STAGES 2
#endif
#ifndef TW_CAUSAL
#define TW_CAUSAL 0
#endif
// Consumer warpgroups, 64 keys each (1: the simplest schedule; 2: a 128-key block whose Q / dO loads both share, with
// setmaxnreg giving the producer's registers to them).
#ifndef TW_CONSUMERS
#define TW_CONSUMERS 1
#endif
// dQ in the same pass (two consumers only): dS^T goes to shared memory and dQ's partial over this CTA's keys,
// dS K, is added into an fp32 workspace by TMA reduce-adds (the order of the adds varies between runs: not
// deterministic; the separate dQ kernel below is).
#ifndef TW_DQ_ATOMIC
#define TW_DQ_ATOMIC 0
#endif
// dQ's staging stores (TW_DQ_ATOMIC builds): each fragment pair as two 32-bit stores (1) instead of one 64-bit store
// (0; the host's TILEWRIGHT_CUDA_ATTN_BWD_DQ_STAGE=split picks 1, an A/B switch until measured). A thread's rows
// have r mod 8 = lane / 4 = q, so the 128B swizzle sends quads q and q ^ 1 to the same two 16-byte units (2j' ^ q
// and (2j' + 1) ^ q: one set for both), 8 bytes in at the same offsets - the same banks. A 64-bit store is served
// 16 lanes (quads 0-3, or 4-7) at a time, whose 32 words then fall on 16 banks: 2-way conflicts, 4 wavefronts a
// store where 2 would do (ncu, H200, head dim 64: 4.2-way on average, 31% of the shared store wavefronts, Shared the
// busiest pipe). Split, store e of a lane writes word e ^ (q & 1) of its 8 bytes: quads q and q ^ 1 take the two
// words of a bank pair, and each 32-bit store meets the 32 banks once - 2 wavefronts a pair, for 16 more STS and a
// select a store.
#ifndef TW_DQ_STAGE_SPLIT
#define TW_DQ_STAGE_SPLIT 0
#endif
// Three opt-in changes to a consumer's step that move the same data with fewer or later waits (A/B switches, off by
// default; the host's TILEWRIGHT_CUDA_ATTN_BWD_STEP names them). Each computes the same values: only data movement and
// synchronisation differ. The stall profile of the head-dim-64 b+dq build (ncu, H200) that they answer: the dQ
// staging's fence + hand-off ~8.6% of the samples, the statistics loads ~4.5% (short scoreboard), the 16 dS^T
// stores 2.65% (mio: the shared pipe's queue full, the stores conflict-free).
// TW_DQ_DEFER (dQ in the pass): the fence and the READY arrive that hand a step's staged dQ to the writer warp are
// issued one step later, after the next step's S^T / dP^T wgmmas (so the fence's wait for the stores overlaps tensor
// work), and once after the loop for the last step. One staging buffer still suffices; why: see hand_dq.
#ifndef TW_DQ_DEFER
#define TW_DQ_DEFER 0
#endif
// TW_DS_STMATRIX (dQ in the pass): dS^T's rows go to shared memory by four stmatrix.x4 a step instead of 16 32-bit
// stores (the fragment is the accumulator layout stmatrix takes; no transposition; see the store).
#ifndef TW_DS_STMATRIX
#define TW_DS_STMATRIX 0
#endif
// TW_STATS_LDS64: the per-column statistics (LSE, delta) read as 64-bit loads, a column pair each (16 loads a step
// for 32).
#ifndef TW_STATS_LDS64
#define TW_STATS_LDS64 0
#endif

namespace twb {

constexpr int D = TW_HDIM;
constexpr int NC = TW_CONSUMERS;
// The register split of two consumers (setmaxnreg): 24 a producer thread (loop counters, coordinates), 240 a consumer
// thread (dK + dV + S^T + dP^T + packed P^T / dS^T); 24 * 128 + 240 * 256 = 64512 <= 65536 registers.
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;
constexpr int BN = 64 * NC;  // keys per CTA: one m64 wgmma atom (its M) per consumer warpgroup
constexpr int BM = 64;  // query rows per step: the N of S^T / dP^T and the K of the dV / dK wgmmas
constexpr int STAGES = TW_STAGES;
constexpr bool CAUSAL = TW_CAUSAL != 0;
constexpr bool WINDOW = TW_WINDOW != 0;  // the band's lower edge
constexpr bool UPPER_OFFSET = TW_UPPER_OFFSET != 0;
constexpr bool SOFTCAP = TW_SOFTCAP != 0;
constexpr bool VARLEN = TW_VARLEN != 0;
constexpr bool HEAVY_FIRST = CAUSAL && !VARLEN;  // dense causal grids may run longest tiles first (cta_coords)
constexpr int THREADS = 128 * (NC + 1);
constexpr int DC = D / 64;                // 64-column (128-byte) chunks of a row: one TMA box / swizzle span each
constexpr int KV_BYTES = BN * D * 2;      // the K (or V) block
constexpr int QD_BYTES = BM * D * 2;      // one Q (or dO) block
constexpr int K_OFF = 0;
constexpr int V_OFF = K_OFF + KV_BYTES;
constexpr int Q_OFF = V_OFF + KV_BYTES;   // STAGES Q blocks
constexpr int DO_OFF = Q_OFF + STAGES * QD_BYTES;
// The row statistics of a step's query block: BM base-2 LSE values then BM deltas (fp32). Dense builds (STATS_BY_TMA)
// take them with the stage: the Triton preprocess writes them packed per 64-row block (pack_statistics' layout: the
// log2 / +inf conversion done, rows past Sq padded) and the producer adds one 512-byte bulk copy to the stage's TMA
// bytes - so no consumer waits on a global load at the top of a step (a DRAM / L2 round trip before the step's first
// wgmma; 6-17% of the kernel's time, perf/LOG.md session 26). Packed batches keep the consumers' own global loads
// (their blocks are not 64-row aligned in the packed rows, and the next sequence's rows need +inf statistics).
// Either way each consumer thread then stores its one value into the consumer's own buffer (double-buffered by step)
// behind a per-step barrier: reading the stage's copy in place from the P^T / dS^T loops measured no faster at head
// dim 128, and its build first spilled.
constexpr bool STATS_BY_TMA = !VARLEN;
constexpr int STAT_BLOCK_BYTES = 2 * BM * 4;
constexpr int STAT_BYTES = 2 * STAT_BLOCK_BYTES;  // per consumer, two steps
constexpr int STAT_REGION = (STATS_BY_TMA ? STAGES * STAT_BLOCK_BYTES : 0) + NC * STAT_BYTES;
constexpr int STAT_OFF = DO_OFF + STAGES * QD_BYTES;
constexpr bool DQ_ATOMIC = TW_DQ_ATOMIC != 0;
constexpr bool DQ_STAGE_SPLIT = DQ_ATOMIC && TW_DQ_STAGE_SPLIT != 0;
constexpr bool DQ_DEFER = DQ_ATOMIC && TW_DQ_DEFER != 0;
constexpr bool DS_STMATRIX = DQ_ATOMIC && TW_DS_STMATRIX != 0;
constexpr bool STATS_LDS64 = TW_STATS_LDS64 != 0;
// dS^T of one step (BN key rows x BM queries, 16-bit, 128B-swizzled rows of 128 bytes), double-buffered by step:
// with D = 128 each consumer's dQ wgmma reads both consumers' rows, so a warpgroup may write step k + 1's rows while
// the other still reads step k's.
constexpr int DS_BYTES = BN * BM * 2;
constexpr int DS_OFF = STAT_OFF + (STAT_REGION + 1023) / 1024 * 1024;
// Each consumer's fp32 dQ partial (64 rows x DQ_N columns) staged for the TMA reduce-add: DQ_N / 32 boxes of 64 rows
// x 128 bytes, 128B-swizzled. One buffer: the reduce of step k has a whole step to read it before step k + 1 writes.
constexpr int DQ_N = 64;
constexpr int DQ_BOX_BYTES = 64 * 128;
constexpr int DQ_STAGE_BYTES = (DQ_N / 32) * DQ_BOX_BYTES;
constexpr int DQ_OFF = DS_OFF + (DQ_ATOMIC ? 2 * DS_BYTES : 0);
// Named barriers (128 consumer threads + the 32 of the dQ writer warp) for consumer c's staging boxes: READY + c (the
// consumer arrives once its partial is stored, the writer waits), FREE + c (the writer arrives once the TMA unit has
// read them, the consumer waits before its next store). Ids 1-4 are the consumers' own (statistics, dS^T).
constexpr int DQ_READY_BAR = 5;
constexpr int DQ_FREE_BAR = 7;
// Varlen: both consumers' zeroing of foreign rows is done before either's wgmma reads them (128 * NC threads).
constexpr int ZERO_BAR = 9;
constexpr int BAR_OFF = DQ_OFF + (DQ_ATOMIC ? NC * DQ_STAGE_BYTES : 0);
constexpr int SMEM_BYTES = 1024 + BAR_OFF + (1 + 2 * STAGES) * 8;
// The dQ partial of one step, 64 query rows x DQ_N = 64 columns a consumer (32 fp32 registers a thread): with D = 128
// the two consumers split dQ's columns and each reduces over all BN keys (both halves of dS^T); with D = 64 each
// takes all columns over its own 64 keys, and both add into the workspace.
constexpr bool DQ_SPLIT_COLUMNS = D == 128;
constexpr int DQ_KEYS = DQ_SPLIT_COLUMNS ? BN : 64;

static_assert(D == 64 || D == 128, "head dim 64 or 128 (dK + dV hold D registers a thread)");
static_assert(NC == 1 || NC == 2, "one or two consumer warpgroups");
static_assert(!DQ_ATOMIC || NC == 2, "dQ in the dK / dV pass takes two consumer warpgroups (the 64-column split)");
static_assert(DS_OFF % 1024 == 0, "the dS^T tile is a 128B-swizzled wgmma operand: 1024-byte aligned");
static_assert(SMEM_BYTES <= TW_SMEM_OPTIN_BYTES, "shared memory over the sm_90 per-block limit");
static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * NC <= 65536 || NC == 1, "register split over the file");

// S^T(64 keys x BM) (+)= A(64 keys x 16 of d) B(16 of d x BM queries): A = K or V rows, B = Q or dO rows, both
// K-major: mma_ss<BM>. dX(64 keys x D) += A(64 keys x 16 queries, registers) B(16 queries x D): B = dO or Q rows
// stored (query, d), MN-major for this B: mma_rs_mn<D> (ptx/wgmma_typed.cuh).

// The (query head, query block) steps of the key block at n0, which every role iterates: query blocks that see any
// of its keys (rows n0 - upper (causal) to n0 + BN - 1 - lower of the band, block-aligned down) times the GQA group.
// Each role computes them after its setmaxnreg from a fresh read of its coordinates (cta_coords): a value computed
// before the branch stays live across the register reallocation, and ptxas spilled one there.
struct KeyBlockSteps {
  int m_first, m_blocks, steps;
};

TW_DEVICE KeyBlockSteps key_block_steps(int n0, int Sq, int heads, KeyBand band) {
  const int rows_begin = CAUSAL ? max(0, n0 - band.upper) : 0;
  const int rows_end = WINDOW ? min(Sq, n0 + BN - band.lower) : Sq;
  const int m_first = (rows_begin / BM) * BM;
  const int m_blocks = rows_end > rows_begin ? (rows_end - m_first + BM - 1) / BM : 0;
  return {m_first, m_blocks, m_blocks * heads};
}

// The query heads a CTA walks: its KV head's whole GQA group, or - when the host splits the group over CTAs so that
// a grid of few key blocks x KV heads still fills the SMs - slice `split` of `splits`, heads_per_cta heads each (the
// last one shorter); grid y is then Hkv x splits, and each slice writes fp32 partial dK / dV that the host adds up.
struct HeadSlice {
  int hkv, split, splits, head0, heads;
};

TW_DEVICE HeadSlice head_slice(int y, int group, int heads_per_cta) {
  const int splits = (group + heads_per_cta - 1) / heads_per_cta;
  const int hkv = y / splits, split = y - hkv * splits;
  return {hkv, split, splits, hkv * group + split * heads_per_cta, min(heads_per_cta, group - split * heads_per_cta)};
}

}  // namespace twb

// tm_q / tm_do: maps over (D, Sq, Hq, B) with box (64, BM, 1, 1); tm_k / tm_v: over (D, Skv, Hkv, B) with box
// (64, BN, 1, 1); all 128B-swizzled. lse, delta: contiguous fp32 (B, Hq, Sq). dk, dv: (B, Hkv, Skv, D) with unit
// last stride, element strides (b, h, s) given. tm_dq (TW_DQ_ATOMIC builds; unused otherwise): a map over the fp32
// workspace (D, Sq, Hq, B), box (32, 64, 1, 1), 128B-swizzled, zeroed by the host; receives scale * dS K.
// group = Hq / Hkv. scale_log2 = scale * log2(e); dK is scaled by `scale` at the end. head_dim: the tensors' own head
// dim, D (the build) or a multiple of 8 below it: the maps' true width makes TMA zero-fill the columns past it (they
// add nothing to S or dP^T and give zero columns of dK, dV and dQ), the reduce-adds into the workspace clip them, and
// the dK / dV stores skip them. band_upper / band_lower: the forward's KeyBand (clamped by the host). softcap_pre =
// scale / cap, softcap_post = cap * log2(e) (read by TW_SOFTCAP builds). TW_VARLEN builds: maps over (D, total, H,
// 1), Sq / Skv the totals (lse / delta are (Hq, total_q)), cu_q / cu_k the sequences' row offsets, the band's offsets
// relative to each sequence's bottom-right corner; dense builds ignore cu_q / cu_k. heads_per_cta: the query heads of
// the group one CTA walks (group: no split; else grid y = Hkv x ceil(group / heads_per_cta), see head_slice) and
// dkv_partial, with a split, the fp32 partials (2 (dK, dV), splits, B (1 packed), Hkv, Skv, D) the CTAs write instead
// of dk / dv (null without one).
extern "C" __global__ void __launch_bounds__(twb::THREADS, 1)
    tw_attn_bwd_dkdv_sm90(const __grid_constant__ TwTensorMap tm_q, const __grid_constant__ TwTensorMap tm_k,
                          const __grid_constant__ TwTensorMap tm_v, const __grid_constant__ TwTensorMap tm_do,
                          const __grid_constant__ TwTensorMap tm_dq, const float* __restrict__ lse,
                          const float* __restrict__ delta, const float* __restrict__ stats,
                          unsigned short* __restrict__ dk,
                          unsigned short* __restrict__ dv, long long dk_sb,
                          long long dk_sh, long long dk_ss, long long dv_sb, long long dv_sh, long long dv_ss,
                          int Sq, int Skv, int Hq, int group, float scale_log2, float scale, int head_dim,
                          int band_upper, int band_lower, float softcap_pre, float softcap_post,
                          int heads_per_cta, float* __restrict__ dkv_partial, const int* __restrict__ cu_q,
                          const int* __restrict__ cu_k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace twb;
  extern __shared__ unsigned char smem_raw[];
  const tw_u32 raw = smem_u32(smem_raw);
  tw_u32 sbase = (raw + 1023) & ~1023u;  // 128B-swizzle atoms (8 rows x 128 B) need 1024-byte alignment
  const tw_u32 bar_kv = sbase + BAR_OFF;
  const tw_u32 full = bar_kv + 8;
  const tw_u32 empty = full + 8 * STAGES;

  const int wg = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;
  // The grid covers the longest sequence: a key block past this one's end has nothing to do (uniform over the CTA,
  // before any barrier). Each role reads its coordinates and its sequence's rows again after its setmaxnreg (see
  // key_block_steps); packed grids keep blockIdx's own order (HEAVY_FIRST is off for them).
  if (VARLEN && (int)blockIdx.x * BN >= cu_k[blockIdx.z + 1] - cu_k[blockIdx.z]) return;

  if (threadIdx.x == 0) {
    mbar_init(bar_kv, 1);  // one arrive.expect_tx + the K and V bytes
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);   // producer's arrive.expect_tx + TMA bytes
      mbar_init(empty + 8 * s, NC);  // one arrive per consumer warpgroup once its wgmmas read the stage
    }
    fence_mbarrier_init();  // inits visible to the other threads and to the TMA unit before first use
  }
  __syncthreads();

  if (wg == 0) {
    // ------------------------------------------------------------------ producer
    // Give registers back to the consumers (dK + dV + S^T + dP^T live at once). With one consumer the per-thread cap
    // at entry (launch bounds 256 threads) already allows 255, so there is nothing to redistribute.
    if constexpr (NC == 2) setmaxnreg_dec<PRODUCER_REGS>();
    // (the rows this pass streams per head, whose L2 reuse the limit keeps, are Q's and dO's: Sq of them)
    const CtaCoords cta = cta_coords(HEAVY_FIRST, Sq);
    const HeadSlice heads = head_slice(cta.y, group, heads_per_cta);
    const int n0 = cta.rank * BN, hkv = heads.hkv, b = cta.z;  // key block 0 first: the longest in a causal grid
    const SequenceRows seq = sequence_rows<VARLEN, UPPER_OFFSET>(cu_q, cu_k, b, Sq, Skv, band_upper, band_lower);
    const KeyBlockSteps sched = key_block_steps(n0, seq.seq_q, heads.heads, seq.band);
    const int m_first = sched.m_first, m_blocks = sched.m_blocks, steps = sched.steps;
    if (tid == 0) {
      tma_prefetch_desc(&tm_q);
      tma_prefetch_desc(&tm_do);
      mbar_arrive_expect_tx(bar_kv, 2 * KV_BYTES);
#pragma unroll
      for (int j = 0; j < DC; ++j) {
        tma_load_4d(sbase + K_OFF + j * BN * 128, &tm_k, bar_kv, 64 * j, seq.k_start + n0, hkv, seq.map_b);
        tma_load_4d(sbase + V_OFF + j * BN * 128, &tm_v, bar_kv, 64 * j, seq.k_start + n0, hkv, seq.map_b);
      }
      StageRing<STAGES> ring;  // ptx/attention_tile.cuh
#pragma unroll 1  // 24 registers a thread in this warpgroup (two consumers): unrolled copies spilled
      for (int step = 0; step < steps; ++step) {
        const int s = ring.stage;
        const tw_u32 phase = ring.phase;
        const int hq = heads.head0 + step / m_blocks;
        const int m0 = m_first + (step % m_blocks) * BM;
        mbar_wait(empty + 8 * s, phase ^ 1);  // the first pass over the ring waits on fresh barriers' parity 1
        mbar_arrive_expect_tx(full + 8 * s, 2 * QD_BYTES + (STATS_BY_TMA ? STAT_BLOCK_BYTES : 0));
#pragma unroll
        for (int j = 0; j < DC; ++j) {
          tma_load_4d(sbase + Q_OFF + s * QD_BYTES + j * BM * 128, &tm_q, full + 8 * s, 64 * j, seq.q_start + m0,
                      hq, seq.map_b);
          tma_load_4d(sbase + DO_OFF + s * QD_BYTES + j * BM * 128, &tm_do, full + 8 * s, 64 * j, seq.q_start + m0,
                      hq, seq.map_b);
        }
        if constexpr (STATS_BY_TMA) {
          // the packed statistics of (b, hq, query block m0 / BM): (B, Hq, ceil(Sq / BM), 2, BM) fp32
          const long long block = ((long long)b * Hq + hq) * ((Sq + BM - 1) / BM) + m0 / BM;
          bulk_load(sbase + STAT_OFF + s * STAT_BLOCK_BYTES, stats + block * (2 * BM), STAT_BLOCK_BYTES, full + 8 * s);
        }
        ring.advance();
      }
    } else if (DQ_ATOMIC && tid / 32 == 1) {
      // The dQ writer (warp 1): per step and consumer, wait until its staging boxes are written, add them into the
      // workspace (TMA reduce-add), and hand the boxes back once the TMA unit has read them - so the consumers never
      // wait on the reduce. The boxes start free (the first arrive); no arrive follows the last step's reduce.
      const int lane = tid % 32;
      if (steps > 0) {
#pragma unroll
        for (int c = 0; c < NC; ++c) named_barrier_arrive(DQ_FREE_BAR + c, 160);
      }
      // (query head, query block) of each step as two counters: no division in 24 registers a thread.
      int hq = heads.head0, m0 = m_first;
      const int m_stop = m_first + m_blocks * BM;
#pragma unroll 1
      for (int left = steps; left > 0; --left) {
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          named_barrier_sync(DQ_READY_BAR + c, 160);
          if (lane == 0) {
#pragma unroll
            for (int bx = 0; bx < DQ_N / 32; ++bx) {
              tma_reduce_add_4d(&tm_dq, sbase + DQ_OFF + c * DQ_STAGE_BYTES + bx * DQ_BOX_BYTES,
                                (DQ_SPLIT_COLUMNS ? 64 * c : 0) + 32 * bx, seq.q_start + m0, hq, seq.map_b);
            }
            bulk_commit_group();
            bulk_wait_group_read<0>();
          }
          __syncwarp();
          if (left > 1) named_barrier_arrive(DQ_FREE_BAR + c, 160);
        }
        m0 += BM;
        if (m0 >= m_stop) {
          m0 = m_first;
          ++hq;
        }
      }
      if (lane == 0) bulk_wait_group<0>();  // the adds complete before the CTA (and its smem) goes away
    }
  } else {
    // ------------------------------------------------------------------ consumers
    if constexpr (NC == 2) setmaxnreg_inc<CONSUMER_REGS>();
    const CtaCoords cta = cta_coords(HEAVY_FIRST, Sq);
    const HeadSlice heads = head_slice(cta.y, group, heads_per_cta);
    const int n0 = cta.rank * BN, hkv = heads.hkv, b = cta.z;
    const SequenceRows seq = sequence_rows<VARLEN, UPPER_OFFSET>(cu_q, cu_k, b, Sq, Skv, band_upper, band_lower);
    const KeyBand band = seq.band;
    const KeyBlockSteps sched = key_block_steps(n0, seq.seq_q, heads.heads, band);
    const int m_first = sched.m_first, m_blocks = sched.m_blocks, steps = sched.steps;
    // A constant with one consumer (its code stays what it was measured as); with two, the warpgroup index through a
    // shuffle: the same value, but one ptxas knows to be warp-uniform, so the K / V descriptors of this warpgroup's
    // rows (kv_c) are formed in uniform registers (wg - 1 is per-thread to it: threadIdx.x / 128).
    const int c = NC == 1 ? 0 : __shfl_sync(0xffffffffu, wg, 0) - 1;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int n0c = n0 + 64 * c;  // this warpgroup's first key
    const tw_u32 kv_c = c * 64 * 128;  // its 64 rows inside each K / V column chunk
    // This thread's two key rows of every accumulator fragment and its query columns 8j + col_lane + {0, 1}.
    const int key0 = n0c + warp * 16 + (lane >> 2);
    const int col_lane = 2 * (lane & 3);

    float dk_acc[D / 2];
    float dv_acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) {
      dk_acc[i] = 0.0f;
      dv_acc[i] = 0.0f;
    }
    float s_acc[BM / 2];   // S^T, then P^T in place
    float dp_acc[BM / 2];  // dP^T, then dS^T in place
    tw_u32 p[BM / 4];      // P^T as 16-bit pairs: p[2j + h] = key row h, query columns 8j + col_lane + {0, 1}
    tw_u32 ds[BM / 4];

    float dq_part[DQ_N / 2];  // dS K of one step (dQ in the pass)
    // scale * dq_part -> this warpgroup's staging boxes -> one TMA reduce-add per box into the workspace (by the dQ
    // writer warp). Fragment (j, h, e) is row warp * 16 + lane / 4 + 8h, column 8j + col_lane + e: box j / 4, 16-byte
    // unit 2 (j % 4) + (lane & 3) / 2 of its 128-byte row (XOR the row mod 8: the map's swizzle), 8 bytes in.
    // dQ(64 queries x DQ_N) = dS K over DQ_KEYS keys of the step whose dS^T sits in buffer `buf`: A = dS^T (stored
    // (key, query): MN-major A), B = K rows (stored (key, d): MN-major B); both consumers' dS^T rows (D = 128) or this
    // warpgroup's own (D = 64) must be written (barrier 3) before it is issued.
    auto issue_dq = [&](int buf) {
      const tw_u32 a_base = sbase + DS_OFF + buf * DS_BYTES + (DQ_SPLIT_COLUMNS ? 0 : c * 64 * 128);
      const tw_u32 b_base = sbase + K_OFF + (DQ_SPLIT_COLUMNS ? c * BN * 128 : c * 64 * 128);
      const tw_u64 da = wgmma_desc_sw128(a_base, BN * 128, 1024);
      const tw_u64 db = wgmma_desc_sw128(b_base, BN * 128, 1024);
#pragma unroll
      for (int kk = 0; kk < DQ_KEYS / 16; ++kk) {
        mma_ss<DQ_N, 1, 1>(dq_part, wgmma_desc_advance(da, kk * 16 * 128), wgmma_desc_advance(db, kk * 16 * 128),
                           kk != 0);
      }
    };
    // The staged boxes to the writer: this thread's generic-proxy stores ordered before the TMA unit's reads (the
    // fence), then the READY arrive the writer waits on before its reduce-adds.
    // TW_DQ_DEFER issues this one step late (after the next step's S^T / dP^T issue; after the loop for the last
    // step). One staging buffer is still enough, by program order in each consumer thread: step k's stores, then
    // (step k + 1) this fence + arrive, then step k + 1's FREE wait, then its stores. The writer arrives on FREE only
    // after bulk_wait_group_read of its reduce of step k's boxes, and it waits on READY before issuing that reduce,
    // so step k + 1's stores cannot overwrite boxes that the TMA unit has not read, and the reduce cannot read them
    // before this thread's fence. Both barriers keep their counts (steps READY arrivals by each consumer, the first
    // FREE arrival ahead and steps - 1 after reduces by the writer), so neither side waits on a phase that never
    // comes; steps == 0 arrives on nothing. Cost: the writer's reduce of step k starts a part of a step later and has
    // until step k + 1's FREE wait (most of a step, not a whole one) to read the boxes.
    auto hand_dq = [&]() {
      fence_proxy_async_smem();  // generic-proxy stores before the TMA unit reads them
      named_barrier_arrive(DQ_READY_BAR + c, 160);  // to the dQ writer (producer warp 1)
    };
    // Varlen: rows from `valid_rows` on are the next sequence's queries; their partials are products of this
    // sequence's K with zero dS (inf x 0 is NaN) and the box's reduce-add reaches their dq rows - staged as zeros.
    auto stage_dq = [&](int valid_rows) {
      const tw_u32 stage = sbase + DQ_OFF + c * DQ_STAGE_BYTES;
      named_barrier_sync(DQ_FREE_BAR + c, 160);  // the dQ writer's reduce of the previous step has read the boxes
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + (lane >> 2) + 8 * h;
        const bool foreign = VARLEN && r >= valid_rows;  // zeros selected, not 0 x the value (it may be NaN)
#pragma unroll
        for (int j = 0; j < DQ_N / 8; ++j) {
          const int unit = (2 * (j % 4) + ((lane & 3) >> 1)) ^ (r & 7);
          const float lo = foreign ? 0.0f : dq_part[4 * j + 2 * h] * scale;
          const float hi = foreign ? 0.0f : dq_part[4 * j + 2 * h + 1] * scale;
          const tw_u32 slot = stage + (j / 4) * DQ_BOX_BYTES + r * 128 + unit * 16 + (lane & 1) * 8;
          if constexpr (DQ_STAGE_SPLIT) {  // word q & 1 first: odd quads write hi, then lo (see TW_DQ_STAGE_SPLIT)
            const int odd = (lane >> 2) & 1;
            st_shared_b32(slot + 4 * odd, __float_as_uint(odd ? hi : lo));
            st_shared_b32(slot + 4 * (odd ^ 1), __float_as_uint(odd ? lo : hi));
          } else {
            st_shared_v2_f32(slot, lo, hi);
          }
        }
      }
      if constexpr (!DQ_DEFER) hand_dq();
    };

    mbar_wait(bar_kv, 0);  // single use per CTA: phase 0
    if constexpr (VARLEN && DQ_ATOMIC) {
      // dQ = dS K reads every K row of the block and dS^T = P^T (dP^T - delta) every V row (through dP^T = V dO^T):
      // the next sequence's rows (P^T 0 there) must be zeros, not its keys and values
      if (n0 + BN > seq.seq_k) {
        zero_tile_rows<D>(sbase + K_OFF, BN, seq.seq_k - n0, (wg - 1) * 128 + tid, 128 * NC);
        zero_tile_rows<D>(sbase + V_OFF, BN, seq.seq_k - n0, (wg - 1) * 128 + tid, 128 * NC);
        fence_proxy_async_smem();
        named_barrier_sync(ZERO_BAR, 128 * NC);
      }
    }
    float* stat_smem = reinterpret_cast<float*>(smem_raw + (sbase - raw) + STAT_OFF);
    StageRing<STAGES> ring;  // ptx/attention_tile.cuh
    for (int step = 0; step < steps; ++step) {
      // sbase made opaque each step: the compiler then forms the step's wgmma descriptors inside the loop (in uniform
      // registers) instead of hoisting them into ordinary ones ahead of it, where the hdim-128 builds ran out of
      // their 240 registers and spilled 40-56 bytes (no instruction is emitted for this). Each operand's descriptor
      // is built once a step from it and each wgmma's is that one advanced by its byte offset (one uniform add;
      // ptx/wgmma_typed.cuh, mma_ss_head_dim / mma_rs_frags).
      sbase = opaque_u32(sbase);
      const int s = ring.stage;
      const tw_u32 phase = ring.phase;
      const int m0 = m_first + (step % m_blocks) * BM;
      const tw_u32 sq = sbase + Q_OFF + s * QD_BYTES;
      const tw_u32 sdo = sbase + DO_OFF + s * QD_BYTES;
      // The block's row statistics, BM base-2 LSEs (+inf for a row without any visible key, LSE -inf, and for rows
      // >= Sq: either makes P exactly 0) then BM deltas, one value per thread: threads 0-63 the LSE of query
      // m0 + tid, threads 64-127 its delta - from the stage (dense builds: it arrived with Q and dO) or loaded from
      // global memory (packed batches: before the TMA wait) - staged through this consumer's shared buffer rather
      // than loaded per fragment column (16 + 16 live values a thread pushed the hdim-128 build over 255 registers);
      // stored after the S^T / dP^T issue, double-buffered by step, so one barrier per step orders the stores before
      // the reads and the reads of step k - 1 before the stores of step k + 1.
      float stat = 0.0f;
      if constexpr (!STATS_BY_TMA) {
        const int hq = heads.head0 + step / m_blocks;
        const long long row_base = VARLEN ? (long long)hq * Sq + seq.q_start : ((long long)b * Hq + hq) * Sq;
        const int stat_col = m0 + (tid & (BM - 1));
        if (tid < BM) {
          const float l = stat_col < seq.seq_q ? lse[row_base + stat_col] : TW_NEG_INF;
          stat = l == TW_NEG_INF ? -TW_NEG_INF : l * 1.4426950408889634f;
        } else {
          stat = stat_col < seq.seq_q ? delta[row_base + stat_col] : 0.0f;
        }
      }
      mbar_wait(full + 8 * s, phase);
      if constexpr (STATS_BY_TMA) stat = stat_smem[s * 2 * BM + tid];  // (read before the stage's release)
      if constexpr (VARLEN) {
        // the last query block's rows past the sequence are the next sequence's Q / dO: zeros instead (their P^T
        // is 0, but dV = P^T dO and dK = dS^T Q would still multiply them)
        if (m0 + BM > seq.seq_q) {
          zero_tile_rows<D>(sq, BM, seq.seq_q - m0, (wg - 1) * 128 + tid, 128 * NC);
          zero_tile_rows<D>(sdo, BM, seq.seq_q - m0, (wg - 1) * 128 + tid, 128 * NC);
          fence_proxy_async_smem();
          named_barrier_sync(ZERO_BAR, 128 * NC);
        }
      }

      // S^T = K Q^T, then dP^T = V dO^T: D/16 k-steps each over the head dim, one commit group each, so that P^T's
      // exp2 runs while dP^T is still in the tensor cores, and dS^T while dV's product is.
      wgmma_fence();  // the accumulators were written by ordinary instructions since the last batch
      mma_ss_head_dim<BM, D>(s_acc, wgmma_desc_sw128(sbase + K_OFF + kv_c, 16, 1024), BN * 128,
                             wgmma_desc_sw128(sq, 16, 1024), BM * 128);
      wgmma_commit();
      mma_ss_head_dim<BM, D>(dp_acc, wgmma_desc_sw128(sbase + V_OFF + kv_c, 16, 1024), BN * 128,
                             wgmma_desc_sw128(sdo, 16, 1024), BM * 128);
      wgmma_commit();
      if constexpr (DQ_DEFER) {
        if (step > 0) hand_dq();  // the previous step's staged dQ, while S^T / dP^T run (see hand_dq)
      }

      // this consumer's buffer, behind the stage copies of dense builds
      float* stat_buf = stat_smem + (STATS_BY_TMA ? STAGES * 2 * BM : 0) + c * 2 * 2 * BM + (step & 1) * 2 * BM;
      stat_buf[tid] = stat;
      named_barrier_sync(1 + c, 128);  // this warpgroup's 128 threads

      // P^T, elementwise (query columns >= Sq have P = 0 through their +inf statistic; the band's mask only where
      // the block straddles one of its edges). With dQ in this pass, keys >= Skv must have P = 0 too: their
      // zero-filled K rows give S^T = 0, and exp2(-lse) of a row whose scores are all very negative is inf, which
      // times K's zeros is NaN in dQ.
      const bool key_tail = DQ_ATOMIC && n0c + 64 > seq.seq_k;
      const bool need_mask =
          (CAUSAL && n0c + 63 > m0 + band.upper) || (WINDOW && n0c < m0 + BM - 1 + band.lower) || key_tail;
      wgmma_wait<1>();  // S^T is complete; dP^T may still run
      wgmma_reg_fence(s_acc);
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) {
        float cap_grad[4];  // the soft cap's derivative, 1 - t^2, of this j's four fragments (TW_SOFTCAP)
        // TW_STATS_LDS64: both columns' LSEs in one 64-bit load (stat_buf is 1024-byte aligned plus multiples of
        // 512 bytes, col_lane is even: 8-byte aligned); the same two values as the two 32-bit loads.
        float2 m_pair;
        if constexpr (STATS_LDS64) m_pair = *reinterpret_cast<const float2*>(stat_buf + 8 * j + col_lane);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = 8 * j + col_lane + e;
          const float m = STATS_LDS64 ? (e == 0 ? m_pair.x : m_pair.y) : stat_buf[c];
          // The keys query column c sees: from m0 + c + lower to m0 + c + upper (causal; else every key), with dQ in
          // the pass only those below Skv (keys >= Skv are not stored otherwise).
          const int first_key = m0 + c + band.lower;
          const int band_last = CAUSAL ? m0 + c + band.upper : seq.seq_k;
          const int last_key = DQ_ATOMIC ? min(band_last, seq.seq_k - 1) : band_last;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 4 * j + 2 * h + e;
            const int key = key0 + 8 * h;
            float pv;
            if constexpr (SOFTCAP) {
              const float t = tanh_approx(s_acc[r] * softcap_pre);
              cap_grad[2 * h + e] = fmaf(-t, t, 1.0f);
              pv = ex2_approx(fmaf(t, softcap_post, -m));
            } else {
              pv = ex2_approx(fmaf(s_acc[r], scale_log2, -m));
            }
            if (need_mask && (key > last_key || (WINDOW && key < first_key))) pv = 0.0f;
            s_acc[r] = pv;
          }
        }
        if constexpr (SOFTCAP) {
          // P^T packed for dV, then P^T (1 - t^2) in its place for dS^T
#pragma unroll
          for (int h = 0; h < 2; ++h) p[2 * j + h] = pack2(s_acc[4 * j + 2 * h], s_acc[4 * j + 2 * h + 1]);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int e = 0; e < 2; ++e) s_acc[4 * j + 2 * h + e] *= cap_grad[2 * h + e];
          }
        }
      }
      if constexpr (!SOFTCAP) {
#pragma unroll
        for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
          for (int h = 0; h < 2; ++h) p[2 * j + h] = pack2(s_acc[4 * j + 2 * h], s_acc[4 * j + 2 * h + 1]);
        }
      }

      // dV += P^T dO and (below) dK += dS^T Q: BM/16 k-steps over the queries; k-step kk takes query columns
      // 16kk..16kk+15, i.e. fragments {x[4kk], x[4kk+1], x[4kk+2], x[4kk+3]}. B descriptor (MN-major): 16 query rows
      // (16 x 128 B) per k-step, LBO = bytes between 64-column chunks of d (one box: BM rows x 128 B), SBO = 8 rows
      // x 128 B.
      wgmma_fence();  // the P^T fragments were written by ordinary instructions
      mma_rs_frags<BM / 16, D>(dv_acc, p, wgmma_desc_sw128(sdo, BM * 128, 1024));
      wgmma_commit();

      // dS^T = P^T * (dP^T - delta), from the fp32 P^T still in s_acc (P^T (1 - t^2) with the soft cap).
      wgmma_wait<1>();  // dP^T is complete; dV's product may still run
      wgmma_reg_fence(dp_acc);
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) {
        float2 dl_pair;  // TW_STATS_LDS64: both columns' deltas in one 64-bit load (as the LSEs above)
        if constexpr (STATS_LDS64) dl_pair = *reinterpret_cast<const float2*>(stat_buf + BM + 8 * j + col_lane);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float dl = STATS_LDS64 ? (e == 0 ? dl_pair.x : dl_pair.y) : stat_buf[BM + 8 * j + col_lane + e];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 4 * j + 2 * h + e;
            dp_acc[r] = s_acc[r] * (dp_acc[r] - dl);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) ds[2 * j + h] = pack2(dp_acc[4 * j + 2 * h], dp_acc[4 * j + 2 * h + 1]);
      }

      if constexpr (DQ_ATOMIC) {
        // dS^T rows of this warpgroup into the step's buffer: 128B-swizzled (the 16-byte unit index of a row XOR the
        // row mod 8, the pattern TMA writes and wgmma reads), which also keeps a warp's 32 stores on 32 banks.
        if constexpr (DS_STMATRIX) {
          // TW_DS_STMATRIX: ds[2j + h] of the 32 lanes is an 8 x 8 16-bit matrix - key rows 16 warp + 8h + 0..7,
          // query columns 8j..8j + 7, lane l holding row l / 4, columns 2 (l % 4) and + 1: stmatrix's register
          // layout (no .trans: rows stay keys, as dS^T is stored). stmatrix.x4 number i of a step stores matrices
          // (j, h) = (2i + m / 2, m % 2) for m = 0..3 from ds[4i + m]; lane l gives the address of row l % 8 of matrix
          // l / 8. That row is 16 contiguous bytes, the 16-byte unit j of key row R = 64c + 16 warp + 8h + l % 8, at
          // unit j ^ (R % 8) = j ^ (l % 8) under the swizzle - the bytes the 32-bit stores below write, the same
          // bytes each (a CPU test checks the two maps). A matrix's 8 rows sit in 8 different units: 32 banks, one
          // wavefront a matrix, as one 32-bit store took.
          const int mat = lane >> 3, rr = lane & 7;
          const tw_u32 row_addr =
              sbase + DS_OFF + (step & 1) * DS_BYTES + (64 * c + warp * 16 + 8 * (mat & 1) + rr) * 128;
#pragma unroll
          for (int i = 0; i < BM / 16; ++i) {
            stmatrix_x4(row_addr + (((2 * i + (mat >> 1)) ^ rr) * 16), ds[4 * i], ds[4 * i + 1], ds[4 * i + 2],
                        ds[4 * i + 3]);
          }
        } else {
          const tw_u32 ds_row0 = sbase + DS_OFF + (step & 1) * DS_BYTES + (64 * c + warp * 16 + (lane >> 2)) * 128;
#pragma unroll
          for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = warp * 16 + (lane >> 2) + 8 * h;
              st_shared_b32(ds_row0 + h * 8 * 128 + ((j ^ (r & 7)) * 16) + 2 * col_lane, ds[2 * j + h]);
            }
          }
        }
        fence_proxy_async_smem();  // generic-proxy stores before the dQ wgmma's async-proxy reads
      }
      if constexpr (DQ_ATOMIC) {
        // dQ = dS K, after the barrier that makes the other consumer's dS^T rows visible (D = 128) or this
        // warpgroup's own (D = 64), issued before dK += dS^T Q: wgmma groups retire in issue order, so waiting for
        // dQ's (wait 1) leaves dK's product in the tensor cores while dQ is staged for the writer, where issuing dQ
        // last made the staging wait for all three products.
        if constexpr (DQ_SPLIT_COLUMNS) named_barrier_sync(3, 256);  // both consumers' dS^T rows are written
        else named_barrier_sync(3 + c, 128);
        wgmma_fence();  // dS^T's fragments and dQ's fresh accumulator were written by ordinary instructions
        issue_dq(step & 1);
        wgmma_commit();
        mma_rs_frags<BM / 16, D>(dk_acc, ds, wgmma_desc_sw128(sq, BM * 128, 1024));
        wgmma_commit();
        wgmma_wait<1>();  // dV and dQ are complete; dK's product may still run
        wgmma_reg_fence(dq_part);
        stage_dq(seq.seq_q - m0);
        wgmma_wait<0>();
      } else {
        wgmma_fence();  // the dS^T fragments were written by ordinary instructions
        mma_rs_frags<BM / 16, D>(dk_acc, ds, wgmma_desc_sw128(sq, BM * 128, 1024));
        wgmma_commit();
        wgmma_wait<0>();
      }
      wgmma_reg_fence(dv_acc);
      wgmma_reg_fence(dk_acc);
      wgmma_reg_fence(p);
      wgmma_reg_fence(ds);
      mbar_arrive_if(empty + 8 * s, tid == 0);  // every wgmma that read this stage has completed
      ring.advance();
    }
    if constexpr (DQ_DEFER) {
      if (steps > 0) hand_dq();  // the last step's staged dQ (no step follows to carry it)
    }

    // ------------------------------------------------------------------ epilogue: dK * scale, dV -> global
    // Fragment element (j, h, e): key row key0 + 8h, head-dim column 8j + col_lane + e; two adjacent columns are one
    // 32-bit store (fp32 partials: one 8-byte store). Rows >= Skv (zero-filled keys) are not stored.
    const int partial_b = VARLEN ? 1 : (int)gridDim.z, partial_hkv = (int)gridDim.y / heads.splits;
    const long long partial_half = (long long)heads.splits * partial_b * partial_hkv * Skv * D;  // dK's, then dV's
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = key0 + 8 * h;
      if (key < seq.seq_k) {
        const long long row = seq.k_start + key;
        if (dkv_partial != nullptr) {
          float* dk_row = dkv_partial +
                          ((((long long)heads.split * partial_b + seq.map_b) * partial_hkv + hkv) * Skv + row) * D;
          store_row_pairs<D, true>(dk_row, dk_acc, h, col_lane, scale, head_dim);
          store_row_pairs<D, false>(dk_row + partial_half, dv_acc, h, col_lane, 1.0f, head_dim);
        } else {
          const long long dk_at = (long long)seq.map_b * dk_sb + (long long)hkv * dk_sh + row * dk_ss;
          const long long dv_at = (long long)seq.map_b * dv_sb + (long long)hkv * dv_sh + row * dv_ss;
          store_row_pairs<D, true>(dk + dk_at, dk_acc, h, col_lane, scale, head_dim);
          store_row_pairs<D, false>(dv + dv_at, dv_acc, h, col_lane, 1.0f, head_dim);
        }
      }
    }
  }
#endif
}

// ==================================================================================================================
// dQ: one CTA per BM-row query block of one (batch, query head); grid (ceil(Sq / BM), Hq, B), causal grids longest
// tiles first (as the forward).
namespace twq {

constexpr int D = TW_HDIM;
constexpr int BM = 64;  // query rows per CTA: the consumer warpgroup's M
constexpr int BN = 64;  // keys per step: the N of S / dP and the K of dQ += dS K
constexpr int STAGES = TW_STAGES;
constexpr bool CAUSAL = TW_CAUSAL != 0;
constexpr bool WINDOW = TW_WINDOW != 0;  // the band's lower edge
constexpr bool UPPER_OFFSET = TW_UPPER_OFFSET != 0;
constexpr bool SOFTCAP = TW_SOFTCAP != 0;
constexpr bool VARLEN = TW_VARLEN != 0;
constexpr bool HEAVY_FIRST = CAUSAL && !VARLEN;  // dense causal grids may run longest tiles first (cta_coords)
constexpr int THREADS = 256;
constexpr int QD_BYTES = BM * D * 2;  // the Q (or dO) block
constexpr int KV_BYTES = BN * D * 2;  // one K (or V) block
constexpr int Q_OFF = 0;
constexpr int DO_OFF = Q_OFF + QD_BYTES;
constexpr int K_OFF = DO_OFF + QD_BYTES;  // STAGES K blocks
constexpr int V_OFF = K_OFF + STAGES * KV_BYTES;
constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES;
constexpr int SMEM_BYTES = 1024 + BAR_OFF + (1 + 2 * STAGES) * 8;

static_assert(SMEM_BYTES <= TW_SMEM_OPTIN_BYTES, "shared memory over the sm_90 per-block limit");

}  // namespace twq

// tm_q / tm_do: maps over (D, Sq, Hq, B) with box (64, BM, 1, 1); tm_k / tm_v: over (D, Skv, Hkv, B) with box
// (64, BN, 1, 1); all 128B-swizzled. lse, delta: contiguous fp32 (B, Hq, Sq). dq: (B, Hq, Sq, D) with unit last
// stride, element strides (b, h, s). group = Hq / Hkv (query head h reads kv head h / group). dQ is scaled by `scale`.
// head_dim: the tensors' own head dim, as in tw_attn_bwd_dkdv_sm90 (columns past it are zero-filled and not stored);
// band_upper / band_lower: the forward's KeyBand, whose key blocks alone a query tile visits; softcap_pre /
// softcap_post as in tw_attn_bwd_dkdv_sm90; TW_VARLEN builds and cu_q / cu_k as there.
extern "C" __global__ void __launch_bounds__(twq::THREADS, 1)
    tw_attn_bwd_dq_sm90(const __grid_constant__ TwTensorMap tm_q, const __grid_constant__ TwTensorMap tm_k,
                        const __grid_constant__ TwTensorMap tm_v, const __grid_constant__ TwTensorMap tm_do,
                        const float* __restrict__ lse, const float* __restrict__ delta,
                        unsigned short* __restrict__ dq, long long dq_sb, long long dq_sh, long long dq_ss, int Sq,
                        int Skv, int Hq, int group, float scale_log2, float scale, int head_dim, int band_upper,
                        int band_lower, float softcap_pre, float softcap_post, const int* __restrict__ cu_q,
                        const int* __restrict__ cu_k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace twq;
  extern __shared__ unsigned char smem_raw[];
  const tw_u32 raw = smem_u32(smem_raw);
  const tw_u32 sbase = (raw + 1023) & ~1023u;  // 128B-swizzle atoms (8 rows x 128 B) need 1024-byte alignment
  const tw_u32 bar_q = sbase + BAR_OFF;
  const tw_u32 full = bar_q + 8;
  const tw_u32 empty = full + 8 * STAGES;

  const int wg = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;
  const CtaCoords cta = cta_coords(HEAVY_FIRST, Skv);
  const int hq = cta.y;
  const int b = cta.z;
  const int hkv = hq / group;
  const SequenceRows seq = sequence_rows<VARLEN, UPPER_OFFSET>(cu_q, cu_k, b, Sq, Skv, band_upper, band_lower);
  const KeyBand band = seq.band;
  const QueryTile tile = query_tile<BM, BN, CAUSAL, WINDOW>(seq.seq_k, band, cta.rank);  // longest causal tiles first
  const int m0 = tile.m0;
  const int kb0 = tile.kb0;
  const int nblk = tile.nblk;
  if (VARLEN && m0 >= seq.seq_q) return;  // past this sequence's rows (uniform over the CTA, before any barrier)

  if (threadIdx.x == 0) {
    mbar_init(bar_q, 1);  // one arrive.expect_tx + the Q and dO bytes
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);   // producer's arrive.expect_tx + the K and V bytes
      mbar_init(empty + 8 * s, 1);  // the consumer warpgroup's one arrive once its wgmmas read the stage
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ------------------------------------------------------------------ producer
    if (tid == 0) {
      tma_prefetch_desc(&tm_k);
      tma_prefetch_desc(&tm_v);
      mbar_arrive_expect_tx(bar_q, 2 * QD_BYTES);
#pragma unroll
      for (int j = 0; j < D / 64; ++j) {
        tma_load_4d(sbase + Q_OFF + j * BM * 128, &tm_q, bar_q, 64 * j, seq.q_start + m0, hq, seq.map_b);
        tma_load_4d(sbase + DO_OFF + j * BM * 128, &tm_do, bar_q, 64 * j, seq.q_start + m0, hq, seq.map_b);
      }
      StageRing<STAGES> ring;  // ptx/attention_tile.cuh
      for (int kb = 0; kb < nblk; ++kb) {
        const int s = ring.stage;
        const tw_u32 phase = ring.phase;
        mbar_wait(empty + 8 * s, phase ^ 1);  // the first pass over the ring waits on fresh barriers' parity 1
        mbar_arrive_expect_tx(full + 8 * s, 2 * KV_BYTES);
#pragma unroll
        for (int j = 0; j < D / 64; ++j) {
          const int k0 = seq.k_start + (kb0 + kb) * BN;
          tma_load_4d(sbase + K_OFF + s * KV_BYTES + j * BN * 128, &tm_k, full + 8 * s, 64 * j, k0, hkv, seq.map_b);
          tma_load_4d(sbase + V_OFF + s * KV_BYTES + j * BN * 128, &tm_v, full + 8 * s, 64 * j, k0, hkv, seq.map_b);
        }
        ring.advance();
      }
    }
  } else {
    // ------------------------------------------------------------------ consumer
    const int warp = tid / 32;
    const int lane = tid % 32;
    // This thread's two query rows of every accumulator fragment, and its key columns 8j + col_lane + {0, 1}.
    const int row0 = m0 + warp * 16 + (lane >> 2);
    const int col_lane = 2 * (lane & 3);
    // Its rows' statistics: LSE in base 2 (+inf for a row without any visible key and for rows >= Sq: P = 0) and delta.
    float m_row[2], d_row[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      const long long at = (VARLEN ? (long long)hq * Sq + seq.q_start : ((long long)b * Hq + hq) * Sq) + row;
      const float l = row < seq.seq_q ? lse[at] : TW_NEG_INF;
      m_row[h] = l == TW_NEG_INF ? -TW_NEG_INF : l * 1.4426950408889634f;
      d_row[h] = row < seq.seq_q ? delta[at] : 0.0f;
    }
    float dq_acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dq_acc[i] = 0.0f;
    float s_acc[BN / 2];   // S, then P in place
    float dp_acc[BN / 2];  // dP, then dS in place
    tw_u32 ds[BN / 4];     // dS as 16-bit pairs: ds[2j + h] = row h, key columns 8j + col_lane + {0, 1}

    mbar_wait(bar_q, 0);  // single use per CTA: phase 0
    StageRing<STAGES> ring;  // ptx/attention_tile.cuh
    for (int kb = 0; kb < nblk; ++kb) {
      const int s = ring.stage;
      const tw_u32 phase = ring.phase;
      const int k0 = (kb0 + kb) * BN;
      const tw_u32 sk = sbase + K_OFF + s * KV_BYTES;
      const tw_u32 sv = sbase + V_OFF + s * KV_BYTES;
      mbar_wait(full + 8 * s, phase);
      if constexpr (VARLEN) {
        // the last key block's rows past the sequence are the next sequence's K / V: zeros instead (their P is 0,
        // but dP = dO V^T and dQ += dS K would still multiply them)
        if (k0 + BN > seq.seq_k) {
          zero_tile_rows<D>(sk, BN, seq.seq_k - k0, tid, 128);
          zero_tile_rows<D>(sv, BN, seq.seq_k - k0, tid, 128);
          fence_proxy_async_smem();
          named_barrier_sync(1, 128);  // the consumer warpgroup's 128 threads
        }
      }
      // S = Q K^T and dP = dO V^T: D/16 k-steps each over the head dim, one commit group for both. Each operand's
      // descriptor is built once a block and each wgmma's is that one advanced by its byte offset
      // (ptx/wgmma_typed.cuh), from a copy of sbase made opaque each block: otherwise the compiler hoists Q's and
      // dO's 2 x D/16 loop-invariant descriptors ahead of the loop, into ordinary registers, each moved with R2UR
      // before its HGMMA; formed here they are one uniform add each (ptx/common.cuh).
      const tw_u32 sb = opaque_u32(sbase);
      wgmma_fence();  // the accumulators were written by ordinary instructions since the last batch
      mma_ss_head_dim<BN, D>(s_acc, wgmma_desc_sw128(sb + Q_OFF, 16, 1024), BM * 128,
                             wgmma_desc_sw128(sb + K_OFF + s * KV_BYTES, 16, 1024), BN * 128);
      mma_ss_head_dim<BN, D>(dp_acc, wgmma_desc_sw128(sb + DO_OFF, 16, 1024), BM * 128,
                             wgmma_desc_sw128(sb + V_OFF + s * KV_BYTES, 16, 1024), BN * 128);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_reg_fence(s_acc);
      wgmma_reg_fence(dp_acc);

      // P and dS, elementwise; masks only where the block reaches past the Skv tail or straddles an edge of the band
      // for this warp's 16 rows.
      const int warp_row = m0 + warp * 16;
      const bool need_mask = (k0 + BN > seq.seq_k) || (CAUSAL && k0 + BN - 1 > warp_row + band.upper) ||
                             (WINDOW && k0 < warp_row + 15 + band.lower);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int r = 4 * j + 2 * h + e;
            const int col = k0 + 8 * j + col_lane + e;
            float pv;
            if constexpr (SOFTCAP) {
              const float t = tanh_approx(s_acc[r] * softcap_pre);
              pv = ex2_approx(fmaf(t, softcap_post, -m_row[h])) * fmaf(-t, t, 1.0f);  // P (1 - t^2): dS's factor
            } else {
              pv = ex2_approx(fmaf(s_acc[r], scale_log2, -m_row[h]));
            }
            if (need_mask && masked_out<CAUSAL, WINDOW>(row0 + 8 * h, col, seq.seq_k, band)) pv = 0.0f;
            dp_acc[r] = pv * (dp_acc[r] - d_row[h]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) ds[2 * j + h] = pack2(dp_acc[4 * j + 2 * h], dp_acc[4 * j + 2 * h + 1]);
      }
      // dQ += dS K: BN/16 k-steps over the keys; k-step kk takes key columns 16kk..16kk+15, i.e. fragments
      // {ds[4kk], ..., ds[4kk+3]}. K descriptor (MN-major): 16 key rows (16 x 128 B) per k-step, LBO = bytes between
      // 64-column chunks of d (one box: BN rows x 128 B), SBO = 8 rows x 128 B.
      wgmma_fence();  // the dS fragments were written by ordinary instructions
      mma_rs_frags<BN / 16, D>(dq_acc, ds, wgmma_desc_sw128(sb + K_OFF + s * KV_BYTES, BN * 128, 1024));
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_reg_fence(dq_acc);
      wgmma_reg_fence(ds);
      mbar_arrive_if(empty + 8 * s, tid == 0);  // every wgmma that read this stage has completed
      ring.advance();
    }

    // ------------------------------------------------------------------ epilogue: dQ * scale -> global
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row < seq.seq_q) {
        const long long dq_at =
            (long long)seq.map_b * dq_sb + (long long)hq * dq_sh + (long long)(seq.q_start + row) * dq_ss;
        store_row_pairs<D, true>(dq + dq_at, dq_acc, h, col_lane, scale, head_dim);
      }
    }
  }
#endif
}
