// Pieces the attention kernels share (attention_sm90.cu, attention_bwd_sm90.cu): the band, a CTA's sequence rows
// (dense or packed), the order in which CTAs take their tiles, which query tile a CTA owns, the stage ring's index /
// parity, zeroing a tile's rows, and the paired 16-bit stores of an accumulator's rows.
#pragma once
#include "common.cuh"
#include "wgmma_typed.cuh"

// The band of keys a query row sees (the mask of causal, bottom-right causal and sliding-window attention): key j is
// visible to row i iff j <= i + upper (in builds with the upper edge, CAUSAL) and i + lower <= j (in builds with the
// lower edge, WINDOW: the dense builds keep the code they were measured with). upper = 0 is top-left causal,
// Skv - Sq bottom-right, plus a window's right side; lower is a window's left edge. The host clamps both into
// [-(Sq + 1), Skv + 1], so no sum of a row or key index and an offset overflows; lower = -(Sq + 1) (no left edge)
// never masks a key.
//
// The compile-time switches of the band and the soft cap, shared by every attention kernel (-D from the host; each is
// set only for the calls that need it, so the builds without it keep their code and cache keys):
//   TW_WINDOW        the lower edge is compiled in;
//   TW_UPPER_OFFSET  the upper edge sits at a runtime offset (bottom-right causal, a window's right side); without it
//                    the edge is top-left causal's constant 0;
//   TW_SOFTCAP       scores are cap * tanh(scale * s / cap) (forward), with the cap's derivative in the backward;
//   TW_VARLEN        packed variable-length batches (flash-attn's varlen layout; SequenceRows below).
#ifndef TW_WINDOW
#define TW_WINDOW 0
#endif
#ifndef TW_UPPER_OFFSET
#define TW_UPPER_OFFSET 0
#endif
#ifndef TW_SOFTCAP
#define TW_SOFTCAP 0
#endif
#ifndef TW_VARLEN
#define TW_VARLEN 0
#endif
struct KeyBand {
  int upper;
  int lower;
};

// The rows of one sequence (TW_VARLEN) or batch element: where its rows start in the packed tensors, its lengths, the
// batch coordinate of the maps, and its band (the host's offsets, relative to the sequence's bottom-right corner
// when packed, clamped as the host clamps a dense band). Dense builds: the kernel arguments as they are.
struct SequenceRows {
  int q_start, k_start, seq_q, seq_k, map_b;
  KeyBand band;
};

template <bool VARLEN, bool UPPER_OFFSET>
TW_DEVICE SequenceRows sequence_rows(const int* cu_q, const int* cu_k, int b, int Sq, int Skv, int band_upper,
                                     int band_lower) {
  if constexpr (VARLEN) {
    const int q_start = cu_q[b], k_start = cu_k[b];
    const int seq_q = cu_q[b + 1] - q_start, seq_k = cu_k[b + 1] - k_start;
    const int shift = seq_k - seq_q;
    const KeyBand band{UPPER_OFFSET ? min(max(shift + band_upper, -(seq_q + 1)), seq_k + 1) : 0,
                       min(max(shift + band_lower, -(seq_q + 1)), seq_k + 1)};
    return {q_start, k_start, seq_q, seq_k, 0, band};
  } else {
    return {0, 0, Sq, Skv, b, KeyBand{UPPER_OFFSET ? band_upper : 0, band_lower}};
  }
}

// Zero rows [first, rows) of a 128B-swizzled tile of `rows` rows x D columns at smem `tile` (DC chunks of rows x 128
// bytes), spread over `threads` threads from index t: whole 128-byte rows, so the swizzle (16-byte units permuted
// within a row) does not matter. The caller fences (generic -> async proxy) and synchronises before a wgmma reads.
template <int D>
TW_DEVICE void zero_tile_rows(tw_u32 tile, int rows, int first, int t, int threads) {
  constexpr int DC = D / 64;
  const int units = (rows - first) * DC * 8;  // 16-byte units: 8 per 128-byte row of each chunk
  for (int u = t; u < units; u += threads) {
    const int row = first + u / (DC * 8), chunk = (u / 8) % DC;
    st_shared_zero16(tile + chunk * rows * 128 + row * 128 + (u % 8) * 16);
  }
}

// Whether key col is outside row's band (or past the Skv tail).
template <bool CAUSAL, bool WINDOW>
TW_DEVICE bool masked_out(int row, int col, int Skv, KeyBand band) {
  return col >= Skv || (CAUSAL && col > row + band.upper) || (WINDOW && col < row + band.lower);
}

// A CTA's tile and its (y, z) grid coordinates (head, batch) in dispatch order. The hardware starts a grid's CTAs in
// the linear order of (x, y, z), x fastest, and x indexes the tiles of one (head, batch). In a causal grid the tiles'
// work differs by up to the whole sequence (a query tile sees the keys up to its rows; a key block is seen by the
// queries from its rows on), so x-fastest order is a sawtooth over the heads: the last heads' longest tiles start in
// the last wave and set the kernel's tail (a list-scheduling model of 132 SMs: 1.07x the ideal for the forward at
// 8 x 16 heads x 2k, 1.29x for the backward's key blocks at 4 x 8 KV heads x 2k). Heavy-first order makes x the
// slowest coordinate of the dispatch order instead - every head's tile of rank 0 first, then rank 1, ... - so the
// longest tiles start first and the last wave holds the shortest ones (longest processing time first: 1.00-1.03x the
// ideal in the same model). It also spreads the CTAs that run at once over every head, whose K / V then compete for
// L2 where x-fastest order keeps about two heads' worth hot. Measured (H200, bf16, causal, same run against x-fastest
// order): Skv 2k-4k forward 1.01-1.14x, forward + backward 1.02-1.10x; Skv 8k and 16k 0.95-0.96x (4 MB of K and V -
// Q and dO in the backward's key-block pass - a head at head dim 128, 16-32 heads against a 50 MB L2). So a dense
// causal build (`dense_causal`) takes heavy-first order where the rows it streams per head (`streamed_rows`: Skv for
// the forward and dQ kernels, Sq for the key-block pass; the measured rows had Sq = Skv) number at most
// HEAVY_FIRST_MAX_KEYS; packed batches keep x fastest (their z is a sequence whose tiles past its length return at
// once). `rank` is the tile's place in dispatch order (0 first); the caller maps it to its longest-first tile. The
// coordinates are read with volatile asm so each warp role recomputes them after its setmaxnreg (a value carried
// across the register reallocation stays live there).
constexpr int HEAVY_FIRST_MAX_KEYS = 4096;

struct CtaCoords {
  int rank, y, z;
};

// Heavy-first order: dispatch position `linear` -> (rank, y, z), every one of the `heads` (y, z) pairs' tile of rank 0
// first, then rank 1, ...
TW_DEVICE CtaCoords heavy_first_coords(unsigned linear, unsigned ny, unsigned heads) {
  const unsigned rank = linear / heads, rest = linear - rank * heads;
  return {(int)rank, (int)(rest % ny), (int)(rest / ny)};
}

TW_DEVICE CtaCoords cta_coords(bool dense_causal, int streamed_rows) {
  unsigned x, y, z;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(z));
  if (!dense_causal || streamed_rows > HEAVY_FIRST_MAX_KEYS) return {(int)x, (int)y, (int)z};
  unsigned nx, ny, nz;
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(nx));
  asm volatile("mov.u32 %0, %%nctaid.y;" : "=r"(ny));
  asm volatile("mov.u32 %0, %%nctaid.z;" : "=r"(nz));
  // 32-bit dispatch positions: a grid of 2^32 CTAs or more (no real problem) keeps x-fastest order
  if ((unsigned long long)nx * ny * nz > 0xffffffffull) return {(int)x, (int)y, (int)z};
  const unsigned heads = ny * nz;                 // (y, z) pairs: the CTAs of one rank
  const unsigned linear = x + nx * (y + ny * z);  // dispatch position
  return heavy_first_coords(linear, ny, heads);
}

// The coordinates of the tile at linear position `linear` (0 first) of an nx x ny x nz grid of tiles, in the order
// cta_coords gives the CTA at that dispatch position of a launched grid: for a persistent kernel, whose CTAs walk the
// linear positions themselves (blockIdx.x, + gridDim.x, ...) rather than being dispatched one per tile. The caller
// keeps nx * ny * nz below 2^30 (the host refuses larger grids for the persistent builds).
TW_DEVICE CtaCoords tile_coords(bool dense_causal, int streamed_rows, unsigned linear, unsigned nx, unsigned ny,
                                unsigned nz) {
  if (dense_causal && streamed_rows <= HEAVY_FIRST_MAX_KEYS) return heavy_first_coords(linear, ny, ny * nz);
  const unsigned yz = linear / nx;  // x fastest, as the hardware dispatches a grid
  return {(int)(linear - yz * nx), (int)(yz % ny), (int)(yz / ny)};
}

// The BM-row query tile of a CTA that walks key blocks (the forward, the backward's dQ): its first row, its first
// BN-key block and how many blocks it visits - those holding a key that some row of the tile sees, so blocks wholly
// outside the band cost nothing. Causal grids run the longest tiles (last rows) first, so the short ones fill the
// tail of the wave: `rank` is the CTA's place in dispatch order (cta_coords). nblk may be 0 (every row of the tile
// sees no key: bottom-right causal with Sq > Skv, a window past the keys); every role of the CTA iterates exactly
// nblk.
struct QueryTile {
  int m0;
  int kb0;
  int nblk;
};

// `tiles`: the query tiles of a sequence (a persistent kernel's own count; one CTA per tile: gridDim.x, the overload
// below).
template <int BM, int BN, bool CAUSAL, bool WINDOW>
TW_DEVICE QueryTile query_tile(int Skv, KeyBand band, int rank, int tiles) {
  const int m_tile = CAUSAL ? tiles - 1 - rank : rank;
  const int m0 = m_tile * BM;
  const int kv_begin = WINDOW ? max(0, m0 + band.lower) : 0;            // the tile's first row's lowest key
  const int kv_end = CAUSAL ? min(Skv, m0 + BM + band.upper) : Skv;     // one past its last row's highest key
  const int kb0 = kv_begin / BN;
  return {m0, kb0, kv_end > kv_begin ? (kv_end + BN - 1) / BN - kb0 : 0};
}

template <int BM, int BN, bool CAUSAL, bool WINDOW>
TW_DEVICE QueryTile query_tile(int Skv, KeyBand band, int rank) {
  return query_tile<BM, BN, CAUSAL, WINDOW>(Skv, band, rank, (int)gridDim.x);
}

// Position in a STAGES-deep ring of full / empty mbarrier pairs: the stage, and the parity its full barrier completes
// with on this pass (the producer waits on the empty barrier with the opposite parity, which fresh barriers satisfy).
template <int STAGES>
struct StageRing {
  int stage = 0;
  tw_u32 phase = 0;
  TW_DEVICE void advance() {
    if (++stage == STAGES) {
      stage = 0;
      phase ^= 1;
    }
  }
};

// One column pair of a stored row: two 16-bit values as one 32-bit store, or two fp32 partial sums (another pass adds
// them up) as one 8-byte store.
TW_DEVICE void store_pair(unsigned short* at, float lo, float hi) { *reinterpret_cast<tw_u32*>(at) = pack2(lo, hi); }
TW_DEVICE void store_pair(float* at, float lo, float hi) { *reinterpret_cast<float2*>(at) = make_float2(lo, hi); }

// Row h (0: lane/4, 1: lane/4 + 8 of the warp's 16-row slice) of an m64nN fp32 accumulator (times `scale` when
// SCALED) stored in pairs at row_ptr (16-bit or fp32 elements: store_pair): fragment element (j, h, e) is column
// 8j + col_lane + e, two adjacent columns one store (row_ptr aligned to a pair). Only columns < cols are stored: a
// head dim padded up to the build's N (a multiple of 8, so a pair is wholly in or out) has no memory past its last
// column.
template <int N, bool SCALED, typename T>
TW_DEVICE void store_row_pairs(T* row_ptr, const float (&acc)[N / 2], int h, int col_lane, float scale, int cols) {
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const float lo = acc[4 * j + 2 * h], hi = acc[4 * j + 2 * h + 1];
    if (8 * j + col_lane < cols)
      store_pair(row_ptr + 8 * j + col_lane, SCALED ? lo * scale : lo, SCALED ? hi * scale : hi);
  }
}
