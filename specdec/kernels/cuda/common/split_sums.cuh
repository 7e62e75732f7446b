// K splits summed through global memory: the acquire-release count and the last CTA's sum in split order.
#pragma once

#include "params.cuh"
#include "band_escapes.cuh"
#include "bf16_store.cuh"

namespace {

// A partial tile is counted in with one thread's acquire-release add after the CTA's barrier: the release covers what
// the CTA's threads stored before the barrier (cumulativity), the acquire what the other pieces' CTAs stored before
// theirs; the barrier after it hands both to the CTA's other threads. One fence a count, in one thread, where a fence
// in every thread before the count and again before the last sum took up to 3 % more (benchmarks/NOTES.md, "Who the
// W12 sums wait for, the counts as acquire-release adds and the row tiles traced: measured").
__device__ __forceinline__ unsigned int atomic_add_acq_rel_gpu(unsigned int* addr, unsigned int v) {
  unsigned int old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(addr), "r"(v) : "memory");
  return old;
}

// red[(e / M) * TOK + e % M] = the sum from 0.f, in tile order, of value e of the n_tiles [64 rows][M tokens] tiles
// tile(q) (pointers into global memory, read through the L2), for e < 64 M, by THREADS threads (thread e_tid): each
// thread loads all its values of four tiles before adding any, so that a row block's last sum (the split-K kernels'
// last CTA, the persistent kernel's owed sums) waits for one round trip for every four tiles, not one for every value
// (at 16 tokens a bf16 thread has 7-8 values: benchmarks/NOTES.md, "The last sums' loads at once: measured").
template <int THREADS, int TOK, typename Tile>
__device__ __forceinline__ void sum_partial_tiles(float* red, int M, int n_tiles, int e_tid, Tile tile) {
  constexpr int kPer = (kStreamRows * TOK + THREADS - 1) / THREADS;  // a thread's values of a tile, at most
  constexpr int kTiles = 4;
  const int tile_values = kStreamRows * M;
  float s[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) s[j] = 0.f;
  for (int q0 = 0; q0 < n_tiles; q0 += kTiles) {
    float v[kPer][kTiles];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = e_tid + j * THREADS;
#pragma unroll
      for (int q = 0; q < kTiles; ++q) v[j][q] = e < tile_values && q0 + q < n_tiles ? __ldcg(tile(q0 + q) + e) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j)
#pragma unroll
      for (int q = 0; q < kTiles; ++q)
        if (q0 + q < n_tiles) s[j] += v[j][q];
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int e = e_tid + j * THREADS;
    if (e < tile_values) red[(e / M) * TOK + e % M] = s[j];
  }
}

// After the K loop of a split-K kernel (THREADS threads, all of them here): red holds the CTA's partial
// [64 rows][8 tokens] and band_ptr the band's escape offsets, both visible to every thread. With k_splits > 1 the
// CTA writes its partial tile [64 rows][M tokens] to `partials` at (row block, split), then bumps the row block's
// counter; the CTA that arrives last sums the partials in split order 0..k_splits-1 (the same bits whatever the
// arrival order), applies the escapes, stores bf16 and sets the counter back to 0 for the next launch. The others
// return at once. Counters must be 0 when the launch starts; partials need no initial value.
template <int THREADS, bool ESCAPES = true, int TOK = kMaxTokens>
__device__ __forceinline__ void finish_split_row_block(const Params& p, float* red, const int* band_ptr, float* partials,
                                                       unsigned int* counters, int split) {
  __shared__ int arrived_last;
  const int M = p.M;
  const int tid = threadIdx.x;
  const int row_block = blockIdx.x * kStreamRows;
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  const int tile_values = kStreamRows * M;  // [64 rows][M tokens], row-major
  if (p.k_splits > 1) {
    float* tiles = partials + static_cast<size_t>(blockIdx.x) * p.k_splits * tile_values;
    float* own = tiles + static_cast<size_t>(split) * tile_values;
    for (int e = tid; e < tile_values; e += THREADS) own[e] = red[(e / M) * TOK + e % M];
    __syncthreads();
    if (tid == 0) {  // the barrier orders every thread's partial before this release (cumulativity)
      const unsigned int before = atomic_add_acq_rel_gpu(counters + blockIdx.x, 1u);
      arrived_last = before == static_cast<unsigned int>(p.k_splits - 1);
      if (arrived_last) counters[blockIdx.x] = 0u;  // every split has arrived: ready for the next launch
    }
    __syncthreads();
    if (!arrived_last) return;
    // Sum in split order from 0.f (L2, past L1).
    sum_partial_tiles<THREADS, TOK>(red, M, p.k_splits, tid, [&](int q) { return tiles + static_cast<size_t>(q) * tile_values; });
    __syncthreads();
  }

  // Thread r < 64 finishes row r of the block: its sum (0.f + the splits' partials), then its escapes in stored
  // order, then bf16.
  const bool has_row = tid < kStreamRows;
  const int row = row_block + tid;
  float out[TOK];
#pragma unroll
  for (int m = 0; m < TOK; ++m) out[m] = 0.f;
  if (has_row) {
#pragma unroll
    for (int m = 0; m < TOK; ++m)
      if (m < M) out[m] += red[tid * TOK + m];
  }
  if constexpr (ESCAPES)
    add_band_escapes<THREADS, TOK>(p, band_ptr, col_tiles, row_block % kEscapeTile, kStreamRows, has_row, tid, M,
                                   red + kStreamRows * TOK, out);
  if (has_row && row < p.N) store_bf16_row<TOK>(p, row, M, out);
}

}  // namespace
