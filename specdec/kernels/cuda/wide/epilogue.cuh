// The wide kernels' sums: the sums' tile, the partial tiles, the last CTA's sum and the store.
#pragma once

#include "../common/params.cuh"
#include "../common/chunk_loads.cuh"
#include "../common/bf16_store.cuh"
#include "../common/split_sums.cuh"
#include "../common/trace.cuh"
#include "layout.cuh"

namespace {

// Stores the first M tokens' rows row_block .. row_block + 127 of y from red (token-major, kWideRowStride apart) as
// bf16, threads tid of `threads`: a warp one token's 128 rows, 4 a thread as one 8-byte store where N % 4 == 0; rows
// past N are never stored.
__device__ __forceinline__ void store_wide_rows(const Params& p, const float* red, int row_block, int tid, int threads) {
  constexpr int kRowVecs = kWideRows / 4;  // float4s a token
  const int vecs = p.M * kRowVecs;
  const bool whole = (p.N & 3) == 0;  // then 4 rows of y are 8-byte aligned
  for (int v = tid; v < vecs; v += threads) {
    const int m = v / kRowVecs, r = 4 * (v % kRowVecs);
    const float4 s = reinterpret_cast<const float4*>(red + m * kWideRowStride)[v % kRowVecs];
    uint16_t* y = p.y + static_cast<size_t>(m) * p.N + row_block + r;
    if (whole && row_block + r + 3 < p.N) {
      *reinterpret_cast<uint2*>(y) = make_uint2(bf16_bits_rn(s.x) | static_cast<uint32_t>(bf16_bits_rn(s.y)) << 16,
                                                bf16_bits_rn(s.z) | static_cast<uint32_t>(bf16_bits_rn(s.w)) << 16);
    } else {
      const float vals[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (row_block + r + i < p.N) y[i] = bf16_bits_rn(vals[i]);
    }
  }
}

// A consumer warp's sums into the sums' tile red (token-major, kWideRowStride apart), group by group: acc[j][4 i + e]
// holds rows (g, g + 8) for e (0, 1) / (2, 3) of the warp's 16, tokens 32 j + 8 i + 2t + (e & 1). The first group
// writes its sums (W12: adds them to the escape warps'), a second adds to them.
template <int KIND, int NB>
__device__ __forceinline__ void add_wide_sums(float* red, const float (&acc)[NB][16], int lane, int warp, bool first) {
  const int g = lane >> 2, t = lane & 3, r0 = warp * 16 + g;
#pragma unroll
  for (int j = 0; j < NB; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float* v = red + (32 * j + 8 * i + 2 * t + (e & 1)) * kWideRowStride + r0 + (e >> 1) * 8;
        if (KIND == kW12 || !first) *v += acc[j][4 * i + e];
        else *v = acc[j][4 * i + e];
      }
}

// Sums n partial tiles in order q = 0 .. n - 1 from 0.f into red (token-major [TOK][128] fp32, kWideRowStride apart;
// the first M tokens), threads tid of THREADS: tile q is red's own sums where q == own (-1: none), else the workspace
// tile tile(q) ([TOK][128] fp32 as float4s of 4 rows). The workspace tiles are copied with cp.async into `spare` (the
// spent ring, spare_bytes, at least one tile), as many as it holds at once, each thread the float4s it sums itself,
// so the copies wait for the L2 once a batch (once for up to 64 tokens and 4 tiles on the W12 ring) with no barrier
// between copy and sum; the same bits whatever order the tiles arrived in. The caller orders the tiles' stores before
// the copies (an acquire of their count, then a barrier).
template <int THREADS, int TOK, typename Tile>
__device__ __forceinline__ void sum_wide_tiles(int M, float* red, Tile tile, int n, int own, unsigned char* spare, int spare_bytes,
                                               int tid) {
  constexpr int kRowVecs = kWideRows / 4;  // float4s a token
  constexpr int kTileVec = TOK * kRowVecs;
  constexpr int kVecs = (kTileVec + THREADS - 1) / THREADS;  // float4s a thread sums at most
  const int vecs = M * kRowVecs;  // the float4s of the first M tokens
  auto red_vec = [&](int v) -> float4& { return reinterpret_cast<float4*>(red + (v / kRowVecs) * kWideRowStride)[v % kRowVecs]; };
  float4* slots = reinterpret_cast<float4*>(spare);
  const int capacity = spare_bytes / (kTileVec * 16);
  float4 sum[kVecs];
#pragma unroll
  for (int u = 0; u < kVecs; ++u) sum[u] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int q0 = 0; q0 < n;) {
    int q1 = q0, taken = 0;  // tiles q0 .. q1 - 1: at most `capacity` other than own
    while (q1 < n && (q1 == own || taken < capacity)) taken += q1++ != own;
    for (int q = q0, slot = 0; q < q1; ++q) {
      if (q == own) continue;
      const float4* src = tile(q);
#pragma unroll
      for (int u = 0; u < kVecs; ++u) {
        const int v = u * THREADS + tid;
        if (v < vecs) cp_async16(slots + slot * kTileVec + v, src + v);
      }
      ++slot;
    }
    cp_async_commit();
    cp_async_wait_all();
    for (int q = q0, slot = 0; q < q1; ++q) {
#pragma unroll
      for (int u = 0; u < kVecs; ++u) {
        const int v = u * THREADS + tid;
        if (v >= vecs) continue;
        const float4 x = q == own ? red_vec(v) : slots[slot * kTileVec + v];
        sum[u].x += x.x, sum[u].y += x.y, sum[u].z += x.z, sum[u].w += x.w;
      }
      slot += q != own;
    }
    q0 = q1;
  }
#pragma unroll
  for (int u = 0; u < kVecs; ++u)
    if (u * THREADS + tid < vecs) red_vec(u * THREADS + tid) = sum[u];
}

// After the K loop of tma_wide_kernel (all THREADS threads): red holds the CTA's sums, token-major [TOK = 32 NB][128
// rows] (kWideRowStride apart; tokens past M are zeros), escapes included. Without K splits the CTA stores the first M
// tokens' rows. With k_splits > 1 it writes the first M tokens of its partial tile [TOK][128] fp32 in `partials`
// (float4s of 4 rows), and one barrier then thread 0's acquire-release add on the row block's counter order those
// stores for the last CTA (the release covers what the CTA's threads stored before the barrier). The last CTA sums the
// tiles in split order (sum_wide_tiles: its own tile read back from red, the others through `spare`, the spent ring
// of `spare_bytes`); then it sets the counter back to 0 and stores the rows (store_wide_rows).
template <int THREADS, int TOK>
__device__ __forceinline__ void finish_wide_row_block(const Params& p, float* red, float* partials, unsigned int* counters, int split,
                                                      unsigned char* spare, int spare_bytes) {
  __shared__ int arrived_last;
  constexpr int kRowVecs = kWideRows / 4;  // float4s a token
  constexpr int kTileVec = TOK * kRowVecs;
  const int M = p.M, tid = threadIdx.x;
  const int vecs = M * kRowVecs;  // the float4s of the first M tokens
  const int row_block = blockIdx.x * kWideRows;
  if (p.k_splits > 1) {
    float4* tiles = reinterpret_cast<float4*>(partials) + static_cast<size_t>(blockIdx.x) * p.k_splits * kTileVec;
    for (int v = tid; v < vecs; v += THREADS)
      __stcg(tiles + static_cast<size_t>(split) * kTileVec + v, reinterpret_cast<const float4*>(red + (v / kRowVecs) * kWideRowStride)[v % kRowVecs]);
    __syncthreads();
    if (tid == 0) {
      wide_trace(kTracePartial);
      const unsigned int before = atomic_add_acq_rel_gpu(counters + blockIdx.x, 1u);
      arrived_last = before == static_cast<unsigned int>(p.k_splits - 1);
      if (arrived_last) counters[blockIdx.x] = 0u;
    }
    __syncthreads();
    if (tid == 0) {
      wide_trace(kTraceCounted);
      wide_trace_value(kTraceMeta, wide_trace_meta(split, arrived_last, p.k_splits));
    }
    if (!arrived_last) return;
    sum_wide_tiles<THREADS, TOK>(
        M, red, [&](int q) -> const float4* { return tiles + static_cast<size_t>(q) * kTileVec; }, p.k_splits, split, spare, spare_bytes,
        tid);
    __syncthreads();
    if (tid == 0) wide_trace(kTraceReduced);
  }
  store_wide_rows(p, red, row_block, tid, THREADS);
}

}  // namespace
