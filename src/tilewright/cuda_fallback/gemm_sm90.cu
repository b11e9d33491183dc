// Persistent warp-specialized GEMM for Hopper (sm_90a): out = act(A @ B + bias) + residual, fp32 accumulation.
//
// CTA = 384 threads = 3 warpgroups.
//   WG0  producer: setmaxnreg.dec; one thread issues the TMA loads of every k-block into a STAGES-deep smem ring of
//        full/empty mbarriers (128B swizzle, BK = 64 = one swizzle span of 16-bit elements).
//   WG1, WG2 consumers: setmaxnreg.inc; wgmma from smem into fp32 registers, then the fused epilogue.
//     PINGPONG (TW_COOP=0): each consumer owns whole BM x BN tiles, alternating CTA iterations; an ordered pair of
//       named barriers lets only one consumer run its mainloop at a time, so one warpgroup's epilogue hides under
//       the other's MMAs.
//     COOPERATIVE (TW_COOP=1): both consumers share every tile, each taking BM/2 rows.
//   Epilogue: + bias, activation, + residual (row r read at (r / P, r % P) with arbitrary strides) in fp32, one
//   rounding, stmatrix into a 128B-swizzled smem tile, TMA store (which clips the M/N tails) - or, for an output
//   whose pitch or base is off the 128-byte grid, the consumer's own 16-byte stores from that tile (TW_STORE_DIRECT).
// Tails: TMA zero-fills out-of-bounds loads (M, N and K tails), TMA stores clip, bias/residual loads are masked, the
// direct stores are masked.
// Tile order: row-major, grouped (bands of `group` tile rows) or Hilbert/Morton inside group x group squares -
// the same mapping as triton_kernels/tile_order.py, evaluated identically by every role.
// Descriptors: before a tile's mainloop a consumer builds its A and B wgmma descriptors of stage 0, k step 0 once,
// and each wgmma's is that one advanced by its byte offset (stage, k step, m64 atom: wgmma_desc_advance, one 32-bit
// add to the low word; the high word stays a constant); the consumer's warpgroup index comes through a warp shuffle,
// so that ptxas knows it warp-uniform and keeps all of it in uniform registers. Why: built per wgmma from the row
// offset of the consumer (a per-thread value to ptxas), each descriptor was a mask, shift and OR in vector registers
// moved over with R2UR (the constant high word too), and the FP8 k-block's four QGMMAs were spread over 36 of its 140
// instructions; now 15 of 107 (SASS, nvcc 13.0, row-wise accurate build, no bias; 168 registers, 0 spills as before;
// ptxas now puts the ring counter's four uniform instructions, the next stage and the empty barrier's address, between
// the last QGMMA and the wgmma wait - no vector instruction; block scales in the stages: 144 -> 112, span 38 -> 21).
// The 16-bit builds gain alike (coop128x256s3: 147 -> 89 instructions for the two k-blocks ptxas unrolls).
//
// Compile-time variant (-D): TW_BM, TW_BN, TW_STAGES, TW_COOP, TW_A_MN (A stored M-major), TW_B_MN (B stored
// N-major, i.e. a row-major (K, N) matrix), TW_FP16 (fp16 instead of bf16); the epilogue is compile-time too:
// TW_ACT (activation code), TW_BIAS, TW_RES. A run-time activation switch, unrolled over 128 accumulators per
// thread, made the kernel ~300 KB of SASS and the epilogue instruction-fetch bound (measured: half the throughput
// of the 128x256 tiles at K = 4096). All PTX lives in ptx/*.cuh.
//
// TW_FP8=1 (e4m3) or 2 (e5m2) for A, TW_FP8_B likewise for B (default: A's format): the FP8 GEMM of scaled_mm,
// out = act(scale * (A @ B) + bias) + residual with the torch._scaled_mm scales, 16-bit output (TW_FP16 picks fp16).
//   * A 128-byte swizzle row holds BK = 128 fp8 elements, so a stage has the same bytes, boxes and descriptors as the
//     16-bit build and each of the k-block's four wgmmas (m64nNk32) starts 32 bytes further into the row. K-major A
//     and B only: PTX's FP8 wgmma has no transpose immediates (the layout torch._scaled_mm requires anyway).
//   * Hopper's FP8 tensor-core sums keep fewer mantissa bits than fp32 over a long K (the error torch's "fast
//     accumulation" accepts). TW_FP8_PROMOTE=1 (the accurate mode): each k-block's four wgmmas write a fresh fp32
//     partial tile, which is added into the tile's accumulator in ordinary FP32 adds once they retire - promotion
//     every 128 K elements (TW_FP8_PROMOTE=N: every N k-blocks, the tensor cores summing N x 128 between two
//     promotions). That needs the k-block's wgmmas retired (wait 0) before the adds, so one warpgroup's
//     tensor work stops for its promotion; the cooperative tiles keep the other consumer's wgmmas in flight
//     meanwhile, and the partial tile doubles the accumulator registers (128 x 128 tiles: 64 + 64 per thread).
//     Why not two partial tiles, adding k-block kb - 1's while kb's wgmmas run (wait 1, as the 16-bit mainloop):
//     built that way (the k-loop unrolled by two), ptxas serialized the wgmmas (C7514: non-wgmma instructions read
//     accumulator registers inside a wgmma pipeline stage - it does not tell the retired partial from the one in
//     flight) and spilled 568 B.
//     TW_FP8_PROMOTE=0 accumulates in the tensor cores across all of K (fast mode).
//   * The epilogue dequantizes the fp32 accumulator before bias / activation / residual (the torch._scaled_mm
//     order): TW_SCALE=1 per-tensor (scale_a[0] * scale_b[0]), 2 row-wise (scale_a[row] * scale_b[col], fp32
//     vectors of M and N). TW_SCALE=3, block scales (FP8 training's 1 x 128 activation / 128 x 128 weight recipe):
//     scale_a (M, K/128) and scale_b (K/128, N/128), fp32, scale_a column-major (stored (K/128, M): the launcher's
//     layout) and scale_b row-major; each k-block is one 128-wide scale block, so the promotion adds partial *
//     scale_a[row, kb] * scale_b[kb, n0 / 128] (128-column tiles: one B block each) and the epilogue applies nothing
//     more. Why column-major: a warp's promotion reads the scales of 8 consecutive rows (two per thread) of one
//     k-block - one 32-byte sector stored that way, 8 sectors row-major, where ncu (H200, 4096^3) counted 47% excess
//     sectors and L1TEX waits in 37% of the issue cycles, the build running 0.61-0.83x the row-wise one.
//     TW_FP8_SCALE_AHEAD=D (block scales, D = 1 or 2; 0, the default, loads each k-block's scales into registers
//     in that k-block): k-block kb's scales are copied (cp.async) into a shared-memory ring of D slots per consumer
//     during k-block kb - D, one copy group per k-block, and read from it at the top of kb after a wait that leaves
//     the D - 1 younger groups in flight; a tile's first D k-blocks are copied during the previous tile's epilogue.
//     Why copied: loaded in their own k-block, the scales' product is formed right before the k-block's wait (SASS:
//     two FMULs just above the WARPGROUP.DEPBAR, their operands the LDGs issued between the QGMMAs), so each
//     promotion waits out a global load's whole latency beyond its wgmmas - ncu's L1TEX stall, 1.6 of 5.1 cycles an
//     issue at 4096^3 (H200) once the loads were coalesced. Register loads issued earlier do not fix it: ptxas gives
//     every LDG of the loop one scoreboard and a wait on it covers all loads in flight, the newest included (SASS of
//     a 3-set register ring: one set's FMUL waits for the set issued at the top of its own k-block), so a register
//     load is at best one k-block ahead of its use - and a variant that multiplied the scales where it loaded them
//     one k-block ahead compiled to today's wait exactly. cp.async groups are waited for by count, oldest first.
//     Ring layout per consumer and slot: scale_a of its WM rows, warp w's 16 at [16 w, 16 w + 16) with rows l and
//     l + 8 side by side (row 16 w + l at 16 w + 2 (l % 8) + l / 8), so that a lane's two rows (lane / 4 and
//     lane / 4 + 8) are one 8-byte LDS; then the tile's scale_b once per warp (each warp reads only what its own
//     lanes copied: a warp barrier, no CTA one). A slot is refilled right after its k-block has read it, so D slots
//     suffice (D = 3 would overflow the 6-stage tile's shared memory). In SASS the wait is DEPBAR.LE SB0, D - 1 - the
//     counter the TMA store's bulk group of the consumer's tid 0 also counts, which can only make that warp's wait
//     stricter, never let it pass early (the copy groups complete in order): at most a wait for the previous tile's
//     store to read cbuf.
//     Why lean and at the k-block's top: both consumers' warps share the four schedulers, so whatever sits between a
//     k-block's last QGMMA and its wgmma wait takes issue slots from the other consumer's promotion and reissue - the
//     path that decides when the tensor cores get their next wgmmas. Read where the register build reads (before the
//     wait, one 4-byte LDS a row, the next copy under an `if` with its source and slot recomputed from kb), the k-block
//     was 180 instructions to the row-wise build's 140 (SASS, nvcc 13.0, no bias; both 4 QGMMA and 64 FFMA / FADD), 26
//     of them in that window, where the row-wise build has none (the copy group's DEPBAR, 3 LDS, a divergent branch
//     around the copy - BSSY / BSYNC -, the commit), and the two FMULs after the wait, the first FFMA waiting on them.
//     Now the next copy's source and slot are running values (a 64-bit add and an XOR a k-block), the copy one
//     predicated cp.async, and all of it sits at the k-block's top, before the full-barrier wait (ptxas moves the two
//     FMULs among the QGMMAs): 165 instructions at D = 2 (159 at D = 1), none between the last QGMMA and the wgmma
//     wait, only the 64 FFMAs after it (as the row-wise build's 64 FADDs). Measured (H200, CUDA-graph replays, the same
//     fp8 bits, bit-equal outputs): block / row-wise 0.906-0.964x on 8192^3, 8192 x 28672 x 4096, 4096^3 and 2048 x
//     7168 x 2048, where that first placement ran 0.809-0.921x; the lean path placed there (15 instructions left in the
//     window: ptxas branched around its copy) ran 0.847-0.957x: 0.847 against 0.906 at 8192 x 28672 x 4096,
//     within 0.007 elsewhere.
//     TW_FP8_SCALE_STAGE=1 (block scales; default 0): the producer side brings each k-block's scales into the pipeline
//     stage that holds its tiles, so that the consumer's scale work is the loads and the multiply. Why: the copied-
//     ahead k-block is still 165 instructions to the row-wise build's 140 (beside 64 FFMAs for 64 FADDs: the copy
//     group's DEPBAR, a warp barrier, 2 LDS, 2 FMULs, the predicated LDGSTS and its commit, the running source and
//     slot, a second warp barrier), and ran 0.906-0.964x the row-wise build. How: warp 1 of the producer warpgroup
//     (idle otherwise) walks the TMA thread's tiles and stages; after the stage's empty-barrier wait each lane
//     cp.asyncs 4 of the tile's BM scale_a rows of the k-block (zero past M, reading nothing: the register build's 0)
//     and lane 0 the tile's scale_b block into the stage's scale slot (BM + 4 floats, after the bias slices), then
//     arrives with cp.async.mbarrier.arrive.noinc on the stage's full barrier - an arrival made once that lane's
//     copies have landed, counted by the barrier (1 + 32 arrivals: the producer's arrive.expect_tx and
//     the 32 lanes'; the tx bytes stay the tiles'). A consumer reads its two rows (one LDS.64: rows l and l + 8 of a
//     16 side by side, the ring's layout) and scale_b (one LDS) after the full-barrier wait it already does (its
//     acquire covers the copies as it covers the TMA bytes) and forms the products of every block build, bit for bit.
//     Release: one thread's arrival after the wgmma wait orders the wgmmas' reads of the tiles, not the other
//     threads' loads of the scales, so every consumer thread arrives on the empty barrier (128 a consumer: one
//     unpredicated SYNCS.ARRIVE where tid 0 had a predicated one), and the copier refills a slot only after all of
//     them have read it. Why a copier warp rather than TMA: a tensor map of the column-major scale_a needs a 16-byte
//     row stride (M % 4 == 0, else a padded copy a call) and puts rows l and l + 8 in different 8-byte words (two LDS),
//     and scale_b's one float a stage is no 16-byte box without a padded copy; the copies here take any M and both
//     scales as the launcher already passes them. Stage count: the slots need STAGES x 528 bytes, and the 6-stage
//     128 x 128 tile has 1,424 of its 232,448 left (231,024 used), so at most 5 stages fit (200,880 bytes). The host
//     builds it with 4 (fp8_gemm_sm90.py, BLOCK_STAGE_VARIANT): measured, 4 ran faster than 5 on every shape tried
//     (H200, 0.7-5.6%), and the row-wise build alike at 4, 5 or 6 - the ring's depth past 4 buys nothing here. SASS
//     (nvcc 13.0, no bias): the k-block is 144 instructions (row-wise 140; beside 64 FFMAs for 64 FADDs: + the LDS.64,
//     the LDS, 2 FMULs, the slot's address (UIMADs), - the vote and predicate of tid 0's arrival), nothing between the
//     last QGMMA and the wgmma wait, no LDGSTS, DEPBAR or warp barrier; with a bias the window holds the bias slice's
//     copy branch, as in every build with a bias (28 instructions, the copied-ahead build 17, row-wise 16: the copy's
//     source is recomputed in the branch, taken once a tile; the products are pinned before the wgmmas - ptxas had
//     put the FMULs after that branch). 168 registers, 0 spills; the copier's loop is kept rolled (unrolled, it
//     spilled under the producer warpgroup's 40 registers).
//   * Tried and dropped (session 29): the two consumers taking turns to issue their k-blocks through a pair of named
//     barriers (consumer 0's k-block, then consumer 1's, ...), so that one promotes while the other's wgmmas run -
//     bit-equal, and 2.3-4.0% slower than the free-running cooperative mainloop with the descriptors above, row-wise
//     and block scales alike (H200, perf/LOG.md): with each k-block's QGMMAs issued back to back, the schedulers
//     interleave the consumers well enough, and the turns' barrier round trips cost more than they order.
//
// TW_NORM_A=1 (built through rmsnorm_gemm_sm90.cu, kernel tw_rmsnorm_gemm_sm90) turns this into the RMSNorm-fused
// GEMM y = act(rstd * ((x * g) @ B) + bias) + residual with the contract of triton_kernels/rmsnorm_gemm.py:
//   * A (= x, K-major only) goes smem -> registers (ldmatrix, swizzle-aware), each thread adds the fp32 squares of
//     its x elements to per-row sums, multiplies by g[k] in fp32 and rounds once to the input dtype; that fragment
//     is the register-A operand of wgmma (B stays in smem).
//   * The wgmma register-A fragment rows of a thread (lane/4 and lane/4+8 of its warp's 16-row slice) are its
//     accumulator rows, so the row sums need one quad reduction (shfl_xor 1, 2) after the mainloop and rstd =
//     1/sqrt(ss/K + eps) (IEEE div/sqrt, fp32) scales the accumulators in registers before the bias.
//   * Tiles of the first N column store rstd (fp32, (M,)) for the backward.
//   TW_NORM_DBUF=1 (default) double-buffers the A fragments (k-block kb writes one set while kb-1's wgmmas may still
//   read the other); 0 is the simpler fallback that waits for each k-block's wgmmas before the next fragment load.
//   TW_NORM_SS_DEBUG=1 (debug only, correct only for g == 1): the wgmmas read A from smem as the plain GEMM does
//   while the prologue still computes the row sums - a failure that disappears here is in the register-A fragments.
//
// TW_NORM_SUMSQ=1 (kernel tw_rstd_gemm_sm90) is the RMSNorm-linear with the norm moved out of the mainloop entirely:
//   y = act(rstd * (x @ (g * W)^T) + bias) + residual, where the host folds g into the weight once (B = g * W,
//   rounded once) and the row's fp32 sum of squares comes in as row_sumsq (M,) - from a read-only pass over x, or
//   from whatever wrote x (a residual epilogue). The mainloop is the plain GEMM's, untouched; the epilogue computes
//   rstd = 1/sqrt(ss/K + eps) per row (as the fused builds do) and scales the accumulator before the bias. Why: every
//   design that does norm work per k-block (register-A, transform warps, Triton's prologue) ran 1.19-1.37x a bare
//   GEMM; here the only extra cost is reading M floats in the epilogue.
//
// TW_NORM_XFORM=1 (with TW_NORM_A; the host's "-xf" variants) moves all per-element norm work off the consumers:
//   Why: the register-A build puts ldmatrix, the g multiply, the sum of squares and the packs in front of every
//   k-block's wgmmas on the consumers' critical path (ncu at 8192^3: tensor pipe 72.7% vs 94.3% for the plain GEMM,
//   issue slots only 35.7% busy - latency, not issue bound). The producer warpgroup has three idle warps (only one
//   thread issues TMA), so they become "transform warps" and the consumers run the plain GEMM's SS mainloop unchanged.
//   * Producer warpgroup: lane 0 of warp 0 issues TMA as before; warps 1-3 (96 threads, XF_THREADS) wait for each
//     stage's full barrier, read the x tile (BM x 64, 128B-swizzled) with 16-byte ld.shared, add fp32 x^2 to per-row
//     sums held in registers across the tile's k-blocks, write bf16/fp16(x * g) (fp32 product, one rounding) back in
//     place - same address, so the same swizzled layout the wgmma descriptor expects - then fence.proxy.async (the
//     generic-proxy stores must be visible to wgmma's async-proxy reads) and arrive on the stage's "transformed"
//     mbarrier (96 arrivals), which the consumers wait on instead of the full barrier.
//   * Thread t owns logical 16-byte chunk t % 8 (k0 + 8 (t % 8) .. +8) of rows t / 8 + 12 p (p < XF_PASSES): its
//     eight g values are one 16-byte load per k-block (g must be 16-byte aligned: host), and the eight lanes of a row
//     touch a permutation of that row's 128 bytes (chunk c ^ (r % 8)), so every ld/st.shared.v4 is conflict-free.
//   * End of a tile: the row sums are reduced over the 8 lanes of a row (shfl_xor 1, 2, 4); lane j of the octet
//     computes rstd = 1/sqrt_rn(ss/K + eps) of passes j, j + 8 (2 of its 11 rows), writes it to a double-buffered
//     smem array (buffer it % 2 of the CTA's tile sequence) guarded by rstd_full (96 arrivals) / rstd_empty (one
//     arrival per consumer warpgroup of the tile) mbarriers, and, in tiles of the first N column, to global. The
//     consumers wait rstd_full in the epilogue and scale the accumulators before the bias, as the register-A build.
//   * Tails: TMA zero-fills rows past M and columns past K, so they add 0 to the sums and stay 0 (g past K is 0).
//   * Budget (128 x 256 tile, 64-wide k-block): ~2048 tensor clocks per stage per CTA; the transform is 11 passes per
//     thread of (LDS.128, 8 FFMA, 8 FMUL, 4 cvt packs, STS.128, ~8 unpack ops) ~ 350 issue slots per warp, each of the
//     three warps on its own scheduler; smem traffic 32 KB per stage beside the wgmmas' ~80 KB.
//   * Registers: producer warpgroup 72 (TW_PRODUCER_REGS), consumers 216: 72 * 128 + 216 * 256 = 64512 = the CTA's
//     launch allocation (168 x 384), which is all setmaxnreg can redistribute (40/232 of the plain GEMM is the same
//     sum). The transform holds 11 row sums + 8 g values + up to 3 16-byte loads in flight + addresses; the plain
//     consumer path peaks at R187 (coop128x256 with the full epilogue, nvcc 13.0), the -xf consumers at R192
//     (pp128x128). Measured with ptxas -v (coop128x256s3-xf bf16): 40/232 spilled 172 B, 56/224 92 B, 64/224 84 B
//     (values live across setmaxnreg reloaded from the stack), 72/216 and 88/208 none, 96/208 8 B.
//     build-check fails any build that spills.
// TW_NORM_XFORM_RO=1 (with TW_NORM_XFORM; the host's "-ro" variants) is the folded RMSNorm-linear's in-kernel sum of
//   squares: the host folds g into B (B = g * W, as TW_NORM_SUMSQ), so the transform warps only read each x stage and
//   add its squares to the row sums - no g loads, no write-back, no proxy fence - and the rstd path is the -xf one.
//   Why: the folded forward's separate read-only pass costs 3-6% of the GEMM at K 2048-4096 (x read once more from
//   HBM); here the x tile is read from shared memory where the TMA already put it. With TW_NORM_XFORM_RO=1 the
//   consumers still wait on the stage's "transformed" barrier, so the readers' latency sits in front of every
//   k-block's wgmmas (measured 1.13-1.16x a bare GEMM, slower than the separate pass). TW_NORM_XFORM_RO=2 takes them
//   off that path: the consumers wait on the full barrier as the plain GEMM does, and the readers join the stage's
//   release instead - the empty barrier counts their 96 arrivals beside the consumers', so the producer refills a
//   stage only after both the wgmmas and the reads are done with it, and a reader can never be lapped by the ring.
//   Sums once a row block (row_counts non-null, RO=2 builds): the reads are the whole cost of the in-kernel sums
//   (a -noread debug build runs at the sums-given time: 1.03 vs 1.11x cuBLAS at 3000 x 5120 x 5120 on the 192 tile,
//   whose shared-memory port the wgmmas and the TMA already keep busy), and every column tile of a row block read the
//   same x rows. So the first column tile (pn == 0) of each row block runs first (the tile sequence starts with them,
//   then the rest in the launch's tile order), sums, stores its rows' rstd to rstd_out, and each of its 96 transform
//   threads adds 1 (release) to the row block's counter. Every later tile of the row block reads the counter once
//   (a tile ahead, at the end of the previous tile's stage loop): at XF_THREADS it fences (with the read, an acquire),
//   skips the reads (still arriving on each stage's empty barrier) and hands the published rstd to its consumers
//   through the usual smem slot; else - its row block's first tile is still running, in the first wave - it sums for
//   itself. Nobody waits for another CTA (no co-residency needed), and the outputs are bit-equal either way (one
//   reduction, in one order). The host zeroes the counters before each launch (a stale count would hand out a
//   previous launch's rstd).
#include "ptx/common.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/gemm_common.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/stmatrix.cuh"
#include "ptx/st_global.cuh"  // st_global_* (TW_STORE_DIRECT)
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"

#ifndef TW_NORM_A
#define TW_NORM_A 0
#endif
#include "ptx/mma_sync.cuh"  // ldmatrix_x4 (the RMSNorm prologue's x rows, the residual tile from cbuf)
#ifndef TW_NORM_SUMSQ
#define TW_NORM_SUMSQ 0
#endif
#ifndef TW_SUMSQ_OUT
#define TW_SUMSQ_OUT 0
#endif
#if TW_NORM_A || TW_SUMSQ_OUT
#include "ptx/math.cuh"      // quad_sum
#endif
#if TW_NORM_A
#define TW_KERNEL_NAME tw_rmsnorm_gemm_sm90
#elif defined(TW_FP8) && TW_FP8
#define TW_KERNEL_NAME tw_fp8_gemm_sm90
#elif TW_NORM_SUMSQ
#define TW_KERNEL_NAME tw_rstd_gemm_sm90
#elif TW_SUMSQ_OUT
#define TW_KERNEL_NAME tw_gemm_sumsq_sm90
#else
#define TW_KERNEL_NAME tw_gemm_sm90
#endif
#ifndef TW_NORM_DBUF
#define TW_NORM_DBUF 1
#endif
#ifndef TW_NORM_SS_DEBUG
#define TW_NORM_SS_DEBUG 0
#endif
#ifndef TW_NORM_XFORM
#define TW_NORM_XFORM 0
#endif
#ifndef TW_NORM_XFORM_RO
#define TW_NORM_XFORM_RO 0
#endif

#include "ptx/fp8_scale.cuh"  // TW_FP8 (default 0), TW_SCALE, TW_SCALE_PARAMS
#ifndef TW_FP8_B
#define TW_FP8_B TW_FP8
#endif
#ifndef TW_FP8_PROMOTE
#define TW_FP8_PROMOTE (TW_FP8 ? 1 : 0)  // k-blocks per promotion; 0: fast mode
#endif
#ifndef TW_FP8_SCALE_AHEAD
#define TW_FP8_SCALE_AHEAD 0  // block scales: k-blocks between a scale's copy and its use (header)
#endif
#ifndef TW_FP8_SCALE_STAGE
#define TW_FP8_SCALE_STAGE 0  // block scales: copied into each pipeline stage by a producer warp (header)
#endif

#ifndef TW_BM
#define TW_BM 128
#endif
#ifndef TW_BN
#define TW_BN 128
#endif
#ifndef TW_STAGES
#define TW_STAGES 4
#endif
// TW_RES_PATH (with TW_RES): 0 compiles both residual paths, chosen per launch by res_rows (the TMA tile or the
// element loads); 1 the TMA tile alone, 2 the element loads alone - what the host builds (gemm_sm90.prepare picks the
// path, then the build). Why: the epilogue is straight-line code unrolled over the accumulators, and the unused
// path more than doubled it (pp128x128s5 with a residual: 4,680 SASS instructions, 2,120 with the TMA path alone,
// 1,832 plain; bias + GELU + residual 7,528 vs 3,968) - and a long epilogue slows the mainloop beside it, whose warps
// share the SM's instruction fetch with it: measured (H200), the cooperative tile's bias + GELU + residual ran
// 1.089-1.364x cuBLAS's plain GEMM with one path against 1.138-1.682x with both, the pingpong tile's residual
// 0.980-1.106x against 1.012-1.116x (perf/results/h200/gemm/epilogue_code_size_ab_s39.txt).
#ifndef TW_RES_PATH
#define TW_RES_PATH 0
#endif
// TW_BIAS_PATH (with TW_BIAS), alike: 0 both bias paths, chosen per launch by the bias's alignment; 1 the smem slice
// alone (a 4-byte aligned bias: the launcher checks, the kernel traps otherwise), 2 the register loads alone. The
// register path's unswitched copies cost the bias builds 310-590 SASS instructions (coop128x256s3 with a bias 2,688
// vs 2,096; pp128x128s5 2,160 vs 1,848; nvcc 13.0).
#ifndef TW_BIAS_PATH
#define TW_BIAS_PATH 0
#endif
// TW_STORE_DIRECT=1 (plain GEMM builds): the staged tile goes to global memory by the consumer's own 16-byte
// stores (c_out, ldc) instead of the TMA store. For outputs whose row pitch (or base) is no multiple of 128 bytes:
// every 128-byte row of a TMA store box then straddles two L2 lines, each written in part - measured (H200), the
// 3000 x 5000 x 4096 GEMM (10,000-byte pitch) ran 1.088-1.102x cuBLAS's time, the same kernel storing into a view of
// a 5056- or 5120-wide buffer 1.050 / 1.052x (perf/results/h200/gemm/odd_pitch_probe_s36.txt). A warp's stores
// here cover 512 contiguous bytes of a row (up to the row's end), so only a run's two ends are partial lines.
#ifndef TW_STORE_DIRECT
#define TW_STORE_DIRECT 0
#endif
// TW_GLU=1: the gated-linear epilogue out = silu(gate) * up of a fused gate/up projection (SwiGLU), whose B holds
// 2N columns - gate in [0, N), up in [N, 2N) - for an (M, N) output. Each tile's B stage takes its BN/2 gate columns
// from [n0, n0 + BN/2) and the same BN/2 up columns from [N + n0, ...) (two TMA boxes a k-block, the bytes of one),
// so the accumulator's first half is the gate and its second the up of the same output columns - and a thread's
// fragment holds column c and c + BN/2 (the wgmma layout repeats every 8 columns), so the pairing is register-local.
// The tile stores BN/2 columns. Why fused: the unfused pair writes the (M, 2N) projection, then reads it back and
// writes (M, N) - 3x the output's bytes again (Llama B8 x S2048, N 5632: ~0.74 GB, ~0.13 ms of a 2.7 ms forward, the
// SwiGLU pass's own time). A gate tile past N reads up columns (in bounds: its outputs lie past N and the store
// clips them); an up tile past 2N reads TMA's zeros. Rstd (the norm builds) scales both halves, as the unfused
// GEMM's output would be scaled before the SwiGLU. Not with a bias, residual, activation code, FP8 or the sums out.
#ifndef TW_GLU
#define TW_GLU 0
#endif
#ifndef TW_COOP
#define TW_COOP 0
#endif
#ifndef TW_B_MN
#define TW_B_MN 1
#endif
#if TW_NORM_XFORM  // the producer warpgroup also runs the transform warps (see the budget in the header)
#ifndef TW_PRODUCER_REGS
#define TW_PRODUCER_REGS 72
#endif
#ifndef TW_CONSUMER_REGS
#define TW_CONSUMER_REGS 216
#endif
#endif
#ifndef TW_PRODUCER_REGS
#define TW_PRODUCER_REGS 40
#endif
#ifndef TW_CONSUMER_REGS
#define TW_CONSUMER_REGS 232
#endif

namespace tw {

constexpr int BM = TW_BM;
constexpr int BN = TW_BN;
constexpr bool FP8 = TW_FP8 != 0;
constexpr bool FP8_PROMOTE = FP8 && TW_FP8_PROMOTE != 0;
constexpr int SCALE = TW_SCALE;
constexpr int ELEM_BYTES = FP8 ? 1 : 2;
constexpr int BK = 128 / ELEM_BYTES;  // one 128-byte swizzle row: 64 16-bit or 128 fp8 elements
constexpr int K_STEPS = 4;            // wgmmas per k-block (k16 of 16-bit, k32 of fp8): each 32 bytes into the row
constexpr int STAGES = TW_STAGES;
constexpr bool COOP = TW_COOP != 0;
constexpr bool GLU = TW_GLU != 0;
constexpr int OBN = GLU ? BN / 2 : BN;  // output columns of a tile (header: TW_GLU)
constexpr int SCALE_AHEAD = TW_FP8_SCALE_AHEAD;
constexpr bool SCALE_STAGE = TW_FP8_SCALE_STAGE != 0;
constexpr bool A_MN = TW_A_MN != 0;
constexpr bool B_MN = TW_B_MN != 0;
constexpr int WM = COOP ? BM / 2 : BM;  // rows owned by one consumer warpgroup
constexpr int MA = WM / 64;             // m64 wgmma atoms per consumer
constexpr int A_STAGE = BM * BK * ELEM_BYTES;
constexpr int B_STAGE = BN * BK * ELEM_BYTES;
constexpr int STAGE_BYTES = A_STAGE + B_STAGE;
constexpr int C_WG = WM * BN * 2;  // one consumer's output staging tile
constexpr int BAR_OFFSET = STAGES * STAGE_BYTES + 2 * C_WG;
#if TW_NORM_XFORM
// after full/empty: per-stage "transformed" barriers, rstd_full[2], rstd_empty[2], then rstd[2][BM] (fp32)
constexpr int XF_BAR_OFFSET = BAR_OFFSET + 2 * STAGES * 8;
constexpr int RSTD_BAR_OFFSET = XF_BAR_OFFSET + STAGES * 8;
constexpr int RSTD_OFFSET = (RSTD_BAR_OFFSET + 4 * 8 + 15) & ~15;
constexpr int SMEM_BYTES = 1024 + RSTD_OFFSET + 2 * BM * 4;
constexpr int RES_BAR_OFFSET = 0;  // (no residual barriers: RES_TMA is off in the RMSNorm builds)
#else
// after full/empty: res_full[2], one per consumer (the residual tile's TMA load, RES_TMA), then bias[2][BN], one
// slice of the tile's bias per consumer (cp.async during the mainloop, BIAS_SMEM), then the block scales' ring
// (TW_FP8_SCALE_AHEAD): SCALE_AHEAD slots per consumer of its WM rows' scale_a and one scale_b per warp - or, in its
// place, the stages' block scales (TW_FP8_SCALE_STAGE): per stage the tile's BM scale_a and its scale_b, 16 B apart
constexpr int RES_BAR_OFFSET = BAR_OFFSET + 2 * STAGES * 8;
constexpr int BIAS_OFFSET = RES_BAR_OFFSET + 2 * 8;
constexpr int SCALE_RING_OFFSET = BIAS_OFFSET + 2 * BN * 2;
constexpr int SCALE_SLOT_BYTES = (WM + 4) * 4;
constexpr int SCALE_STAGE_BYTES = SCALE_STAGE ? BM * 4 + 16 : 0;
// + slack to align the base to 1024
constexpr int SMEM_BYTES = 1024 + SCALE_RING_OFFSET + 2 * SCALE_AHEAD * SCALE_SLOT_BYTES + STAGES * SCALE_STAGE_BYTES;
#endif

// Named barrier ids (0 is __syncthreads): consumer c may start its mainloop on ORDER_BAR + c; epilogue of c on
// EPI_BAR + c.
constexpr int ORDER_BAR = 1;
constexpr int EPI_BAR = 3;

static_assert(BM % 64 == 0 && WM % 64 == 0, "tile M must be a multiple of 64 per consumer");
static_assert(BN % 64 == 0 && BN <= 256, "tile N must be 64, 128, 192 or 256");
static_assert(MA * BN / 2 <= 128, "accumulator must fit in 128 fp32 registers per thread");
static_assert(BM <= 256, "TMA boxes hold at most 256 rows");
static_assert(SMEM_BYTES <= TW_SMEM_OPTIN_BYTES, "shared memory over the sm_90 per-block limit");
// setmaxnreg.inc only takes what setmaxnreg.dec released from the CTA's launch allocation (168 registers x 384
// threads under __launch_bounds__(384, 1)), not the whole 64K file: a split over it deadlocks the consumers' inc.
static_assert(TW_PRODUCER_REGS * 128 + TW_CONSUMER_REGS * 256 <= 168 * 384, "register split over the CTA's allocation");

constexpr bool NORM = TW_NORM_A != 0;
static_assert(!FP8 || (!A_MN && !B_MN && !NORM), "FP8 build: K-major A and B only, no RMSNorm prologue");
static_assert(FP8 ? (SCALE >= 1 && SCALE <= 3) : SCALE == 0, "TW_SCALE: 1 per-tensor / 2 row-wise / 3 block, FP8 only");
// block scales are applied at each promotion, one B block per tile: promotion every k-block (128 K = one scale
// block) and 128-column tiles (one scale_b block each)
static_assert(SCALE != 3 || (TW_FP8_PROMOTE == 1 && BN == 128), "TW_SCALE 3: promotion every k-block, BN = 128");
// (MA == 1 follows from the promoted 128-column tile; the ring holds 16 rows a warp. 3 slots would not fit the
// shared memory of the 6-stage 128 x 128 tile: the SMEM_BYTES assert.)
static_assert(SCALE_AHEAD == 0 || (SCALE == 3 && MA == 1 && SCALE_AHEAD <= 2), "TW_FP8_SCALE_AHEAD: block scales, 1-2");
// (one copier warp, 4 rows a lane; 6 stages of 128 x 128 do not fit beside the stages' scales: the SMEM_BYTES assert)
static_assert(!SCALE_STAGE || (SCALE == 3 && SCALE_AHEAD == 0 && MA == 1 && BM <= 128),
              "TW_FP8_SCALE_STAGE: block scales, not with TW_FP8_SCALE_AHEAD, BM <= 128");
// Arrivals that complete a stage's full barrier: the producer's arrive.expect_tx, and with the block scales in the
// stage the copier warp's 32 cp.async arrivals; and its empty barrier: one per consuming warpgroup - every consumer
// thread with the block scales in the stage, each releasing its own LDS of them (header)
constexpr int SCALE_COPY_ARRIVALS = SCALE_STAGE ? 32 : 0;
constexpr int CONSUMER_RELEASE_ARRIVALS = (COOP ? 2 : 1) * (SCALE_STAGE ? 128 : 1);
static_assert(!FP8 || (TW_FP8 >= 1 && TW_FP8 <= 2 && TW_FP8_B >= 1 && TW_FP8_B <= 2), "TW_FP8(_B): 1 e4m3, 2 e5m2");
static_assert(!FP8 || BN == 128 || BN == 256, "the FP8 wgmma wrappers are generated for N = 128 and 256");
// 192-column tiles (wave balancing, gemm_sm90.py): the SS m64n192k16 wrapper only (ptx/_gen_wgmma.py's
// SS_ONLY_SHAPES) - the RMSNorm prologue's register-A wgmma has no such width; its transform builds (TW_NORM_XFORM:
// x * g, or only the sums of squares, in shared memory) keep the SS mainloop and take it
static_assert(BN != 192 || !NORM || TW_NORM_XFORM, "192-column tiles: no RMSNorm prologue (no register-A m64n192 "
              "wrapper)");
// the promoted build holds a partial tile beside the accumulator: 2 * MA * BN / 2 fp32 registers
static_assert(!FP8_PROMOTE || MA * BN / 2 <= 64, "TW_FP8_PROMOTE: consumer tiles of 64 x 128 (accumulator + partial)");
static_assert(!NORM || !A_MN, "the RMSNorm prologue reads x rows with ldmatrix: A must be K-major");
static_assert(!TW_NORM_SUMSQ || (!FP8 && !NORM), "TW_NORM_SUMSQ: a 16-bit build without the norm prologue");
static_assert(!TW_SUMSQ_OUT || (!FP8 && !NORM && !TW_NORM_SUMSQ), "TW_SUMSQ_OUT: a plain 16-bit GEMM build");
static_assert(!TW_STORE_DIRECT || (!NORM && !TW_NORM_SUMSQ && !GLU),
              "TW_STORE_DIRECT: the plain GEMM's builds (its two arguments follow res_rows)");
constexpr bool NORM_XFORM = TW_NORM_XFORM != 0;
// The residual tile by TMA into the consumer's output staging buffer while its mainloop runs (when the launcher
// passes a map: res_rows > 0), then read back with ldmatrix in the accumulator layout, added, and overwritten in
// place by stmatrix: the epilogue waits for nothing global. Not in the RMSNorm builds (their two-pass forward takes
// the large sizes, and the -xf builds use the barrier slots after full/empty).
constexpr bool RES_TMA = TW_RES != 0 && !NORM && TW_RES_PATH != 2;
static_assert(TW_RES_PATH == 0 || (TW_RES && (TW_RES_PATH == 2 || RES_TMA)),
              "TW_RES_PATH: 1 (TMA tile) or 2 (element loads) with a residual; 1 not in the RMSNorm builds");
static_assert(TW_BIAS_PATH == 0 || (TW_BIAS && (TW_BIAS_PATH == 2 || !(TW_NORM_XFORM || TW_NORM_A))),
              "TW_BIAS_PATH: 1 (smem slice) or 2 (register loads) with a bias; 1 not in the RMSNorm builds");
static_assert(!NORM_XFORM || NORM, "TW_NORM_XFORM is a variant of the TW_NORM_A build");
// the gate and up halves are whole 64-column chunks of the output staging tile; the GLU is the only epilogue op
static_assert(!GLU || (BN % 128 == 0 && !FP8 && !TW_BIAS && !TW_RES && TW_ACT == 0 && !TW_SUMSQ_OUT),
              "TW_GLU: BN 128 or 256, 16-bit, no bias, residual, activation code or sums out");
constexpr bool XF_READ_ONLY = TW_NORM_XFORM_RO != 0;
// TW_NORM_XFORM_NOREAD=1 (debug, timing only: the host's "-noread" builds): the read-only transform warps keep their
// barrier protocol but read nothing (the sums stay 0, the output is wrong) - what the in-kernel sums cost the
// kernel apart from the -xf build's structure (its register split and warp roles)
#ifndef TW_NORM_XFORM_NOREAD
#define TW_NORM_XFORM_NOREAD 0
#endif
constexpr bool XF_NO_READ = TW_NORM_XFORM_NOREAD != 0;
static_assert(!XF_NO_READ || TW_NORM_XFORM_RO != 0, "TW_NORM_XFORM_NOREAD is a debug variant of the -ro builds");
// TW_NORM_XFORM_RO=2: the readers overlap the wgmmas (header)
constexpr bool XF_OVERLAP = TW_NORM_XFORM_RO == 2;
constexpr int XF_RELEASE_ARRIVALS = XF_OVERLAP ? 96 : 0;  // the reader threads' arrivals on a stage's empty barrier
static_assert(!XF_READ_ONLY || NORM_XFORM, "TW_NORM_XFORM_RO is a variant of the TW_NORM_XFORM build");

// rstd of a row from its fp32 sum of squares over K: IEEE division and square root, the Triton kernels'
// 1/sqrt_rn(ss/K + eps) bit for bit (every norm build: register-A, transform warps, given sums)
TW_DEVICE float rstd_of(float ss, int K, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fdiv_rn(ss, (float)K) + eps));
}

// One m64nNk32 FP8 wgmma of the compiled formats (K-major operands); a template so the other width's call is
// discarded.
template <int N>
TW_DEVICE void mma_fp8(float (&d)[N / 2], tw_u64 da, tw_u64 db, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TW_FP8_MMA(N, TA, TB) wgmma_m64n##N##k32_##TA##_##TB(d, da, db, scale_d)
#define TW_FP8_MMA_N(N)                                        \
  if constexpr (TW_FP8 == 1 && TW_FP8_B == 1) TW_FP8_MMA(N, e4m3, e4m3); \
  else if constexpr (TW_FP8 == 1) TW_FP8_MMA(N, e4m3, e5m2);            \
  else if constexpr (TW_FP8_B == 1) TW_FP8_MMA(N, e5m2, e4m3);          \
  else TW_FP8_MMA(N, e5m2, e5m2);
  if constexpr (N == 256) {
    TW_FP8_MMA_N(256)
  } else {
    static_assert(N == 128, "FP8 wgmma widths 128 and 256");
    TW_FP8_MMA_N(128)
  }
#undef TW_FP8_MMA_N
#undef TW_FP8_MMA
#endif
}

// One m64nBNk16 wgmma in the compiled dtype (k32 in the FP8 builds).
template <int TA, int TB>
TW_DEVICE void mma(float (&d)[BN / 2], tw_u64 da, tw_u64 db, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (FP8) {
    mma_fp8<BN>(d, da, db, scale_d);
  } else if constexpr (BN == 256) {
    if constexpr (TW_FP16) wgmma_m64n256k16_f16<TA, TB>(d, da, db, scale_d);
    else wgmma_m64n256k16_bf16<TA, TB>(d, da, db, scale_d);
  } else if constexpr (BN == 192) {
    if constexpr (TW_FP16) wgmma_m64n192k16_f16<TA, TB>(d, da, db, scale_d);
    else wgmma_m64n192k16_bf16<TA, TB>(d, da, db, scale_d);
  } else if constexpr (BN == 128) {
    if constexpr (TW_FP16) wgmma_m64n128k16_f16<TA, TB>(d, da, db, scale_d);
    else wgmma_m64n128k16_bf16<TA, TB>(d, da, db, scale_d);
  } else {
    if constexpr (TW_FP16) wgmma_m64n64k16_f16<TA, TB>(d, da, db, scale_d);
    else wgmma_m64n64k16_bf16<TA, TB>(d, da, db, scale_d);
  }
#endif
}

#if TW_NORM_A
// Register budget of a consumer (setmaxnreg TW_CONSUMER_REGS = 232; 240 would overflow the 64K file with the 40-reg
// producer): MA * BN / 2 accumulators (128 for the 64x256 and 128x128 consumer tiles) + the A fragments of one
// k-block, MA * (BK / 16) * 4 = 16 * MA registers (twice with double buffering) + 8 g registers + 2 * MA row sums +
// rstd, addresses, ring state. Highest register in the SASS (nvcc 13.0): R211 for coop128x256 double-buffered,
// R228 for pingpong 128x128 (MA = 2) single-buffered; MA = 2 double-buffered spilled 20 B, so NORM_DBUF is on only
// for MA = 1. build-check fails any build that spills.
constexpr int K16 = BK / 16;
// Double-buffered fragments only where they fit: with MA = 2 the second set spilled (measured with ptxas -v).
constexpr bool NORM_DBUF = TW_NORM_DBUF != 0 && MA == 1;

// Two 16-bit elements of one register of the build's type -> fp32 (exact).
TW_DEVICE void unpack2(tw_u32 u, float& lo, float& hi) {
  lo = pair_lo<(TW_FP16 != 0)>(u);
  hi = pair_hi<(TW_FP16 != 0)>(u);
}

// This thread's norm weights of k-block k0: pair h of k16 step j is g[k0 + 16 j + 8 h + 2 (lane % 4) + {0, 1}] (the
// columns of its A fragment). K is even (x's rows are 16-byte multiples, a TMA requirement) so a pair is either
// inside K or past it; past K the weight is 0 (x is zero-filled there by TMA anyway, this only keeps the load in
// bounds). g is 4-byte aligned (host check).
TW_DEVICE void load_g(const unsigned short* __restrict__ g, int k0, int K, int lane, tw_u32 (&gv)[K16][2]) {
#pragma unroll
  for (int j = 0; j < K16; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = k0 + 16 * j + 8 * h + 2 * (lane & 3);
      gv[j][h] = k < K ? __ldg(reinterpret_cast<const unsigned*>(g + k)) : 0u;
    }
  }
}

// The register-A fragments of one k-block for this warp's 16 rows of each of the consumer's MA m64 atoms, from the
// 128B-swizzled K-major A stage at `sa` (row r at r * 128 bytes, 16-byte chunk c stored at chunk c ^ (r % 8)).
// ldmatrix_x4 matrices: 0 = rows 0-7 / k 0-7, 1 = rows 8-15 / k 0-7, 2 = rows 0-7 / k 8-15, 3 = rows 8-15 / k 8-15,
// so lane l points at row l % 16, chunk 2 j + l / 16, and register i holds row lane/4 + 8 (i & 1), columns
// 2 (lane % 4) + 8 (i >> 1) + {0, 1}: the wgmma A fragment. Adds the fp32 squares of x to ss[ma][i & 1].
TW_DEVICE void norm_fragments(tw_u32 sa, int atom0, int warp, int lane, const tw_u32 (&gv)[K16][2],
                              float (&ss)[MA][2], tw_u32 (&fr)[K16][MA][4]) {
#pragma unroll
  for (int j = 0; j < K16; ++j) {
#pragma unroll
    for (int ma = 0; ma < MA; ++ma) {
      const int rloc = (atom0 + ma) * 64 + warp * 16 + (lane & 15);
      const int chunk = 2 * j + (lane >> 4);
      tw_u32 x[4];
      ldmatrix_x4(sa + rloc * 128 + ((chunk ^ (lane & 7)) << 4), x);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float lo, hi, glo, ghi;
        unpack2(x[i], lo, hi);
        unpack2(gv[j][i >> 1], glo, ghi);
        ss[ma][i & 1] = fmaf(lo, lo, fmaf(hi, hi, ss[ma][i & 1]));
        // x * g in fp32, one rounding to the input dtype
        fr[j][ma][i] = pack_pair<(TW_FP16 != 0)>(lo * glo, hi * ghi);
      }
    }
  }
}

// Keep the compiler from reusing fragment registers before the wgmma wait that retires their readers (ptxas tracks
// wgmma operands itself; this also pins the front end).
TW_DEVICE void frag_fence(tw_u32 (&fr)[K16][MA][4]) {
#pragma unroll
  for (int j = 0; j < K16; ++j)
#pragma unroll
    for (int ma = 0; ma < MA; ++ma) wgmma_reg_fence(fr[j][ma]);
}

// One m64nBNk16 wgmma with A from registers.
template <int TB>
TW_DEVICE void mma_rs(float (&d)[BN / 2], const tw_u32 (&a)[4], tw_u64 db, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (BN == 256) {
    if constexpr (TW_FP16) wgmma_m64n256k16_f16_rs<TB>(d, a, db, scale_d);
    else wgmma_m64n256k16_bf16_rs<TB>(d, a, db, scale_d);
  } else if constexpr (BN == 128) {
    if constexpr (TW_FP16) wgmma_m64n128k16_f16_rs<TB>(d, a, db, scale_d);
    else wgmma_m64n128k16_bf16_rs<TB>(d, a, db, scale_d);
  } else {
    if constexpr (TW_FP16) wgmma_m64n64k16_f16_rs<TB>(d, a, db, scale_d);
    else wgmma_m64n64k16_bf16_rs<TB>(d, a, db, scale_d);
  }
#endif
}

#if TW_NORM_XFORM
constexpr int XF_THREADS = 96;                           // warps 1-3 of the producer warpgroup
static_assert(!XF_OVERLAP || XF_RELEASE_ARRIVALS == XF_THREADS, "every reader thread arrives on the empty barrier");
constexpr int XF_ROWS = XF_THREADS / 8;                  // rows per pass: one thread per 16-byte chunk of a row
constexpr int XF_PASSES = (BM + XF_ROWS - 1) / XF_ROWS;  // row sums per thread (11 for BM = 128)

// g[k, k + 8) in fp32, 0 past K (where TMA zero-fills x). k % 8 == 0 and g is 16-byte aligned (host), so a chunk
// wholly inside K is one 16-byte load. K % 8 != 0 is possible (a single x row, or B N-major, has no 16-byte stride
// rule on K): the chunk straddling K then loads element by element.
TW_DEVICE void load_g8(const unsigned short* __restrict__ g, int k, int K, float (&gf)[8]) {
  uint4 u = make_uint4(0u, 0u, 0u, 0u);
  if (k + 8 <= K) {
    u = __ldg(reinterpret_cast<const uint4*>(g + k));
  } else if (k < K) {
    tw_u32 h[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) h[i] = k + i < K ? (tw_u32)__ldg(g + k + i) : 0u;
    u = make_uint4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16));
  }
  unpack2(u.x, gf[0], gf[1]);
  unpack2(u.y, gf[2], gf[3]);
  unpack2(u.z, gf[4], gf[5]);
  unpack2(u.w, gf[6], gf[7]);
}

// One stage of the transform warps: logical chunk `lc` of rows r0 + XF_ROWS p of the 128B-swizzled K-major x tile at
// `sa` (row r at r * 128 bytes, chunk c stored at chunk c ^ (r % 8)): ss[p] += fp32 x^2 of its 8 elements, and the
// chunk is overwritten in place with x * g (fp32 product, one rounding to the input dtype).
// Addresses: XF_ROWS = 12 = 4 (mod 8), so (r0 + 12 p) % 8 = (r0 % 8) ^ (4 (p % 2)) and the chunk of pass p sits at
// one of two bases (p even / odd) + 1536 p - constant offsets, which lets ptxas see that the passes do not alias and
// keep XF_GROUP loads in flight (with a per-pass XOR address it serialised load -> store -> load: SASS).
constexpr int XF_GROUP = 4;  // loads in flight per thread (4 x 4 registers under the producer's 64-register budget)
TW_DEVICE void xform_stage(unsigned char* sa, int base_even, int base_odd, int r0, const float (&gf)[8],
                           float (&ss)[XF_PASSES]) {
#pragma unroll
  for (int p0 = 0; p0 < XF_PASSES; p0 += XF_GROUP) {
    uint4 v[XF_GROUP];
#pragma unroll
    for (int j = 0; j < XF_GROUP; ++j) {
      const int p = p0 + j;
      if (p < XF_PASSES && (p + 1 < XF_PASSES || r0 + XF_ROWS * p < BM))
        v[j] = *reinterpret_cast<const uint4*>(sa + ((p & 1) ? base_odd : base_even) + XF_ROWS * 128 * p);
    }
#pragma unroll
    for (int j = 0; j < XF_GROUP; ++j) {
      const int p = p0 + j;
      if (p < XF_PASSES && (p + 1 < XF_PASSES || r0 + XF_ROWS * p < BM)) {
        tw_u32 w[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float lo, hi;
          unpack2(w[i], lo, hi);
          ss[p] = fmaf(hi, hi, fmaf(lo, lo, ss[p]));
          if constexpr (!XF_READ_ONLY) w[i] = pack_pair<(TW_FP16 != 0)>(lo * gf[2 * i], hi * gf[2 * i + 1]);
        }
        if constexpr (!XF_READ_ONLY)
          *reinterpret_cast<uint4*>(sa + ((p & 1) ? base_odd : base_even) + XF_ROWS * 128 * p) =
              make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  }
}
#endif  // TW_NORM_XFORM
#endif  // TW_NORM_A

}  // namespace tw

using namespace tw;

// A: K-major -> map over (K, M) with box (64, BM); M-major -> map over (M, K) with box (64, 64), BM/64 boxes.
// B: N-major -> map over (N, K) with box (64, 64), BN/64 boxes; K-major -> map over (K, N) with box (64, BN).
// C: map over (N, M) with box (64, WM), 128B swizzle, BN/64 boxes per consumer tile.
// bias: (N,) (read when TW_BIAS). res (read when TW_RES): element (r, n) at
// res[(r / res_period) * rs0 + (r % res_period) * rs1 + n * rs2], or null.
// pair_tiles: 1 -> a CTA takes tiles in adjacent pairs (both consumers of a pingpong CTA work on neighbours).
// tm_r, res_rows (RES_TMA builds): res_rows > 0 -> the residual is read through tm_r, a map over (N, res_rows) rows
// with the output's box and swizzle, at row (r % res_rows) - the whole output (res_rows = M) or a period that every
// consumer tile lies within (a pos_embed repeated over the batch); 0 -> element loads through res / rs* as above.
// TW_STORE_DIRECT: c_out, ldc - the output's address and row stride in elements (16-byte aligned base and pitch);
// tm_c is not read then.
// TW_NORM_A: norm_w (K,) the RMSNorm weight g (4-byte aligned), rstd_out (M,) fp32 or null, eps; row_counts (the
// -roov builds' sums once a row block, see TW_NORM_XFORM_RO): ceil(M / BM) u32 counters, zero at launch, or null
// (used with rstd_out only).
// TW_NORM_SUMSQ: row_sumsq (M,) fp32, each row's sum of x^2; rstd_out (M,) fp32 or null; eps.
// TW_SUMSQ_OUT: sumsq_part (ceil(N / BN), M) fp32, row-major: element (pn, r) = the sum over tile column pn's
// columns of out[r, n]^2, of the values as stored (rounded to 16 bits) - summed over pn by the host, in a fixed order.
// TW_FP8: scale_a, scale_b fp32 - one element each (TW_SCALE 1), (M,) and (N,) contiguous vectors (TW_SCALE 2), or
// the block scales (TW_SCALE 3): scale_a (M, ceil(K/128)) column-major (element (r, kb) at kb * M + r), scale_b
// (ceil(K/128), ceil(N/128)) row-major.
extern "C" __global__ void __launch_bounds__(384, 1)
    TW_KERNEL_NAME(const __grid_constant__ TwTensorMap tm_a, const __grid_constant__ TwTensorMap tm_b,
                 const __grid_constant__ TwTensorMap tm_c, const unsigned short* __restrict__ bias,
                 const unsigned short* __restrict__ res, long long rs0, long long rs1, long long rs2, int res_period,
                 int M, int N, int K, int act, int tile_order, int group, int pair_tiles,
                 const __grid_constant__ TwTensorMap tm_r, int res_rows
#if TW_STORE_DIRECT
                 , unsigned short* __restrict__ c_out, long long ldc
#endif
#if TW_NORM_A
                 , const unsigned short* __restrict__ norm_w, float* __restrict__ rstd_out, float eps,
                 unsigned* __restrict__ row_counts
#endif
#if TW_NORM_SUMSQ
                 , const float* __restrict__ row_sumsq, float* __restrict__ rstd_out, float eps
#endif
#if TW_SUMSQ_OUT
                 , float* __restrict__ sumsq_part
#endif
                 TW_SCALE_PARAMS) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const tw_u32 raw = smem_u32(smem_raw);
  const tw_u32 sbase = (raw + 1023) & ~1023u;  // 128B swizzle atoms need 1024-byte alignment
  const tw_u32 bar_full = sbase + BAR_OFFSET;
  const tw_u32 bar_empty = bar_full + STAGES * 8;
  // a build compiled for one epilogue path launched outside it (a TMA-path residual without a map, an smem-path
  // bias not 4-byte aligned) would read wrong memory: stop rather than compute
  if (TW_RES_PATH == 1 && res_rows <= 0) __trap();

  const int wg = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;
  // the epilogue's operands in 32-bit pairs where every pair it reads is 4-byte aligned (columns are even)
  const bool bias_vec = (reinterpret_cast<unsigned long long>(bias) & 3) == 0;
  const bool res_vec = rs2 == 1 && (reinterpret_cast<unsigned long long>(res) & 3) == 0 && ((rs0 | rs1) & 1) == 0;
  if (TW_BIAS_PATH == 1 && !bias_vec) __trap();
  const int num_m = (M + BM - 1) / BM;
  const int num_n = (N + OBN - 1) / OBN;
  const int num_tiles = num_m * num_n;
#if TW_SCALE == 3
  const int num_nb = (N + 127) / 128;  // scale_b's blocks per K row
#endif
  const int kt = (K + BK - 1) / BK;
  const int W = pair_tiles ? 2 : 1;
  // Every role walks the same sequence of tiles: iteration it of this CTA computes tile_of(it).
  auto tile_of = [&](int it) { return (it / W) * (W * (int)gridDim.x) + W * (int)blockIdx.x + (it % W); };
#if TW_NORM_XFORM_RO == 2
  // sums once a row block (TW_NORM_XFORM_RO): the first column of every row block first, then the rest in order
  const bool sums_once = row_counts != nullptr && rstd_out != nullptr && num_n > 1;
#else
  const bool sums_once = false;
#endif
  auto coords = [&](int t, int& pm, int& pn) {
    if (!sums_once) {
      tile_coords(t, num_m, num_n, tile_order, group, pm, pn);
    } else if (t < num_m) {
      pm = t;
      pn = 0;
    } else {
      tile_coords(t - num_m, num_m, num_n - 1, tile_order, group, pm, pn);
      ++pn;
    }
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      // one arrive.expect_tx by the producer + TMA bytes (+ the block-scale copier's arrivals)
      mbar_init(bar_full + 8 * s, 1 + SCALE_COPY_ARRIVALS);
      // one arrive per consuming warpgroup (or thread: block scales in the stage), and, overlapped read-only
      // transform, one per reader thread
      mbar_init(bar_empty + 8 * s, CONSUMER_RELEASE_ARRIVALS + XF_RELEASE_ARRIVALS);
    }
#if !TW_NORM_XFORM
    for (int c = 0; c < 2; ++c) mbar_init(sbase + RES_BAR_OFFSET + 8 * c, 1);  // consumer c's tid 0 + TMA bytes
#endif
#if TW_NORM_XFORM
    for (int s = 0; s < STAGES; ++s) mbar_init(sbase + XF_BAR_OFFSET + 8 * s, XF_THREADS);  // every transform thread
    for (int b = 0; b < 2; ++b) {
      mbar_init(sbase + RSTD_BAR_OFFSET + 8 * b, XF_THREADS);            // rstd_full: every transform thread
      mbar_init(sbase + RSTD_BAR_OFFSET + 16 + 8 * b, COOP ? 2 : 1);     // rstd_empty: the tile's consumers
    }
#endif
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------- producer ----------------
    setmaxnreg_dec<TW_PRODUCER_REGS>();
    if (tid == 0) {
      tma_prefetch_desc(&tm_a);
      tma_prefetch_desc(&tm_b);
      int s = 0;
      tw_u32 phase = 0;
      for (int it = 0;; ++it) {
        const int t = tile_of(it);
        if (t >= num_tiles) break;
        int pm, pn;
        coords(t, pm, pn);
        const int m0 = pm * BM, n0 = pn * OBN;
        for (int kb = 0; kb < kt; ++kb) {
          const tw_u32 full = bar_full + 8 * s;
          mbar_wait(bar_empty + 8 * s, phase ^ 1);  // first pass over the ring succeeds at once
          mbar_arrive_expect_tx(full, STAGE_BYTES);
          const tw_u32 sa = sbase + s * STAGE_BYTES;
          const tw_u32 sb = sa + A_STAGE;
          const int k0 = kb * BK;
          tma_load_stage<A_MN, B_MN, BM, BN, BK, GLU>(sa, sb, &tm_a, &tm_b, full, m0, n0, k0, N);
          if (++s == STAGES) {
            s = 0;
            phase ^= 1;
          }
        }
      }
    }
#if TW_FP8_SCALE_STAGE
    else if (tid >= 32 && tid < 64) {
      // ---------------- block-scale copier (warp 1): each k-block's scales into its stage (header) ----------------
      // Lane l copies 4 of the tile's scale_a rows - 16 (l / 4) + 2 (l % 4) + {0, 8, 1, 9}, the slot's floats 4 l to
      // 4 l + 3, so that rows r and r + 8 of every 16 sit side by side (a consumer lane's two rows: one LDS.64) -, zero
      // past M (reading nothing); lane 0 also the tile's scale_b block, at float BM. Then each lane's cp.async
      // arrival: the stage's full barrier completes once every lane's copies have landed, as the TMA bytes.
      const int lane = tid - 32;
      const int rbase = 16 * (lane >> 2) + 2 * (lane & 3);
      for (int it = 0;; ++it) {
        const int t = tile_of(it);
        if (t >= num_tiles) break;
        int pm, pn;
        coords(t, pm, pn);
        const int r0 = pm * BM + rbase;
        const float* col_a = scale_a;                    // k-block kb's scale_a column (M floats)
        const float* col_b = scale_b + pn * BN / 128;    // and its scale_b block
#pragma unroll 1  // (unrolled, the copies of the loop body spilled under the producer's 40 registers)
        for (int kb = 0; kb < kt; ++kb) {
          const int pos = it * kt + kb;  // ring position, as the producer and the consumers count it
          const int s = pos % STAGES;
          mbar_wait(bar_empty + 8 * s, ((pos / STAGES) & 1) ^ 1);  // the consumers have read its previous scales
          const tw_u32 slot = sbase + SCALE_RING_OFFSET + s * SCALE_STAGE_BYTES;
          if (BM == 128 || lane < BM / 4) {  // (a 64-row tile: lanes 0-15)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int r = r0 + (i >> 1) + 8 * (i & 1);
              cp_async_4_zfill(slot + 16 * lane + 4 * i, col_a + (r < M ? r : 0), r < M ? 4 : 0);
            }
          }
          cp_async_4_zfill_if(lane == 0, slot + 4 * BM, col_b, 4);
          cp_async_mbar_arrive_noinc(bar_full + 8 * s);
          col_a += M;
          col_b += num_nb;
        }
      }
    }
#endif
#if TW_NORM_XFORM
    else if (tid >= 32) {
      // ---------------- transform warps (1-3): x -> x * g in place, row sums of squares, rstd ----------------
      const int xt = tid - 32;
      const int lc = xt & 7;   // logical 16-byte chunk of every row this thread touches
      const int r0 = xt >> 3;  // first row; then every XF_ROWS-th
      unsigned char* const sptr = smem_raw + (sbase - raw);
      float* const rstd_s = reinterpret_cast<float*>(sptr + RSTD_OFFSET);
      const tw_u32 bar_xf = sbase + XF_BAR_OFFSET;
      const tw_u32 rstd_full = sbase + RSTD_BAR_OFFSET;
      const tw_u32 rstd_empty = rstd_full + 16;
      const int base_even = r0 * 128 + ((lc ^ (r0 & 7)) << 4);  // chunk lc of row r0 (swizzled)
      const int base_odd = r0 * 128 + ((lc ^ (r0 & 7) ^ 4) << 4);  // of row r0 + 12, less the 1536-byte row offset
      constexpr int NPER = (XF_PASSES + 7) / 8;  // rows whose rstd this lane computes / hands over (passes lc + 8 j)
      // sums once a row block (header): the counter of tile t's row block for a later tile of it (0 otherwise), read
      // a tile ahead - at the end of the previous tile's stage loop - so that its latency sits under the hand-over,
      // not in front of the tile's first stage release (measured level with reading it at the tile's start, session
      // 36: neither form gained on the 256-wide tile, hence the host takes this on the 192 one only)
      auto count_of = [&](int t) -> unsigned {
        if (!sums_once || t >= num_tiles) return 0u;
        int qm, qn;
        coords(t, qm, qn);
        return qn != 0 ? ld_relaxed_gpu(row_counts + qm) : 0u;
      };
      unsigned next_count = count_of(tile_of(0));
      for (int it = 0;; ++it) {
        const int tl = tile_of(it);
        if (tl >= num_tiles) break;
        int pm, pn;
        coords(tl, pm, pn);
        float rs[NPER];
        // a later tile of a row block whose first tile has published takes its rstd (the count and the fence: an
        // acquire); otherwise this tile reads and sums its stages itself
        const bool reads = next_count < XF_THREADS;
        if (!reads) {
          fence_acq_rel_gpu();
#pragma unroll
          for (int j = 0; j < NPER; ++j) {
            const int p = lc + 8 * j;
            const int row = pm * BM + r0 + XF_ROWS * p;
            rs[j] = (p < XF_PASSES && r0 + XF_ROWS * p < BM && row < M) ? ld_relaxed_gpu(rstd_out + row) : 0.0f;
          }
        }
        float ss[XF_PASSES];
#pragma unroll
        for (int p = 0; p < XF_PASSES; ++p) ss[p] = 0.0f;
        for (int kb = 0; kb < kt; ++kb) {
          const int pos = it * kt + kb;  // ring position, as the producer and the consumers count it
          const int s = pos % STAGES;
          float gf[8] = {};
          if constexpr (!XF_READ_ONLY)
            load_g8(norm_w, kb * BK + 8 * lc, K, gf);        // before the wait: its latency hides under it
          mbar_wait(bar_full + 8 * s, (pos / STAGES) & 1);  // TMA bytes of this stage landed
          if (!XF_NO_READ && reads) xform_stage(sptr + s * STAGE_BYTES, base_even, base_odd, r0, gf, ss);
          // our st.shared -> visible to the consumers' wgmma reads (async proxy); a read-only pass wrote nothing
          if constexpr (!XF_READ_ONLY) fence_proxy_async_smem();
          // release: the consumers wait for all 96 arrivals - or, overlapped, the producer's refill does
          mbar_arrive((XF_OVERLAP ? bar_empty : bar_xf) + 8 * s);
        }
        next_count = count_of(tile_of(it + 1));
        if (reads) {
          // row sums: the 8 lanes of a row (an aligned octet of the warp) hold its 8 chunks -> butterfly over the
          // octet; then lane lc of the octet takes passes lc, lc + 8, ... so each lane runs ceil(XF_PASSES / 8) IEEE
          // div/sqrt instead of XF_PASSES (they sit between this tile's last stage and the next tile's first)
          float mine[NPER];
#pragma unroll
          for (int j = 0; j < NPER; ++j) mine[j] = 0.0f;
#pragma unroll
          for (int p = 0; p < XF_PASSES; ++p) {
            float v = ss[p];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            if (lc == p % 8) mine[p / 8] = v;
          }
#pragma unroll
          for (int j = 0; j < NPER; ++j)
            rs[j] = rstd_of(mine[j], K, eps);
          if (rstd_out != nullptr && pn == 0) {
#pragma unroll
            for (int j = 0; j < NPER; ++j) {
              const int p = lc + 8 * j;
              const int r = r0 + XF_ROWS * p;
              if (p < XF_PASSES && r < BM && pm * BM + r < M) rstd_out[pm * BM + r] = rs[j];
            }
            // published before the smem hand-over below waits for its slot: later tiles see it sooner
            if (sums_once) red_release_gpu_add(row_counts + pm, 1u);
          }
        }
        const int b = it & 1;
        mbar_wait(rstd_empty + 8 * b, ((it >> 1) & 1) ^ 1);  // the consumers of tile it - 2 read this buffer
#pragma unroll
        for (int j = 0; j < NPER; ++j) {
          const int p = lc + 8 * j;
          const int r = r0 + XF_ROWS * p;
          if (p < XF_PASSES && r < BM) rstd_s[b * BM + r] = rs[j];
        }
        mbar_arrive(rstd_full + 8 * b);
      }
    }
#endif
  } else {
    // ---------------- consumers ----------------
    setmaxnreg_inc<TW_CONSUMER_REGS>();
    const int c = __shfl_sync(0xffffffffu, wg, 0) - 1;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const tw_u32 cbuf = sbase + STAGES * STAGE_BYTES + c * C_WG;
    const int atom0 = COOP ? c * MA : 0;  // first m64 atom of the CTA tile this consumer computes
    float acc[MA][BN / 2];
#if TW_RES_PATH == 1
    constexpr bool res_by_tma = true;  // (checked at entry: the launcher passed a map)
#elif TW_RES_PATH == 2
    constexpr bool res_by_tma = false;
#else
    const bool res_by_tma = RES_TMA && res_rows > 0;
#endif
    const tw_u32 res_full = sbase + RES_BAR_OFFSET + 8 * c;
#if TW_NORM_XFORM || TW_NORM_A
    // (the RMSNorm builds keep register loads: no slot in the transform builds' layout, and the fragment mainloop
    // has no copy point)
    constexpr bool bias_smem = false;
    const tw_u32 bias_s = 0;
#else
    // a 4-byte aligned bias (every pair a cp.async can take) comes through the consumer's smem slice
#if TW_BIAS_PATH == 1
    constexpr bool bias_smem = true;  // (checked at entry: a 4-byte aligned bias)
#elif TW_BIAS_PATH == 2
    constexpr bool bias_smem = false;
#else
    const bool bias_smem = TW_BIAS && bias_vec;
#endif
    const tw_u32 bias_s = sbase + BIAS_OFFSET + c * BN * 2;
#endif
    tw_u32 res_phase = 0;

#if TW_SCALE == 3 && TW_FP8_SCALE_AHEAD
    // the block scales' ring (header: TW_FP8_SCALE_AHEAD); k-block kb of iteration it's tile uses slot
    // (it * kt + kb) % SCALE_AHEAD, which k-block kb - SCALE_AHEAD of the same tile (or the previous tile's epilogue)
    // filled
    const tw_u32 scale_ring = sbase + SCALE_RING_OFFSET + c * SCALE_AHEAD * SCALE_SLOT_BYTES;
    // This warp's part of a slot: lane l < 16 copies the scale_a of row 16 warp + l (zero-filled past M, reading
    // nothing), lane 16 the tile's scale_b block, lanes 17-31 nothing. A lane's source for a tile is a pointer to its
    // k-block 0 and a step per k-block (a column of scale_a, a row of scale_b), so every k-block's copy is one
    // address and one instruction for all 17 lanes.
    struct ScaleSource {
      const float* k0;
      int step, bytes;
    };
    auto scale_source = [&](int tile_row0, int tile_n0) -> ScaleSource {
      const int r = tile_row0 + warp * 16 + lane;
      if (lane < 16) return {scale_a + (r < M ? r : 0), M, r < M ? 4 : 0};
      return {scale_b + tile_n0 / 128, num_nb, lane == 16 ? 4 : 0};
    };
    // (rows l and l + 8 of a warp's 16 side by side - row 16 w + l at 16 w + 2 (l % 8) + l / 8 - so that a lane's two
    // rows, lane / 4 and lane / 4 + 8, are one 8-byte load: header)
    const tw_u32 scale_lane_offset = 4 * (lane < 16 ? warp * 16 + 2 * (lane & 7) + (lane >> 3) : WM + warp);
    // (the head copies below; the mainloop's copy is read_block_scales' predicated one)
    auto copy_block_scales = [&](const ScaleSource& src, int kb, int slot) {
      if (lane <= 16)
        cp_async_4_zfill(scale_ring + slot * SCALE_SLOT_BYTES + scale_lane_offset, src.k0 + (long long)kb * src.step,
                         src.bytes);
    };
    // the first SCALE_AHEAD k-blocks' scales of iteration it's tile, one group each - empty past its k-blocks or the
    // last tile, so that every k-block still closes exactly one group and the mainloop's wait counts k-blocks
    auto copy_head_scales = [&](int it) {
      const int t = tile_of(it);
      int pm = 0, pn = 0;
      if (t < num_tiles) coords(t, pm, pn);
#pragma unroll
      for (int kb = 0; kb < SCALE_AHEAD; ++kb) {
        if (t < num_tiles && kb < kt)
          copy_block_scales(scale_source(pm * BM + (COOP ? c * WM : 0), pn * BN), kb, (it * kt + kb) % SCALE_AHEAD);
        cp_async_commit_group();
      }
    };
    copy_head_scales(COOP ? 0 : c);
#endif
#if TW_FP8_SCALE_STAGE
    // this lane's two rows' scale_a in a stage's scales (the copier's layout: rows l and l + 8 of the CTA tile's 16-row
    // group side by side), and the tile's scale_b after the BM rows
    const tw_u32 stage_scale_offset = SCALE_RING_OFFSET + 4 * (16 * (atom0 * 4 + warp) + 2 * (lane >> 2));
#endif

    if (!COOP && c == 1 && tile_of(0) < num_tiles) named_barrier_arrive(ORDER_BAR + 0, 256);  // consumer 0 first

    for (int it = COOP ? 0 : c;; it += COOP ? 1 : 2) {
      const int t = tile_of(it);
      if (t >= num_tiles) break;
      int pm, pn;
      coords(t, pm, pn);
      const int n0 = pn * OBN;
      const int row0 = pm * BM + (COOP ? c * WM : 0);
#if TW_SCALE == 3 && TW_FP8_SCALE_AHEAD
      const ScaleSource tile_scales = scale_source(row0, n0);  // (this lane's block scales of the tile)
#endif

      // this tile's bias columns into the consumer's smem slice (BIAS_SMEM): one 4-byte pair per thread, issued
      // during the mainloop and waited for at the epilogue's first barrier, so the epilogue reads it from smem
      // instead of waiting out global loads (a batch of register loads per 8 column blocks still cost a bias-only
      // 16384 x 3072 x 1024 GEMM 10%). Columns past N copy nothing and read as 0.
      auto copy_bias_slice = [&]() {
#if !TW_NORM_XFORM && !TW_NORM_A
        if (2 * tid < BN) {
          const int col = n0 + 2 * tid;
          const int bytes = col + 1 < N ? 4 : (col < N ? 2 : 0);
          cp_async_4_zfill(bias_s + 4 * tid, bytes ? bias + col : bias, bytes);
        }
#endif
      };
      // the residual tile into cbuf (RES_TMA; issued by tid 0 during the mainloop, waited for in the epilogue)
      auto load_residual_tile = [&]() {
        bulk_wait_group_read<0>();
        mbar_arrive_expect_tx(res_full, WM * BN * 2);
#pragma unroll
        for (int b = 0; b < BN / 64; ++b)
          tma_load_2d(cbuf + b * WM * 128, &tm_r, res_full, n0 + 64 * b, row0 % res_rows);
      };

      // ---- mainloop ----
      if (!COOP) named_barrier_sync(ORDER_BAR + c, 256);
      const int pos = it * kt;  // ring position of this tile's first k-block
      int s = pos % STAGES;
      tw_u32 phase = (pos / STAGES) & 1;
      int prev = 0;
#if TW_SCALE == 3 && TW_FP8_SCALE_AHEAD
      // A k-block's block scales from the ring, and the copy into the slot they leave (header: TW_FP8_SCALE_AHEAD):
      // one copy-group wait, an 8-byte and a 4-byte LDS, two FMULs, one predicated cp.async and its commit, and two
      // running values instead of kb arithmetic - the source of the next copy (k-block kb + SCALE_AHEAD: the previous
      // epilogue copied the tile's first SCALE_AHEAD) and the slot's address.
      const float* scale_next = tile_scales.k0 + (long long)SCALE_AHEAD * tile_scales.step;
      tw_u32 scale_slot = scale_ring + (pos % SCALE_AHEAD) * SCALE_SLOT_BYTES;
      const bool scale_copier = lane <= 16;  // lanes 0-15 copy scale_a rows, lane 16 the tile's scale_b block
      auto read_block_scales = [&](int kb, float (&kscale)[MA][2]) {
        // k-block kb's group is the oldest in flight (copied SCALE_AHEAD k-blocks ago): waiting until SCALE_AHEAD - 1
        // remain lands it; the warp barrier then shows each lane the copies of the others
        cp_async_wait_group<SCALE_AHEAD - 1>();
        __syncwarp();
        float sa_lo, sa_hi;
        ld_shared_f32x2(scale_slot + 4 * (warp * 16 + 2 * (lane >> 2)), sa_lo, sa_hi);
        const float col_scale = __uint_as_float(ld_shared_b32(scale_slot + 4 * (WM + warp)));
        // the register build's products, bit for bit: scale_a[row, kb] * scale_b[kb, n0 / 128] in one fp32 multiply
        kscale[0][0] = sa_lo * col_scale;
        kscale[0][1] = sa_hi * col_scale;
        __syncwarp();  // every lane has read the slot before any lane refills it
        // (no copy past the tile's k-blocks; the group is still closed, so every k-block closes exactly one)
        cp_async_4_zfill_if(scale_copier && kb + SCALE_AHEAD < kt, scale_slot + scale_lane_offset, scale_next,
                            tile_scales.bytes);
        cp_async_commit_group();
        scale_next += tile_scales.step;
        if constexpr (SCALE_AHEAD == 2) scale_slot ^= (scale_ring ^ (scale_ring + SCALE_SLOT_BYTES));
      };
#endif
#if TW_NORM_A && !TW_NORM_XFORM
      float ss[MA][2] = {};  // fp32 sums of x^2 of this thread's two rows per atom, over its fragment columns
      // One k-block: g loads (issued before the full-barrier wait so their latency hides under it), fragments into
      // `fr`, RS wgmmas, then release the previous k-block's stage once its wgmmas are retired. `fr` was last read
      // by the wgmmas of k-block kb - 2 (double buffer) or kb - 1 (single): both retired by the wait of the step
      // before, so rewriting it here is safe; `other` is fenced after the wait so its registers stay reserved until
      // its readers (k-block kb - 1) are retired by that wait.
      tw_u32 fra[K16][MA][4], frb[K16][MA][4];
      auto norm_step = [&](int kb, tw_u32 (&fr)[K16][MA][4], tw_u32 (&other)[K16][MA][4]) {
        tw_u32 gv[K16][2];
        load_g(norm_w, kb * BK, K, lane, gv);
        mbar_wait(bar_full + 8 * s, phase);  // TMA bytes of this stage landed: visible to ldmatrix
        const tw_u32 sa = sbase + s * STAGE_BYTES;
        const tw_u32 sb = sa + A_STAGE;
        norm_fragments(sa, atom0, warp, lane, gv, ss, fr);
        wgmma_fence();  // the fragment registers (and accumulators) written above are ordered before the wgmmas
#pragma unroll
        for (int k16 = 0; k16 < K16; ++k16) {
          tw_u64 db;
          if constexpr (B_MN) db = wgmma_desc_sw128(sb + k16 * 16 * 128, BK * 128, 1024);
          else db = wgmma_desc_sw128(sb + k16 * 32, 16, 1024);
#pragma unroll
          for (int ma = 0; ma < MA; ++ma) {
            if constexpr (TW_NORM_SS_DEBUG) {  // A from smem (x itself, g ignored): isolates the fragment path
              const tw_u64 da = wgmma_desc_sw128(sa + (atom0 + ma) * 64 * 128 + k16 * 32, 16, 1024);
              mma<0, B_MN ? 1 : 0>(acc[ma], da, db, (kb | k16) != 0);
            } else {
              mma_rs<B_MN ? 1 : 0>(acc[ma], fr[k16][ma], db, (kb | k16) != 0);
            }
          }
        }
        wgmma_commit();
        if constexpr (NORM_DBUF) {
          if (kb > 0) {
            wgmma_wait<1>();  // k-block kb-1 retired: its stage (B reads) and its fragment set are free
            frag_fence(other);
            if (tid == 0) mbar_arrive(bar_empty + 8 * prev);
          }
        } else {
          wgmma_wait<0>();  // fallback: retire this k-block before its fragments are rewritten
          frag_fence(fr);
          if (tid == 0) mbar_arrive(bar_empty + 8 * s);
        }
        prev = s;
        if (++s == STAGES) {
          s = 0;
          phase ^= 1;
        }
      };
      // unrolled by two so each fragment set is a fixed register set (no dynamic register-array indexing)
      for (int kb = 0; kb < kt; kb += 2) {
        norm_step(kb, fra, frb);
        if (kb + 1 < kt) norm_step(kb + 1, frb, fra);
      }
      wgmma_wait<0>();
      if (NORM_DBUF && tid == 0) mbar_arrive(bar_empty + 8 * prev);
#else
#if TW_FP8_PROMOTE
      // the tile's fp32 accumulator starts at zero and takes each k-block's partial tile (header: TW_FP8_PROMOTE)
      float part[MA][BN / 2];
#pragma unroll
      for (int ma = 0; ma < MA; ++ma)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[ma][i] = 0.0f;
#endif
      // the descriptors of stage 0's first k step for this consumer's rows, built once (header: descriptors)
      const tw_u64 desc_a0 = wgmma_desc_sw128(sbase + atom0 * 64 * 128, A_MN ? BK * 128 : 16, 1024);
      const tw_u64 desc_b0 = wgmma_desc_sw128(sbase + A_STAGE, B_MN ? BK * 128 : 16, 1024);
      for (int kb = 0; kb < kt; ++kb) {
#if TW_SCALE == 3 && TW_FP8_SCALE_AHEAD
        // the k-block's scales at its top, before the full-barrier wait: the window between its wgmmas and their
        // wait (the other consumer's promotion and reissue on the same schedulers) stays as empty as the row-wise
        // build's, and the products are ready before the wait instead of two FMULs after it (header)
        float kscale[MA][2];
        read_block_scales(kb, kscale);
#endif
#if TW_NORM_XFORM
        // TMA landed and the transform warps wrote x * g (overlapped read-only: TMA landed)
        mbar_wait((XF_OVERLAP ? bar_full : sbase + XF_BAR_OFFSET) + 8 * s, phase);
#else
        mbar_wait(bar_full + 8 * s, phase);
#endif
#if TW_FP8_SCALE_STAGE
        // the k-block's block scales from its stage, landed with its tiles (the full barrier's acquire): one LDS.64,
        // one LDS and the register build's products, bit for bit - scale_a[row, kb] * scale_b[kb, n0 / 128] in one
        // fp32 multiply (header)
        float kscale[MA][2];
        {
          const tw_u32 scales = sbase + s * SCALE_STAGE_BYTES;
          float sa_lo, sa_hi;
          ld_shared_f32x2(scales + stage_scale_offset, sa_lo, sa_hi);
          const float col_scale = __uint_as_float(ld_shared_b32(scales + SCALE_RING_OFFSET + 4 * BM));
          kscale[0][0] = sa_lo * col_scale;
          kscale[0][1] = sa_hi * col_scale;
          // (the products pinned here, before the wgmmas: with a bias, ptxas otherwise put the two FMULs after the
          // bias slice's copy, between the last wgmma and its wait)
          wgmma_reg_fence(kscale[0]);
        }
#endif
        // the stage's descriptors: stage 0's advanced by the stage's bytes (one uniform add each)
        const tw_u64 da_s = wgmma_desc_advance(desc_a0, s * STAGE_BYTES);
        const tw_u64 db_s = wgmma_desc_advance(desc_b0, s * STAGE_BYTES);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < K_STEPS; ++ks) {  // k16 steps (k32 in FP8): 32 bytes each into the K-major row
          const tw_u64 db = wgmma_desc_advance(db_s, B_MN ? ks * 16 * 128 : ks * 32);
#pragma unroll
          for (int ma = 0; ma < MA; ++ma) {
            const tw_u64 da = wgmma_desc_advance(da_s, ma * 64 * 128 + (A_MN ? ks * 16 * 128 : ks * 32));
#if TW_FP8_PROMOTE
            mma<0, 0>(part[ma], da, db, ((kb % TW_FP8_PROMOTE) | ks) != 0);  // a fresh partial tile per group
#else
            mma<A_MN ? 1 : 0, B_MN ? 1 : 0>(acc[ma], da, db, (kb | ks) != 0);
#endif
          }
        }
        wgmma_commit();
        // Halfway through the mainloop: our previous tile's TMA store must have read cbuf before the residual lands
        // there, and by now it long has - tid 0's bulk_wait_group_read in load_residual_tile blocks its warp (and so
        // the warpgroup's next wgmma) while the store drains, which one k-block in cost an estimated ~3.8 us a tile.
        // Half the k-blocks still leave the load (and the bias copies) a mainloop's half to land. cbuf's generic-proxy
        // accesses of that epilogue (ldmatrix, stmatrix) were fenced to the async proxy and joined at its barrier
        // before the store was issued.
        if (kb == kt / 2) {
          if (res_by_tma && tid == 0) load_residual_tile();
          if (bias_smem) copy_bias_slice();
        }
#if TW_FP8_PROMOTE
        if ((kb + 1) % TW_FP8_PROMOTE == 0 || kb + 1 == kt) {
#if TW_SCALE == 3
          // block scales (header): this k-block's scale of each of the thread's rows times the tile's B block
          // scale - copied ahead and read at the k-block's top, or read from the stage after its full-barrier wait
          // (kscale); else loaded here, before the wait, whose wgmmas do not outlast the loads (header)
#if !TW_FP8_SCALE_AHEAD && !TW_FP8_SCALE_STAGE
          float kscale[MA][2];
          {
            const float sbk = scale_b[(long long)kb * num_nb + n0 / 128];
#pragma unroll
            for (int ma = 0; ma < MA; ++ma)
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int r = row0 + ma * 64 + warp * 16 + (lane >> 2) + 8 * h;
                kscale[ma][h] = (r < M ? scale_a[(long long)kb * M + r] : 0.0f) * sbk;  // no read past M
              }
          }
#endif
#endif
          // promotion: the group's partial tile is complete once its wgmmas retire, which also frees the stage
          wgmma_wait<0>();
          // (block scales in the stage: every thread, whose arrival releases its own LDS of them)
          if (SCALE_STAGE || tid == 0) {
            if (kb % TW_FP8_PROMOTE != 0) mbar_arrive(bar_empty + 8 * prev);  // (the group's previous k-block)
            mbar_arrive(bar_empty + 8 * s);
          }
#pragma unroll
          for (int ma = 0; ma < MA; ++ma) {
            wgmma_reg_fence(part[ma]);
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) {
#if TW_SCALE == 3
              acc[ma][i] = fmaf(part[ma][i], kscale[ma][(i >> 1) & 1], acc[ma][i]);  // register i: row half (i/2)%2
#else
              acc[ma][i] += part[ma][i];
#endif
            }
          }
        } else if (kb % TW_FP8_PROMOTE != 0) {
          wgmma_wait<1>();  // inside a group: the previous k-block's wgmmas are done, release its stage
          if (tid == 0) mbar_arrive(bar_empty + 8 * prev);
        }
#else
        if (kb > 0) {
          wgmma_wait<1>();  // the previous k-block's MMAs are done: release its stage
          if (tid == 0) mbar_arrive(bar_empty + 8 * prev);
        }
#endif
        prev = s;
        if (++s == STAGES) {
          s = 0;
          phase ^= 1;
        }
      }
#if !TW_FP8_PROMOTE
      wgmma_wait<0>();
      if (tid == 0) mbar_arrive(bar_empty + 8 * prev);
#endif
#endif
#pragma unroll
      for (int ma = 0; ma < MA; ++ma) wgmma_reg_fence(acc[ma]);
      if (!COOP && tile_of(it + 1) < num_tiles) named_barrier_arrive(ORDER_BAR + (1 - c), 256);

      // ---- epilogue ----
      if (tid == 0) bulk_wait_group_read<0>();  // our previous TMA store no longer reads cbuf
      if (bias_smem) {
        if (kt == 0) copy_bias_slice();  // (K = 0: no mainloop issued it)
        cp_async_wait_all();  // this thread's pair landed; the barrier below publishes every thread's
      }
      named_barrier_sync(EPI_BAR + c, 128);
#if TW_SCALE == 3 && TW_FP8_SCALE_AHEAD
      // the next tile's first scales: after the bias slice's wait_all (which would wait for them too), and the
      // rest of this epilogue hides their latency
      copy_head_scales(it + (COOP ? 1 : 2));
#endif
      if (res_by_tma) {
        if (kt == 0 && tid == 0) load_residual_tile();  // (K = 0: no mainloop issued it)
        mbar_wait(res_full, res_phase);  // the residual tile is in cbuf
        res_phase ^= 1;
      }

#if TW_NORM_XFORM
      // rstd of this consumer's rows from the transform warps (buffer it % 2 of the CTA's tile sequence)
      float rstd[MA][2];
      {
        const float* rstd_s = reinterpret_cast<const float*>(smem_raw + (sbase - raw) + RSTD_OFFSET) + (it & 1) * BM;
        mbar_wait(sbase + RSTD_BAR_OFFSET + 8 * (it & 1), (it >> 1) & 1);
#pragma unroll
        for (int ma = 0; ma < MA; ++ma)
#pragma unroll
          for (int h = 0; h < 2; ++h) rstd[ma][h] = rstd_s[atom0 * 64 + ma * 64 + warp * 16 + (lane >> 2) + 8 * h];
      }
#elif TW_NORM_A || TW_NORM_SUMSQ
      // rstd of the thread's two rows per 64-row block; the tiles of the first N column store it for the backward
      float rstd[MA][2];
#pragma unroll
      for (int ma = 0; ma < MA; ++ma) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#if TW_NORM_A
          // the four lanes of a quad hold disjoint columns of the same two rows -> xor-shuffle over the quad
          rstd[ma][h] = rstd_of(quad_sum(ss[ma][h]), K, eps);
#endif
          const int r = row0 + ma * 64 + warp * 16 + (lane >> 2) + 8 * h;
#if TW_NORM_SUMSQ
          rstd[ma][h] = rstd_of(r < M ? row_sumsq[r] : 0.0f, K, eps);  // given sums (header); no read past M
#endif
          if (rstd_out != nullptr && pn == 0 && (lane & 3) == 0 && r < M) rstd_out[r] = rstd[ma][h];
        }
      }
#endif
      long long res_off[MA][2];
      bool row_ok[MA][2];
#pragma unroll
      for (int ma = 0; ma < MA; ++ma) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = row0 + ma * 64 + warp * 16 + (lane >> 2) + 8 * h;
          row_ok[ma][h] = r < M;
          res_off[ma][h] = TW_RES ? (long long)(r / res_period) * rs0 + (long long)(r % res_period) * rs1 : 0;
        }
      }
#if TW_FP8
      // dequantization of the fp8 product, before bias (scaled_mm semantics): this thread's rows' factor here, the
      // columns' scale_b (row-wise) with the bias below
      float row_scale[MA][2];
      {
        const float tensor_scale = SCALE == 1 ? scale_a[0] * scale_b[0] : 1.0f;
#pragma unroll
        for (int ma = 0; ma < MA; ++ma)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = row0 + ma * 64 + warp * 16 + (lane >> 2) + 8 * h;
            row_scale[ma][h] = SCALE == 2 ? (row_ok[ma][h] ? scale_a[r] : 0.0f) : tensor_scale;  // no read past M
          }
      }
#endif
      const int q = lane >> 3;
      const int r8 = lane & 7;
      const int col_lane = n0 + 2 * (lane & 3);
      // cbuf address of this lane's row of fragment (ma, column blocks j, j + 1) for stmatrix / ldmatrix: lane
      // supplies row r8 of matrix q - rows +8 for odd q, the next 8-column chunk for q >= 2 (128B swizzle)
      auto frag_addr = [&](int ma, int j) -> tw_u32 {
        const int rloc = ma * 64 + warp * 16 + (q & 1) * 8 + r8;
        const int chunk = j + (q >> 1);
        return cbuf + (chunk >> 3) * (WM * 128) + rloc * 128 + (((chunk & 7) ^ r8) << 4);
      };
      // bias and residual reach registers RES_J 8-column blocks at a time, ahead of those blocks' stmatrix stores
      // (load_pair says why): (1 + 2 * MA) * RES_J registers beside the accumulators - 40 at MA 2, within the
      // consumer's budget. The RMSNorm builds hold rstd and the norm's state too: 8 blocks spilled their fp16 GELU +
      // residual coop128x256 builds (12-32 B), 4 do not.
      constexpr int RES_J = NORM ? 4 : 8;
#if TW_SUMSQ_OUT
      // the squares of this thread's stored values, per row (its two rows of each 64-row block): the next RMSNorm's
      // sums come from registers the epilogue holds anyway, instead of a pass that re-reads the output
      float out_sq[MA][2];
#pragma unroll
      for (int ma = 0; ma < MA; ++ma) out_sq[ma][0] = out_sq[ma][1] = 0.0f;
#endif
#pragma unroll
      for (int j0 = 0; j0 < OBN / 8; j0 += RES_J) {
        tw_u32 bias_pk[RES_J];
        tw_u32 res_pk[MA][2][RES_J];
#if TW_FP8
        float col_scale[RES_J][2];  // scale_b of the thread's two columns per block (row-wise), else 1
#endif
#pragma unroll
        for (int jr = 0; jr < RES_J; ++jr) {
          const int col = col_lane + 8 * (j0 + jr);
#if TW_FP8
          col_scale[jr][0] = (SCALE == 2 && col < N) ? scale_b[col] : 1.0f;
          col_scale[jr][1] = (SCALE == 2 && col + 1 < N) ? scale_b[col + 1] : 1.0f;
#endif
          if (bias_smem)  // (uniform: one branch per batch after unswitching; the slice is zero past N)
            bias_pk[jr] = ld_shared_b32(bias_s + 2 * (col - n0));
          else
            bias_pk[jr] = (TW_BIAS && col < N) ? load_pair(bias + col, 1, col + 1 < N, bias_vec) : 0u;
#pragma unroll
          for (int ma = 0; ma < MA; ++ma)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              res_pk[ma][h][jr] =
                  (TW_RES && !res_by_tma && row_ok[ma][h] && col < N)
                      ? load_pair(res + res_off[ma][h] + (long long)col * rs2, rs2, col + 1 < N, res_vec)
                      : 0u;
        }
#pragma unroll
        for (int j = j0; j < j0 + RES_J; j += 2) {
          tw_u32 packed[MA][4];
          // the residual of these two column blocks from cbuf (RES_TMA): ldmatrix at the address stmatrix writes
          // below returns it in the same register layout, packed[ma][2 * jj + h]
          tw_u32 res_sm[MA][4];
#pragma unroll
          for (int ma = 0; ma < MA; ++ma)
            if (RES_TMA && res_by_tma) ldmatrix_x4(frag_addr(ma, j), res_sm[ma]);
#pragma unroll
          for (int jj = 0; jj < 2; ++jj) {
            const float b0 = pair_lo<(TW_FP16 != 0)>(bias_pk[j - j0 + jj]);
            const float b1 = pair_hi<(TW_FP16 != 0)>(bias_pk[j - j0 + jj]);
#pragma unroll
            for (int ma = 0; ma < MA; ++ma) {
#pragma unroll
              for (int h = 0; h < 2; ++h) {
#if TW_GLU
                // silu(gate) * up of output columns (j + jj) * 8 + ...: the up half sits OBN / 8 blocks further
                constexpr int UP = 4 * (OBN / 8);
                const int e = 4 * (j + jj) + 2 * h;
#if TW_NORM_A || TW_NORM_SUMSQ
                const float s = rstd[ma][h];
#else
                const float s = 1.0f;
#endif
                float v0 = silu_fast(acc[ma][e] * s) * (acc[ma][e + UP] * s);
                float v1 = silu_fast(acc[ma][e + 1] * s) * (acc[ma][e + 1 + UP] * s);
#elif TW_NORM_A || TW_NORM_SUMSQ
                // rstd before the bias, as the Triton kernel (acc * rstd, then the GEMM epilogue)
                float v0 = activation<TW_ACT>(acc[ma][4 * (j + jj) + 2 * h] * rstd[ma][h] + b0);
                float v1 = activation<TW_ACT>(acc[ma][4 * (j + jj) + 2 * h + 1] * rstd[ma][h] + b1);
#elif TW_FP8
                const float* cs = col_scale[j - j0 + jj];
                float v0 = activation<TW_ACT>(acc[ma][4 * (j + jj) + 2 * h] * (row_scale[ma][h] * cs[0]) + b0);
                float v1 = activation<TW_ACT>(acc[ma][4 * (j + jj) + 2 * h + 1] * (row_scale[ma][h] * cs[1]) + b1);
#else
                float v0 = activation<TW_ACT>(acc[ma][4 * (j + jj) + 2 * h] + b0);
                float v1 = activation<TW_ACT>(acc[ma][4 * (j + jj) + 2 * h + 1] + b1);
#endif
                if constexpr (TW_RES) {
                  const tw_u32 r = (RES_TMA && res_by_tma) ? res_sm[ma][2 * jj + h] : res_pk[ma][h][j - j0 + jj];
                  v0 += pair_lo<(TW_FP16 != 0)>(r);
                  v1 += pair_hi<(TW_FP16 != 0)>(r);
                }
                packed[ma][2 * jj + h] = pack_pair<(TW_FP16 != 0)>(v0, v1);
#if TW_SUMSQ_OUT
                {
                  // squares of the rounded values (what the norm will read). Columns past N need no mask: they hold
                  // 0 here - a zero-filled B tile gives a zero accumulator, bias and residual load 0 past N, and
                  // every activation maps 0 to 0 - so two FFMAs a pair (a masked form was ~3x the instructions)
                  const float s0 = pair_lo<(TW_FP16 != 0)>(packed[ma][2 * jj + h]);
                  const float s1 = pair_hi<(TW_FP16 != 0)>(packed[ma][2 * jj + h]);
                  out_sq[ma][h] = fmaf(s1, s1, fmaf(s0, s0, out_sq[ma][h]));
                }
#endif
              }
            }
          }
#pragma unroll
          for (int ma = 0; ma < MA; ++ma)
            stmatrix_x4(frag_addr(ma, j), packed[ma][0], packed[ma][1], packed[ma][2], packed[ma][3]);
        }
      }
#if TW_SUMSQ_OUT
      // a row's columns of this tile sit in the four lanes of a quad: their sum, stored once per (tile column, row)
      // - every element written by exactly one thread, none accumulated in memory, so the sums are deterministic
#pragma unroll
      for (int ma = 0; ma < MA; ++ma)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float row_sq = quad_sum(out_sq[ma][h]);
          if ((lane & 3) == 0 && row_ok[ma][h])
            sumsq_part[(long long)pn * M + row0 + ma * 64 + warp * 16 + (lane >> 2) + 8 * h] = row_sq;
        }
#endif
#if TW_STORE_DIRECT
      named_barrier_sync(EPI_BAR + c, 128);  // every thread's stmatrix landed in cbuf
      {
        // 16-byte chunk i of the tile: row i / ROW_CHUNKS, chunk i % ROW_CHUNKS of it - consecutive threads take
        // consecutive chunks of a row, so a warp's stores are one contiguous run (two rows' where a row ends)
        constexpr int ROW_CHUNKS = OBN / 8;
#pragma unroll 4
        for (int i = tid; i < WM * ROW_CHUNKS; i += 128) {
          const int rloc = i / ROW_CHUNKS, chunk = i % ROW_CHUNKS;
          const int r = row0 + rloc, col = n0 + 8 * chunk;
          if (r >= M || col >= N) continue;
          // the chunk as stmatrix stored it: 64-column box chunk / 8, 16-byte slot (chunk % 8) ^ (row % 8)
          tw_u32 w[4];
          ld_shared_v4_b32(cbuf + (chunk >> 3) * (WM * 128) + rloc * 128 + (((chunk & 7) ^ (rloc & 7)) << 4), w);
          unsigned short* dst = c_out + (long long)r * ldc + col;
          if (col + 8 <= N) {
            st_global_v4_b32(dst, w[0], w[1], w[2], w[3]);
          } else {  // the N tail: the chunk's columns below N, one 16-bit value each
#pragma unroll
            for (int e = 0; e < 8; ++e)
              if (col + e < N) st_global_b16(dst + e, (unsigned short)(w[e >> 1] >> (16 * (e & 1))));
          }
        }
      }
      // cbuf's next writes (the next tile's stmatrix, or its residual by TMA - the async proxy) wait for every
      // thread's reads above
      fence_proxy_async_smem();
      named_barrier_sync(EPI_BAR + c, 128);
#else
      fence_proxy_async_smem();  // stmatrix writes -> visible to the TMA store (async proxy)
      named_barrier_sync(EPI_BAR + c, 128);
      if (tid == 0) {
#if TW_NORM_XFORM
        mbar_arrive(sbase + RSTD_BAR_OFFSET + 16 + 8 * (it & 1));  // all 128 threads read their rstd (barrier above)
#endif
#pragma unroll
        for (int b = 0; b < OBN / 64; ++b) tma_store_2d(&tm_c, cbuf + b * WM * 128, n0 + 64 * b, row0);
        bulk_commit_group();
      }
#endif
    }
    if (tid == 0) bulk_wait_group<0>();  // stores done before the CTA's shared memory goes away
  }
#endif
}
