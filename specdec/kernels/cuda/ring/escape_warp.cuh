// The W12 escape warp: a CTA's escapes folded while its consumers stream.
#pragma once

#include "../common/params.cuh"
#include "../common/programmatic_launch.cuh"

namespace {

// The escape warp of a W12 tensor-map CTA: the escapes of rows row_block .. row_block + ROWS - 1 whose columns lie in
// the CTA's K slice [k_lo, k_hi), each row's in stored order, summed in fp32 from 0.f into acc[row][m] (shared memory,
// tma_escape_bytes). A 256-row band's escapes are stored tile after tile (kEscapeTile columns a tile), so the slice's
// tiles t_lo .. t_hi hold one contiguous run of them. Rounds of up to 31 tiles: lane l reads the offset of tile t + l.
// Then 32 escapes at a time, one a lane: each lane loads its escape's position and value, finds its tile among the
// offsets, and if the escape is in the slice and the block, loads x at its column for every token (the loads of the
// 32 lanes in flight together) and writes them, the value and the row to shared memory. Last, the kept escapes in
// stored order, lane m doing token m: acc[row][m] = fma(x[m, col], value, acc[row][m]). One step an escape for all
// tokens at once, so a crowded tile costs escapes x ~40 cycles, not escapes x tokens x a shuffle chain. Every escape of
// the band lies in exactly one CTA's slice.
// STRIDE / TOK_STEP: acc's row and token strides (TOK / 1 for a row-major tile, padded rows too; 1 / the padded row
// count for a token-major one); `round`: where a round's x, values and rows go (nullptr: after acc); tok0: the first
// token (x row) of this call, so that warps can split a wide CTA's tokens (acc then points at token tok0's sums).
// LOAD_X false (SPECDEC_WIDE_ABLATE's timing builds only) folds 1.0 for every x.
template <int TOK, int ROWS = kStreamRows, int STRIDE = TOK, int TOK_STEP = 1, bool LOAD_X = true>
__device__ __forceinline__ void fold_escapes(const Params& p, int row_block, int k_lo, int k_hi, int lane, float* scratch,
                                             float* round = nullptr, int tok0 = 0) {
  constexpr unsigned kAll = 0xFFFFFFFFu;
  constexpr int kXStride = TOK + 1;
  constexpr int kTile = TOK_STEP == 1 ? ROWS * STRIDE : TOK * TOK_STEP;  // row-major [ROWS][STRIDE] or token-major
  float* acc = scratch;                                  // row r, token m at r * STRIDE + m * TOK_STEP
  float* xbuf = round != nullptr ? round : acc + kTile;  // [32][TOK + 1]
  float* vals = xbuf + 32 * kXStride;                    // [32]
  int* rows = reinterpret_cast<int*>(vals + 32);         // [32]
  for (int e = lane; e < kTile; e += 32) acc[e] = 0.f;
  griddep_wait();  // x comes from the kernel before this one
  const int M = p.M - tok0;  // this call's tokens: x rows tok0 .. tok0 + min(TOK, M) - 1
  if (k_lo >= k_hi || M <= 0) return;
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  const int tile0 = (row_block / kEscapeTile) * col_tiles;
  const int band_row = row_block % kEscapeTile;
  const int t_hi = (k_hi - 1) / kEscapeTile;
  for (int t = k_lo / kEscapeTile; t <= t_hi;) {
    const int nt = min(31, t_hi - t + 1);  // tiles this round; lane nt reads the end of the last one
    const int start = lane <= nt ? p.esc_ptr[tile0 + t + lane] : 0;
    const int e_lo = __shfl_sync(kAll, start, 0), e_hi = __shfl_sync(kAll, start, nt);
    for (int e0 = e_lo; e0 < e_hi; e0 += 32) {
      const int e = e0 + lane;
      uint32_t pos = 0, bits = 0;
      if (e < e_hi) {
        pos = p.esc_pos[e];
        bits = p.esc_bits[e];
      }
      int tile = t;
      for (int l = 1; l < nt; ++l) tile += __shfl_sync(kAll, start, l) <= e ? 1 : 0;
      const int col = tile * kEscapeTile + static_cast<int>(pos & 0xFFu);
      const int r = static_cast<int>(pos >> 8) - band_row;
      const bool kept = e < e_hi && col >= k_lo && col < k_hi && r >= 0 && r < ROWS;
      const unsigned kept_mask = __ballot_sync(kAll, kept);
      if (kept) {
#pragma unroll
        for (int m = 0; m < TOK; ++m)
          if (m < M)
            xbuf[lane * kXStride + m] =
                LOAD_X ? __uint_as_float(static_cast<uint32_t>(p.x[static_cast<size_t>(tok0 + m) * p.K + col]) << 16) : 1.f;
        vals[lane] = __uint_as_float(bits << 16);
        rows[lane] = r;
      }
      __syncwarp();
      if constexpr (TOK <= 32) {
        if (lane < M) {
          for (unsigned left = kept_mask; left != 0u; left &= left - 1u) {
            const int j = __ffs(left) - 1;
            float* a = acc + rows[j] * STRIDE + lane * TOK_STEP;
            *a = fmaf(xbuf[j * kXStride + lane], vals[j], *a);
          }
        }
      } else {  // lane m does tokens m, m + 32, ...
        for (int m = lane; m < M; m += 32) {
          for (unsigned left = kept_mask; left != 0u; left &= left - 1u) {
            const int j = __ffs(left) - 1;
            float* a = acc + rows[j] * STRIDE + m * TOK_STEP;
            *a = fmaf(xbuf[j * kXStride + m], vals[j], *a);
          }
        }
      }
      __syncwarp();  // the next round overwrites xbuf, vals and rows
    }
    t += nt;
  }
}

}  // namespace
