// W12, Q and bf16 with the weights loaded straight into registers (the v1 entry point of each): 8-warp CTAs over chunks.
//
// Layout of the work. A warp owns a tile of 16 weight rows and walks K in chunks. Inside a chunk the 4 lanes
// of a quad (same lane / 4 = g) read one contiguous piece each of rows g and g + 8: 16 weights for W12 / Q
// (one 16-byte load of ae, one 8-byte load of nib per row), 8 weights for bf16 (one 16-byte load per row),
// so a quad covers 64 contiguous bytes of ae (32 of nib, 64 of bf16) per row and load: whole sectors.
// The decoded bf16x2 words are the A operand of mma.sync m16n8k16 (weight rows = MMA rows), the tokens the
// B operand (n = 8, tokens >= M are zeros). Every weight row uses the same permutation of k inside a chunk,
// so the B fragment is x permuted the same way: lane (g, t) needs x[g, piece t] for the whole chunk, which
// sits contiguously in shared memory (two conflict-free 16-byte loads per chunk for W12 / Q, one for bf16).
//
// A CTA (8 warps) owns rt_per_cta row tiles; its warps split the CTA's K range (a contiguous share each) and add
// their partial sums in shared memory in a fixed order. For small N the K range is also split over the CTAs
// of a thread-block cluster (k_splits <= 8 along gridDim.y): each CTA reduces its share of the rows by
// reading the other CTAs' partials through distributed shared memory, in rank order (deterministic, no
// atomics, no second launch). The CTA that owns a row applies that row's escapes at the end: the plane
// slot holds a signed zero, so the correction is x[m, col] * value in fp32, in the stored order.
#pragma once

#include "../common/params.cuh"
#include "../common/chunk_loads.cuh"
#include "../common/decode.cuh"
#include "../common/band_escapes.cuh"
#include "../common/bf16_store.cuh"

namespace {

template <int KIND, bool VEC16>
__global__ void __launch_bounds__(kThreads, 2) skinny_gemm_kernel(const Params p) {
  using T = Traits<KIND>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int rt = warp % p.rt_per_cta;
  const int warps_per_tile = kWarps / p.rt_per_cta;
  const int wk = warp / p.rt_per_cta;
  const int split = blockIdx.y;
  const int c_lo = static_cast<int>((static_cast<long long>(split) * p.n_chunks) / p.k_splits);
  const int c_hi = static_cast<int>((static_cast<long long>(split + 1) * p.n_chunks) / p.k_splits);
  const int cta_rows = p.rt_per_cta * 16;
  const int row_block = blockIdx.x * cta_rows;

  // x of this CTA's K range, in the order lanes read it: unit ((c * XU + h) * M + g) * 4 + t holds
  // x[g, c * chunk + piece * t + 8 h .. + 8].
  uint4* xs_smem = reinterpret_cast<uint4*>(smem);
  const int n_chunks_cta = c_hi - c_lo;
  const int x_units = n_chunks_cta * T::kXUnits * M * 4;
  for (int u = tid; u < x_units; u += kThreads) {
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
  // [8 warps][16 rows][8 tokens], at the same offset in every CTA of the cluster (read through distributed
  // shared memory by rank), so placed after the largest K share of x, not this CTA's.
  const int max_chunks_cta = (p.n_chunks + p.k_splits - 1) / p.k_splits;
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(max_chunks_cta) * T::kXUnits * M * 4 * 16);
  // W12: the escape offsets of this CTA's 256-row band (col_tiles + 1 of them), for the escape pass.
  int* band_ptr = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(red) + kSmemFixed);
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  const int tile0 = (row_block / kEscapeTile) * col_tiles;
  if constexpr (KIND == kW12)
    for (int i = tid; i <= col_tiles; i += kThreads) cp_async4(band_ptr + i, p.esc_ptr + tile0 + i);
  cp_async_commit();

  const int row_g = min(row_block + rt * 16 + g, p.N - 1);  // rows past N read the last row; never stored
  const int row_h = min(row_block + rt * 16 + g + 8, p.N - 1);
  {
    // While x arrives: ask L2 for this warp's first batch of weight lines.
    const int n_cta_chunks = c_hi - c_lo;
    const int first_chunk = c_lo + (wk * n_cta_chunks) / warps_per_tile;
    const int last_chunk = c_lo + ((wk + 1) * n_cta_chunks) / warps_per_tile;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k0 = (first_chunk + u) * T::kChunk + T::kPiece * t;
      if (first_chunk + u < last_chunk && k0 < p.K) prefetch_chunk<KIND>(p, row_g, row_h, k0);
    }
  }
  uint32_t X0 = 0, X1 = 0;
  if constexpr (KIND == kW12) {
    X0 = static_cast<uint32_t>(p.base[row_g]) << 7;
    X1 = static_cast<uint32_t>(p.base[row_h]) << 7;
  } else if constexpr (KIND == kQ) {
    X0 = (static_cast<uint32_t>(p.base[row_g]) << 7) | 8u;
    X1 = (static_cast<uint32_t>(p.base[row_h]) << 7) | 8u;
  }
  cp_async_wait_all();
  __syncthreads();
  // Tokens >= M read token M - 1: the MMA columns are independent and those outputs are never stored.
  const int g_x = min(g, M - 1);

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const int n_full = p.K / T::kChunk;  // chunks entirely inside K
  // This warp's chunks: a contiguous share [first, last) of the CTA's range.
  const int n_cta = c_hi - c_lo;
  const int first = c_lo + (wk * n_cta) / warps_per_tile;
  const int last = c_lo + ((wk + 1) * n_cta) / warps_per_tile;
  const int full_end = max(first, min(last, n_full));
  const uint4* x_lane = xs_smem + ((first - c_lo) * T::kXUnits * M + g_x) * 4 + t;
  const int x_chunk_stride = T::kXUnits * M * 4;

  auto x_units_of = [&](int i, uint4 (&xs)[2]) {
#pragma unroll
    for (int h = 0; h < T::kXUnits; ++h) xs[h] = x_lane[i * x_chunk_stride + h * M * 4];
    if constexpr (T::kXUnits == 1) xs[1] = make_uint4(0, 0, 0, 0);
  };

  int i = 0;
  const int n_mine_full = full_end - first;
  for (; i + kUnroll <= n_mine_full; i += kUnroll) {
    ChunkRegs<KIND, VEC16> regs[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_chunk<KIND, VEC16, false>(regs[u], p, row_g, row_h, first + i + u, t);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      uint4 xs[2];
      x_units_of(i + u, xs);
      compute_chunk<KIND, VEC16>(acc, regs[u], xs, X0, X1);
    }
  }
  for (; first + i < last; ++i) {
    const int chunk = first + i;
    ChunkRegs<KIND, VEC16> regs;
    if (chunk < n_full)
      load_chunk<KIND, VEC16, false>(regs, p, row_g, row_h, chunk, t);
    else
      load_chunk<KIND, VEC16, true>(regs, p, row_g, row_h, chunk, t);
    uint4 xs[2];
    x_units_of(i, xs);
    compute_chunk<KIND, VEC16>(acc, regs, xs, X0, X1);
  }

  // acc: rows (g, g + 8) of the tile, tokens (2t, 2t + 1). Warp partials -> red[warp], summed per row tile
  // over its warps in warp order into the slot of the tile's first warp (index rt).
  float* mine = red + warp * 128;
  mine[g * 8 + 2 * t] = acc[0];
  mine[g * 8 + 2 * t + 1] = acc[1];
  mine[(g + 8) * 8 + 2 * t] = acc[2];
  mine[(g + 8) * 8 + 2 * t + 1] = acc[3];
  __syncthreads();
  for (int e = tid; e < cta_rows * 8; e += kThreads) {
    const int tile = e / 128, within = e % 128;
    float s = red[tile * 128 + within];
    for (int w = 1; w < warps_per_tile; ++w) s += red[(w * p.rt_per_cta + tile) * 128 + within];
    red[tile * 128 + within] = s;  // warp index tile (wk = 0) holds the CTA's partial of that tile
  }
  cg::cluster_group cluster = cg::this_cluster();
  if (p.k_splits > 1) cluster.sync();
  else __syncthreads();

  // This CTA finishes rows [r_lo, r_hi) of the row block (at most one per thread): sums the k-split partials
  // in rank order, adds the escapes of each row in stored order, rounds to bf16.
  const int r_lo = (split * cta_rows) / p.k_splits;
  const int r_hi = ((split + 1) * cta_rows) / p.k_splits;
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
  if constexpr (KIND == kW12)
    add_band_escapes<kThreads>(p, band_ptr, col_tiles, row_block % kEscapeTile + r_lo, r_hi - r_lo, has_row, rl - r_lo, M,
                               red + kWarps * 128, out);
  if (has_row && row < p.N) store_bf16_row(p, row, M, out);
  if (p.k_splits > 1) cluster.sync();  // the other CTAs' reads of this CTA's partials are done
}

}  // namespace
