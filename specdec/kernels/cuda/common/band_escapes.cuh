// A 256-row band's escapes added in stored order by every row thread (the epilogue escape pass).
#pragma once

#include "params.cuh"

namespace {

// The escapes of the CTA's 256-row band are contiguous (tiles row-major). Rounds of THREADS escapes: each
// thread tests one, those of rows [r_lo, r_lo + rows) are packed in stored order (ballot + prefix) into shared
// memory at `scratch`, then every row thread adds its own in that order: the same fmas in the same order as a
// serial walk of the band. `row_local` = the thread's row - r_lo.
template <int THREADS, int TOK = kMaxTokens>
__device__ __forceinline__ void add_band_escapes(const Params& p, const int* band_ptr, int col_tiles, int band_row, int rows,
                                                 bool has_row, int row_local, int M, void* scratch, float (&out)[TOK]) {
  constexpr int kWarpsT = THREADS / 32;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int2* esc_list = reinterpret_cast<int2*>(scratch);                                // (column, value bits) [THREADS]
  unsigned char* esc_row = reinterpret_cast<unsigned char*>(esc_list + THREADS);   // row - r_lo [THREADS]
  int* warp_kept = reinterpret_cast<int*>(esc_row + THREADS);                      // [THREADS / 32]
  const int e_begin = band_ptr[0], e_end = band_ptr[col_tiles];
  for (int e_round = e_begin; e_round < e_end; e_round += THREADS) {
    const int e = e_round + tid;
    bool keep = false;
    int col = 0, rloc = 0;
    uint32_t bits = 0;
    if (e < e_end) {
      const uint32_t pos = p.esc_pos[e];
      rloc = static_cast<int>(pos >> 8) - band_row;
      if (rloc >= 0 && rloc < rows) {
        int lo = 0, hi = col_tiles - 1;  // column tile of e: the last with esc_ptr <= e
        while (lo < hi) {
          const int mid = (lo + hi + 1) >> 1;
          if (band_ptr[mid] <= e) lo = mid;
          else hi = mid - 1;
        }
        col = lo * kEscapeTile + static_cast<int>(pos & 0xFF);
        bits = static_cast<uint32_t>(p.esc_bits[e]) << 16;
        keep = true;
      }
    }
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, keep);
    if (lane == 0) warp_kept[warp] = __popc(ballot);
    __syncthreads();
    int offset = __popc(ballot & ((1u << lane) - 1u)), total = 0;
#pragma unroll
    for (int w = 0; w < kWarpsT; ++w) {
      const int c = warp_kept[w];
      if (w < warp) offset += c;
      total += c;
    }
    if (keep) {
      esc_list[offset] = make_int2(col, static_cast<int>(bits));
      esc_row[offset] = static_cast<unsigned char>(rloc);
    }
    __syncthreads();
    if (has_row) {
      for (int j = 0; j < total; ++j) {
        if (esc_row[j] != row_local) continue;
        const int2 en = esc_list[j];
        const float v = __int_as_float(en.y);
#pragma unroll
        for (int m = 0; m < TOK; ++m)
          if (m < M) out[m] = fmaf(__uint_as_float(static_cast<uint32_t>(p.x[static_cast<size_t>(m) * p.K + en.x]) << 16), v, out[m]);
      }
    }
    __syncthreads();
  }
}

}  // namespace
