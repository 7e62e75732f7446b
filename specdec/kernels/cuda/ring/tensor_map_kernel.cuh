// W12, Q and bf16 fed by tensor-map copies, K split over independent CTAs (W12 v7, Q and bf16 v2).
#pragma once

#include "../common/params.cuh"
#include "../common/split_sums.cuh"
#include "ring.cuh"
#include "../common/ablate.cuh"
#include "consumers.cuh"
#include "tensor_map_layout.cuh"
#include "../common/programmatic_launch.cuh"
#include "producer.cuh"
#include "escape_warp.cuh"

namespace {

// The W12 and Q kernels fed by tensor-map copies (../README.md, "W12 through tensor-map copies"): w12_bulk_kernel's
// ring, consumers and split-K epilogue, with one producer thread issuing 2-D TMA copies per stage (a box of
// [64 rows][kBulkStageK] ae bytes, for W12 one of [64][kBulkStageK / 2] nib bytes, one of [M tokens][kBulkStageK] x
// values) instead of one bulk copy per row and plane. Boxes are described by tensor maps built on the host; the
// parts of a box past N rows or past K read as zeros and count their bytes, so every stage completes
// tma_stage_bytes(KIND, M) bytes. x lands with rows of kTmaXRowBytes (unpadded: the x loads of the two token rows of
// a quarter-warp share banks). KIND kW12: exact, escapes added by the escape warp; kQ: the Q view (ae and bases only,
// no escapes); kBf16: plain bf16 weights, one box of [64 rows][kBulkStageK] bf16 (twice the W12 bytes a stage, so
// the ring keeps tma_stages(kBf16) = 5 stages to leave room for two CTAs per SM). Needs K % 32 == 0 (16-byte nib
// row strides; for bf16 whole 32-weight chunks) and 16-byte aligned planes and x.
template <int KIND, int TOK = kMaxTokens>
__global__ void __launch_bounds__(tma_threads(KIND, TOK), kBulkCtasPerSm)
    tma_gemm_kernel(const Params p, float* partials, unsigned int* counters, const __grid_constant__ CUtensorMap ae_map,
                   const __grid_constant__ CUtensorMap nib_map, const __grid_constant__ CUtensorMap x_map) {
  constexpr int kTmaThreads = tma_threads(KIND, TOK);
  constexpr int kHalves = tma_halves(KIND);
  constexpr int kConsumers = kHalves * kBulkConsumerWarps;
  constexpr int kStages = tma_stages(KIND);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  unsigned char* smem = smem_raw + ((kTmaAlign - (smem_addr(smem_raw) & (kTmaAlign - 1))) & (kTmaAlign - 1));
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.y;
  const int n_stages = (p.K + kBulkStageK - 1) / kBulkStageK;
  const int s_lo = static_cast<int>((static_cast<long long>(split) * n_stages) / p.k_splits);
  const int s_hi = static_cast<int>((static_cast<long long>(split + 1) * n_stages) / p.k_splits);
  const int row_block = blockIdx.x * kStreamRows;
  const int stage_bytes = tma_stage_bytes(KIND, M);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kStages) * stage_bytes);
  float* esc = red + kHalves * kStreamRows * TOK;  // the escape warp's shared memory (fold_escapes)

  if (tid == 0) init_ring_barriers<kStages>(full_bar, empty_bar, 1, kConsumers);
  __syncthreads();

  if (warp == kConsumers) {
    if (lane == 0)
      produce_tma_ring<KIND, kStages, kStreamRows, kBulkStageK>(smem, stage_bytes, tma_stage_bytes(KIND, 0), full_bar, empty_bar, s_lo,
                                                                s_hi - s_lo, row_block, &ae_map, &nib_map, &x_map,
                                                                (SPECDEC_WIDE_ABLATE & 128) == 0);
  } else if (tma_escape_warps(KIND, TOK) == 1 && warp == kConsumers + 1) {
    fold_escapes<TOK>(p, row_block, s_lo * kBulkStageK, min(s_hi * kBulkStageK, p.K), lane, esc);
  } else {
    consume_ring<kTmaXRowBytes, KIND, kStages, TOK, kHalves>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block, warp, lane,
                                                             red);
  }
  __syncthreads();
  griddep_launch_dependents();  // this CTA reads no more weights: a kernel launched after it may start its own
  griddep_wait();               // the epilogue writes the workspace and y: after the kernel before has finished
  if constexpr (kHalves == 2) {  // the first chunks' sums plus the second chunks', in that order
    for (int e = tid; e < kStreamRows * TOK; e += kTmaThreads) red[e] += red[kStreamRows * TOK + e];
    __syncthreads();
  }
  if constexpr (tma_escape_warps(KIND, TOK) == 1) {  // then this slice's escapes
    for (int e = tid; e < kStreamRows * TOK; e += kTmaThreads)
      if (e % TOK < M) red[e] += esc[e];
    __syncthreads();
  }
  if constexpr (tma_epilogue_escapes(KIND, TOK)) {  // the band's escape offsets straight from global memory
    const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
    finish_split_row_block<kTmaThreads, true, TOK>(p, red, p.esc_ptr + (row_block / kEscapeTile) * col_tiles, partials, counters,
                                                   split);
  } else {
    finish_split_row_block<kTmaThreads, false, TOK>(p, red, nullptr, partials, counters, split);
  }
}

}  // namespace
