// Pieces the attention kernels share (attention_sm90.cu, attention_bwd_sm90.cu): which query tile a CTA owns, the
// stage ring's index / parity, and the paired 16-bit stores of an accumulator's rows.
#pragma once
#include "common.cuh"
#include "wgmma_typed.cuh"

// The BM-row query tile of a CTA that walks key blocks (the forward, the backward's dQ), and how many BN-key blocks it
// visits. Causal grids run the longest tiles (last rows) first, so the short ones fill the tail of the wave; causal
// is top-left aligned (key j visible to row i iff j <= i), so the keys end at row m0 + BM - 1. nblk >= 1 when
// Skv >= 1 (the hosts reject Skv == 0); every role of the CTA iterates exactly nblk.
struct QueryTile {
  int m0;
  int nblk;
};

template <int BM, int BN, bool CAUSAL>
TW_DEVICE QueryTile query_tile(int Skv) {
  const int m_tile = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int m0 = m_tile * BM;
  const int kv_end = CAUSAL ? min(Skv, m0 + BM) : Skv;
  return {m0, (kv_end + BN - 1) / BN};
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

// Row h (0: lane/4, 1: lane/4 + 8 of the warp's 16-row slice) of an m64nN fp32 accumulator (times `scale` when
// SCALED) stored as 16-bit pairs at row_ptr: fragment element (j, h, e) is column 8j + col_lane + e, two adjacent
// columns one 32-bit store (row_ptr 4-byte aligned). Only columns < cols are stored: a head dim padded up to the
// build's N (a multiple of 8, so a pair is wholly in or out) has no memory past its last column.
template <int N, bool SCALED>
TW_DEVICE void store_row_pairs(unsigned short* row_ptr, const float (&acc)[N / 2], int h, int col_lane, float scale,
                               int cols) {
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const float lo = acc[4 * j + 2 * h], hi = acc[4 * j + 2 * h + 1];
    if (8 * j + col_lane < cols)
      *reinterpret_cast<tw_u32*>(row_ptr + 8 * j + col_lane) = SCALED ? pack2(lo * scale, hi * scale) : pack2(lo, hi);
  }
}
