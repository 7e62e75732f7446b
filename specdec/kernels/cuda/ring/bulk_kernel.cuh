// W12 fed by bulk copies (v5, v6).
#pragma once

#include "../common/params.cuh"
#include "../common/chunk_loads.cuh"
#include "../common/split_sums.cuh"
#include "ring.cuh"
#include "consumers.cuh"

namespace {

// The W12 kernel fed by bulk copies (../README.md, "W12 through a bulk-copy pipeline"): 64-row CTAs of 4 consumer
// warps (one 16-row tile each) and one producer warp. K goes in stages of kBulkStageK weights; a stage in
// shared memory holds, for the CTA's 64 rows, the ae bytes [64][kBulkStageK] and nib bytes [64][kBulkStageK / 2]
// of those k, and x [M][kBulkStageK] (token rows padded by 16 bytes: conflict-free 16-byte loads). The producer
// fills a ring of kBulkStages stages with cp.async.bulk (one copy per plane and row, one per token row; rows
// past N copy row N - 1, never stored), each stage guarded by a full barrier (the producer's arrive with the
// stage's byte count, completed by the copies) and an empty barrier (one arrive per consumer warp once it has
// read the stage). Consumers wait on mbarriers only: no CTA barrier in the loop. K is split over independent
// CTAs as in w12_split_kernel, and the same finish_split_row_block reduces, applies the escapes and stores.
// Needs K % 32 == 0 (every nib row starts 16-byte aligned); the entry point runs w12_split_kernel otherwise.
// PRODUCER_WARPS: 1 (one producer warp issues all of a stage's copies) or kBulkConsumerWarps (producer warp q
// issues the copies of rows 16 q .. 16 q + 15 of both planes and of token rows q and q + 4 of x). A bulk copy
// takes its operands from uniform registers, so the copies of one warp's lanes issue one after another; more
// producer warps issue on more schedulers at once.
template <int PRODUCER_WARPS>
__global__ void __launch_bounds__(bulk_threads(PRODUCER_WARPS), kBulkCtasPerSm)
    w12_bulk_kernel(const Params p, float* partials, unsigned int* counters) {
  constexpr int kBulkThreads = bulk_threads(PRODUCER_WARPS);
  constexpr int kBulkSmemFixed = bulk_smem_fixed(PRODUCER_WARPS);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(8) uint64_t full_bar[kBulkStages];
  __shared__ __align__(8) uint64_t empty_bar[kBulkStages];
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.y;
  const int n_stages = (p.K + kBulkStageK - 1) / kBulkStageK;
  const int s_lo = static_cast<int>((static_cast<long long>(split) * n_stages) / p.k_splits);
  const int s_hi = static_cast<int>((static_cast<long long>(split + 1) * n_stages) / p.k_splits);
  const int n_mine = s_hi - s_lo;
  const int row_block = blockIdx.x * kStreamRows;
  const int stage_bytes = bulk_stage_bytes(M);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kBulkStages) * stage_bytes);
  int* band_ptr = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(red) + kBulkSmemFixed);
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  const int tile0 = (row_block / kEscapeTile) * col_tiles;

  if (tid == 0) init_ring_barriers<kBulkStages>(full_bar, empty_bar, PRODUCER_WARPS, kBulkConsumerWarps);
  // The band's escape offsets, waited for after the loop.
  for (int i = tid; i <= col_tiles; i += kBulkThreads) cp_async4(band_ptr + i, p.esc_ptr + tile0 + i);
  cp_async_commit();
  __syncthreads();

  if (PRODUCER_WARPS > 1 && warp >= kBulkConsumerWarps) {
    // Producer warp q: lanes l < 16 copy the ae row 16 q + l, lanes l >= 16 the nib row 16 q + l - 16; lanes 0 and
    // 1 also token rows q and q + 4 of x where < M. Race-free with the full barrier initialised to PRODUCER_WARPS
    // arrivals: each warp's lane 0 arrives with expect_tx of that warp's bytes, and __syncwarp orders it before
    // any lane's copy of the warp is issued, so every warp's bytes are counted before any of them can complete;
    // the phase completes only once all PRODUCER_WARPS warps have arrived and all their bytes have landed. A
    // warp arrives for the next round of a stage only after its empty barrier, i.e. after that phase completed.
    const int q = warp - kBulkConsumerWarps;
    const uint64_t stream = l2_stream_policy();
    const uint64_t keep = l2_evict_last();
    const size_t K = p.K;
    const bool is_ae = lane < 16;
    const int r = 16 * q + (lane & 15);
    const int row = min(row_block + r, p.N - 1);
    const int x_row = q + 4 * lane;  // lanes 0 and 1
    const bool copies_x = lane < 2 && x_row < M;
    const int x_rows = (q < M) + (q + 4 < M);
    int s = 0;
    uint32_t round = 0;
    for (int it = 0; it < n_mine; ++it) {
      if (round > 0) mbar_wait(smem_addr(&empty_bar[s]), (round - 1) & 1);
      const int k0 = (s_lo + it) * kBulkStageK;
      const int k_len = min(kBulkStageK, p.K - k0);  // a multiple of 32
      const uint32_t full = smem_addr(&full_bar[s]);
      if (lane == 0) mbar_arrive_expect_tx(full, static_cast<uint32_t>(16 * (k_len + k_len / 2) + x_rows * k_len * 2));
      __syncwarp();
      unsigned char* st = smem + static_cast<size_t>(s) * stage_bytes;
      const uint32_t ae_dst = smem_addr(st), nib_dst = smem_addr(st + kStreamRows * kBulkStageK);
      if (is_ae)
        bulk_copy(ae_dst + r * kBulkStageK, p.w + row * K + k0, k_len, full, stream);
      else
        bulk_copy(nib_dst + r * (kBulkStageK / 2), p.nib + row * (K / 2) + k0 / 2, k_len / 2, full, stream);
      if (copies_x)
        bulk_copy(nib_dst + kStreamRows * (kBulkStageK / 2) + x_row * kBulkXRowBytes, p.x + static_cast<size_t>(x_row) * K + k0,
                  k_len * 2, full, keep);
      if (++s == kBulkStages) s = 0, ++round;
    }
  } else if (PRODUCER_WARPS == 1 && warp == kBulkConsumerWarps) {
    // Producer: lane l copies rows l and l + 32 of both planes, lanes < M token row l of x.
    const uint64_t stream = l2_stream_policy();
    const uint64_t keep = l2_evict_last();
    const size_t K = p.K;
    const int rows[2] = {min(row_block + lane, p.N - 1), min(row_block + lane + 32, p.N - 1)};
    int s = 0;
    uint32_t round = 0;
    for (int it = 0; it < n_mine; ++it) {
      if (round > 0) mbar_wait(smem_addr(&empty_bar[s]), (round - 1) & 1);
      const int k0 = (s_lo + it) * kBulkStageK;
      const int k_len = min(kBulkStageK, p.K - k0);  // a multiple of 32
      const uint32_t full = smem_addr(&full_bar[s]);
      if (lane == 0) mbar_arrive_expect_tx(full, static_cast<uint32_t>(kStreamRows * (k_len + k_len / 2) + M * k_len * 2));
      __syncwarp();
      unsigned char* st = smem + static_cast<size_t>(s) * stage_bytes;
      const uint32_t ae_dst = smem_addr(st), nib_dst = smem_addr(st + kStreamRows * kBulkStageK);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = lane + 32 * i;
        bulk_copy(ae_dst + r * kBulkStageK, p.w + rows[i] * K + k0, k_len, full, stream);
        bulk_copy(nib_dst + r * (kBulkStageK / 2), p.nib + rows[i] * (K / 2) + k0 / 2, k_len / 2, full, stream);
      }
      if (lane < M)
        bulk_copy(nib_dst + kStreamRows * (kBulkStageK / 2) + lane * kBulkXRowBytes, p.x + static_cast<size_t>(lane) * K + k0,
                  k_len * 2, full, keep);
      if (++s == kBulkStages) s = 0, ++round;
    }
  } else {
    consume_ring<kBulkXRowBytes>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block, warp, lane, red);
  }
  cp_async_wait_all();
  __syncthreads();
  finish_split_row_block<kBulkThreads>(p, red, band_ptr, partials, counters, split);
}

}  // namespace
