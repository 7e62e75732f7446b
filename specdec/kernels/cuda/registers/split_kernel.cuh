// W12 with K split over independent CTAs (v4).
#pragma once

#include "../common/params.cuh"
#include "stream_kernel.cuh"
#include "../common/split_sums.cuh"

namespace {

// The W12 kernel with K split over independent CTAs (../README.md, "W12 with K split over independent CTAs"): the
// prologue and K loop of w12_stream_kernel, no clusters, then finish_split_row_block (the last CTA of a row
// block reduces the partials in split order).
template <bool VEC16>
__global__ void __launch_bounds__(kStreamThreads, kStreamCtasPerSm)
    w12_split_kernel(const Params p, float* partials, unsigned int* counters) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int split = blockIdx.y;
  const int c_lo = static_cast<int>((static_cast<long long>(split) * p.n_chunks) / p.k_splits);
  const int c_hi = static_cast<int>((static_cast<long long>(split + 1) * p.n_chunks) / p.k_splits);
  const int row_block = blockIdx.x * kStreamRows;
  float* red = stream_partials(smem, p);
  int* band_ptr = stream_band_ptr(red);
  float acc[4];
  stream_k_slice<VEC16>(p, c_lo, c_hi, row_block, smem, band_ptr, acc);

  // acc: rows (g, g + 8) of the warp's tile, tokens (2t, 2t + 1) -> red[row][token].
  float* mine = red + warp * 16 * 8;
  mine[g * 8 + 2 * t] = acc[0];
  mine[g * 8 + 2 * t + 1] = acc[1];
  mine[(g + 8) * 8 + 2 * t] = acc[2];
  mine[(g + 8) * 8 + 2 * t + 1] = acc[3];
  __syncthreads();

  finish_split_row_block<kStreamThreads>(p, red, band_ptr, partials, counters, split);
}

}  // namespace
