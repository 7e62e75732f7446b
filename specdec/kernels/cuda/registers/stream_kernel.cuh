// W12 without barriers in its K loop (v3): weights streamed through a ring of registers, K split in clusters.
#pragma once

#include "../common/params.cuh"
#include "../common/chunk_loads.cuh"
#include "../common/decode.cuh"
#include "../common/band_escapes.cuh"
#include "../common/bf16_store.cuh"

namespace {

// The W12 kernel without barriers in its K loop (../README.md, "W12 without barriers in the K loop").
// A CTA of 4 warps owns 64 rows (one 16-row tile per warp) and one K slice; every warp walks the whole slice
// for its tile, so no partials are combined inside the CTA. The slice's x is staged in shared memory once,
// after the first weight loads are issued; the loop keeps kStreamDepth chunks of loads in flight per lane
// (a ring of registers: chunk i + depth is requested right after chunk i is multiplied). K splits are the
// CTAs of a cluster (gridDim.y); after the loop each CTA reduces its share of the rows over the cluster's
// partials in rank order through distributed shared memory and applies those rows' escapes.
constexpr int kStreamDepth = 3;
constexpr int kStreamMaxSplits = 16;          // non-portable cluster size on sm_90
constexpr int kStreamXSliceMax = 48 * 1024;   // bytes of x per CTA
constexpr int kStreamMinChunksPerWarp = 4;
constexpr int kStreamCtasPerSm = 7;           // by registers (<= 72 a thread)
// Partials [64 rows][8 tokens] fp32, then the escape round: (col, bits) int2 and row byte per thread, counts.
constexpr int kStreamSmemFixed = kStreamRows * 8 * 4 + kStreamThreads * 9 + kStreamWarps * 4;

// Shared memory of the streaming kernels: x of the largest K slice, then the partials [64 rows][8 tokens] (at
// the same offset in every CTA of a launch), then the escape round, then the band's escape offsets.
__device__ __forceinline__ float* stream_partials(unsigned char* smem, const Params& p) {
  const int max_chunks_cta = (p.n_chunks + p.k_splits - 1) / p.k_splits;
  return reinterpret_cast<float*>(smem + static_cast<size_t>(max_chunks_cta) * Traits<kW12>::kXUnits * p.M * 4 * 16);
}
__device__ __forceinline__ int* stream_band_ptr(float* partials) {
  return reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(partials) + kStreamSmemFixed);
}

// Prologue and K loop of the streaming kernels for chunks [c_lo, c_hi) of the 64-row block at row_block: the
// first kStreamDepth chunks' loads go out, x of the slice and the band's escape offsets are staged (cp.async,
// then the one barrier), and the loop keeps kStreamDepth chunks of loads in flight with no barrier.
// acc: rows (g, g + 8) of the warp's tile, tokens (2t, 2t + 1), summed over the slice in k order.
template <bool VEC16>
__device__ __forceinline__ void stream_k_slice(const Params& p, int c_lo, int c_hi, int row_block, unsigned char* smem,
                                               int* band_ptr, float (&acc)[4]) {
  using T = Traits<kW12>;
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int n_mine = c_hi - c_lo;
  const int row_g = min(row_block + warp * 16 + g, p.N - 1);  // rows past N read the last row; never stored
  const int row_h = min(row_block + warp * 16 + g + 8, p.N - 1);

  // The first chunks' loads go out before anything waits.
  ChunkRegs<kW12, VEC16> ring[kStreamDepth];
#pragma unroll
  for (int u = 0; u < kStreamDepth; ++u)
    if (u < n_mine) load_chunk<kW12, VEC16, true>(ring[u], p, row_g, row_h, c_lo + u, t);

  // x of the slice in lane order (unit ((c * XU + h) * M + g) * 4 + t = x[g, c * chunk + piece * t + 8 h ..]),
  // and the escape offsets of the CTA's 256-row band.
  uint4* xs_smem = reinterpret_cast<uint4*>(smem);
  const int x_units = n_mine * T::kXUnits * M * 4;
  for (int u = tid; u < x_units; u += kStreamThreads) {
    const int ut = u & 3;
    const int ug = (u >> 2) % M;
    const int uh = (u / (4 * M)) % T::kXUnits;
    const int uc = u / (4 * M * T::kXUnits);
    const int k = (c_lo + uc) * T::kChunk + T::kPiece * ut + 8 * uh;
    if (k < p.K)
      cp_async16(xs_smem + u, p.x + static_cast<size_t>(ug) * p.K + k);
    else
      xs_smem[u] = make_uint4(0, 0, 0, 0);
  }
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  const int tile0 = (row_block / kEscapeTile) * col_tiles;
  for (int i = tid; i <= col_tiles; i += kStreamThreads) cp_async4(band_ptr + i, p.esc_ptr + tile0 + i);
  cp_async_commit();
  const uint32_t X0 = static_cast<uint32_t>(p.base[row_g]) << 7;
  const uint32_t X1 = static_cast<uint32_t>(p.base[row_h]) << 7;
  cp_async_wait_all();
  __syncthreads();

  const int g_x = min(g, M - 1);  // tokens >= M read token M - 1; those outputs are never stored
  const uint4* x_lane = xs_smem + g_x * 4 + t;
  const int x_chunk_stride = T::kXUnits * M * 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) acc[j] = 0.f;
  auto x_units_of = [&](int i, uint4 (&xs)[2]) {
    xs[0] = x_lane[i * x_chunk_stride];
    xs[1] = x_lane[i * x_chunk_stride + M * 4];
  };
  // Steady state: every slot's next chunk exists and lies inside K (no checks, no branches in the body).
  const int n_full_mine = min(c_hi, p.K / T::kChunk) - c_lo;
  int i = 0;
  for (; i + 2 * kStreamDepth <= n_full_mine; i += kStreamDepth) {
#pragma unroll
    for (int u = 0; u < kStreamDepth; ++u) {
      uint4 xs[2];
      x_units_of(i + u, xs);
      compute_chunk<kW12, VEC16>(acc, ring[u], xs, X0, X1);
      load_chunk<kW12, VEC16, false>(ring[u], p, row_g, row_h, c_lo + i + u + kStreamDepth, t);
    }
  }
  for (; i < n_mine; i += kStreamDepth) {
#pragma unroll
    for (int u = 0; u < kStreamDepth; ++u) {
      if (i + u < n_mine) {
        uint4 xs[2];
        x_units_of(i + u, xs);
        compute_chunk<kW12, VEC16>(acc, ring[u], xs, X0, X1);
        if (i + u + kStreamDepth < n_mine) load_chunk<kW12, VEC16, true>(ring[u], p, row_g, row_h, c_lo + i + u + kStreamDepth, t);
      }
    }
  }
}

template <bool VEC16>
__global__ void __launch_bounds__(kStreamThreads, kStreamCtasPerSm) w12_stream_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int split = blockIdx.y;
  const int c_lo = static_cast<int>((static_cast<long long>(split) * p.n_chunks) / p.k_splits);
  const int c_hi = static_cast<int>((static_cast<long long>(split + 1) * p.n_chunks) / p.k_splits);
  const int row_block = blockIdx.x * kStreamRows;
  float* red = stream_partials(smem, p);  // read by rank through DSMEM: the same offset in every CTA
  int* band_ptr = stream_band_ptr(red);
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  float acc[4];
  stream_k_slice<VEC16>(p, c_lo, c_hi, row_block, smem, band_ptr, acc);

  // acc: rows (g, g + 8) of the warp's tile, tokens (2t, 2t + 1) -> red[row][token].
  float* mine = red + warp * 16 * 8;
  mine[g * 8 + 2 * t] = acc[0];
  mine[g * 8 + 2 * t + 1] = acc[1];
  mine[(g + 8) * 8 + 2 * t] = acc[2];
  mine[(g + 8) * 8 + 2 * t + 1] = acc[3];
  cg::cluster_group cluster = cg::this_cluster();
  if (p.k_splits > 1) cluster.sync();
  else __syncthreads();

  // Rows [r_lo, r_hi) of the block are this CTA's: K-split partials in rank order, then escapes in stored order.
  const int r_lo = (split * kStreamRows) / p.k_splits;
  const int r_hi = ((split + 1) * kStreamRows) / p.k_splits;
  const int rl = r_lo + tid;
  const bool has_row = rl < r_hi;
  const int row = row_block + rl;
  float out[kMaxTokens];
#pragma unroll
  for (int m = 0; m < kMaxTokens; ++m) out[m] = 0.f;
  if (has_row) {
    for (int q = 0; q < p.k_splits; ++q) {
      const float* part = red;
      if (p.k_splits > 1) part = cluster.map_shared_rank(red, q);
#pragma unroll
      for (int m = 0; m < kMaxTokens; ++m)
        if (m < M) out[m] += part[rl * 8 + m];
    }
  }
  add_band_escapes<kStreamThreads>(p, band_ptr, col_tiles, row_block % kEscapeTile + r_lo, r_hi - r_lo, has_row, rl - r_lo, M,
                                   red + kStreamRows * 8, out);
  if (has_row && row < p.N) store_bf16_row(p, row, M, out);
  if (p.k_splits > 1) cluster.sync();  // the other CTAs' reads of this CTA's partials are done
}

}  // namespace
