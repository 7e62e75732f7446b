// Row-tile CTAs over the whole of K (W12 v9, Q and bf16 v4).
#pragma once

#include "../common/params.cuh"
#include "../common/bf16_store.cuh"
#include "ring.cuh"
#include "../common/ablate.cuh"
#include "consumers.cuh"
#include "tensor_map_layout.cuh"
#include "../common/programmatic_launch.cuh"
#include "producer.cuh"
#include "escape_warp.cuh"
#include "../common/trace.cuh"

namespace {

// One row tile a CTA over the whole of K (../README.md, "Row-tile CTAs over the whole of K"): a CTA owns kRowTile = 16
// weight rows and reads every k of them, so no partial sum leaves the CTA (no workspace, no counters, no reduction
// launch or last-CTA pass) and a one-wave call has 4-6x as many CTAs as 64-row blocks. The ring of tma_gemm_kernel
// with stages of [16 rows][kRowStageK] weights (a box of 256 bytes or bf16 values a row: the largest a tensor map
// copies), rows_stages(TOK) of them; kRowGroups consumer warps each take one 64-weight chunk of every stage (two of
// 32 for bf16) for all 16 rows, and their sums meet in shared memory in group order. W12 CTAs have an escape warp
// (fold_escapes over the CTA's 16 rows and all of K). Needs K % 32 == 0 and 16-byte aligned planes and x.
// STAGE_GROUPS = 2 doubles the consumers: warps 0-3 take the even stages, 4-7 the odd ones (each its own four tiles of
// sums, added after the first four), so two stages are decoded and multiplied at once; for Q-view calls of at most
// kRowStageGroupCtas CTAs an SM, where the row tiles leave an SM few warps (../README.md, "Two stage groups").
constexpr int kRowTile = 16;
constexpr int kRowStageK = 256;
constexpr int kRowGroups = kRowStageK / 64;
constexpr int kRowStageGroupCtas = 3;
#ifndef SPECDEC_ROWS_STAGES16
// Stages of the row tiles at 9-16 tokens: 4 keeps 3 W12 or bf16 CTAs an SM, 3 keeps 4 (faster in the 16-row verify
// step with programmatic launch off or for the GEMMs only, slower with every kernel launched programmatically, under
// a launch bound of 4 or 5: benchmarks/NOTES.md, "Three stages at 9-16 tokens under a launch bound of 5: measured").
#define SPECDEC_ROWS_STAGES16 4
#endif
__host__ __device__ constexpr int rows_stages(int tok) { return tok > kMaxTokens ? SPECDEC_ROWS_STAGES16 : 6; }
#ifndef SPECDEC_ROWS_BOUND16
// The launch bound of the row tiles at 9-16 tokens (CTAs an SM the registers allow): 5 (W12 59-64 registers a thread,
// Q and bf16 59-71; no spills, the W12 loop as long as under 4), where 4 let ptxas take 72-79. On an H100 the bound of 5
// made the W12 16-token calls up to 2 % faster cold and the W12 16-row verify step ~0.5 % faster (benchmarks/NOTES.md,
// "Three stages at 9-16 tokens under a launch bound of 5: measured").
#define SPECDEC_ROWS_BOUND16 5
#endif
// CTAs an SM the registers allow (the launch bound): 5 for one MMA n-tile of tokens (<= 68 registers a thread),
// SPECDEC_ROWS_BOUND16 for two, kRowStageGroupCtas with two stage groups (the Q view's: <= 61 registers); shared memory
// allows 2-7 by M and kind.
__host__ __device__ constexpr int rows_ctas_per_sm(int tok, int stage_groups = 1) {
  return stage_groups > 1 ? kRowStageGroupCtas : tok > kMaxTokens ? SPECDEC_ROWS_BOUND16 : 5;
}
__host__ __device__ constexpr int rows_weight_bytes(int kind) {
  return kRowTile * kRowStageK * (kind == kBf16 ? 2 : 1) + (kind == kW12 ? kRowTile * (kRowStageK / 2) : 0);
}
__host__ __device__ constexpr int rows_stage_bytes(int kind, int M) { return rows_weight_bytes(kind) + M * kRowStageK * 2; }
__host__ __device__ constexpr int rows_threads(int kind, int stage_groups = 1) {
  return (kRowGroups * stage_groups + 1 + (kind == kW12 ? 1 : 0)) * 32;
}
// After the stages: a [16 rows][TOK] fp32 tile a consumer warp, then for W12 the escape warp's sums and round.
__host__ __device__ constexpr int rows_smem_fixed(int kind, int tok, int stage_groups = 1) {
  return kRowGroups * stage_groups * kRowTile * tok * 4 + (kind == kW12 ? tma_escape_bytes(tok, kRowTile) : 0);
}

#ifndef SPECDEC_ROWS_OPAQUE_BASE
// 1 passes the row-tile kernel's aligned shared-memory offset through an empty asm, so that nvcc cannot fold it, with
// the constant offsets after it, into expressions of the module's one `smem_raw` symbol. Folded, those expressions
// are shared between kernels: a change to the 1-8 token W12 row tiles (the lane offsets of consumers.cuh) then moves
// the 16-token ones' code too, and made the 16-row verify step 1.1 % slower on an H100; opaque, the 16-token kernels'
// binary does not move (benchmarks/NOTES.md, "The row tiles' opaque base and the lane offsets at 1-8 tokens:
// measured").
// -DSPECDEC_ROWS_OPAQUE_BASE=0 lets nvcc fold it.
#define SPECDEC_ROWS_OPAQUE_BASE 1
#endif

template <int KIND, int TOK = kMaxTokens, int STAGE_GROUPS = 1>
__global__ void __launch_bounds__(rows_threads(KIND, STAGE_GROUPS), rows_ctas_per_sm(TOK, STAGE_GROUPS))
    tma_rows_kernel(const Params p, const __grid_constant__ CUtensorMap ae_map, const __grid_constant__ CUtensorMap nib_map,
                    const __grid_constant__ CUtensorMap x_map) {
  constexpr int kStages = rows_stages(TOK);
  constexpr int kConsumers = kRowGroups * STAGE_GROUPS;
  constexpr int kEscapeWarp = KIND == kW12 ? 1 : 0;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  int smem_pad = (kTmaAlign - (smem_addr(smem_raw) & (kTmaAlign - 1))) & (kTmaAlign - 1);
  if constexpr (SPECDEC_ROWS_OPAQUE_BASE != 0) keep_in_registers(smem_pad);
  unsigned char* smem = smem_raw + smem_pad;
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int n_stages = (p.K + kRowStageK - 1) / kRowStageK;
  const int row_block = blockIdx.x * kRowTile;
  const int stage_bytes = rows_stage_bytes(KIND, M);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kStages) * stage_bytes);
  float* esc = red + kConsumers * kRowTile * TOK;  // the escape warp's shared memory (fold_escapes)

  if (tid == 0) init_ring_barriers<kStages>(full_bar, empty_bar, 1, kRowGroups);
  __syncthreads();
#if SPECDEC_WIDE_TRACE
  if (tid == 0) {
    wide_trace(kTraceStart);
    wide_trace_value(kTraceMeta, wide_trace_meta(0, true, 1));
  }
#endif

  if (warp == kConsumers) {
    if (lane == 0) {
      produce_tma_ring<KIND, kStages, kRowTile, kRowStageK>(smem, stage_bytes, rows_weight_bytes(KIND), full_bar, empty_bar, 0, n_stages,
                                                            row_block, &ae_map, &nib_map, &x_map, (SPECDEC_WIDE_ABLATE & 64) == 0);
      wide_trace(kTraceProducer);
    }
  } else if (kEscapeWarp == 1 && warp == kConsumers + 1) {
    fold_escapes<TOK, kRowTile>(p, row_block, 0, p.K, lane, esc);
    if (lane == 0) wide_trace(kTraceEscapes);
  } else if constexpr (STAGE_GROUPS == 1) {
    consume_ring<kRowStageK * 2, KIND, kStages, TOK, kRowGroups, kRowTile, kRowStageK>(p, smem, stage_bytes, full_bar, empty_bar, 0,
                                                                                       n_stages, row_block, warp, lane, red);
    if (tid == 0) wide_trace(kTraceConsumed);
  } else {
    const int group = warp / kRowGroups;  // its stages: group, group + STAGE_GROUPS, ...; its chunk: warp % kRowGroups
    consume_ring<kRowStageK * 2, KIND, kStages, TOK, kRowGroups, kRowTile, kRowStageK, STAGE_GROUPS>(
        p, smem, stage_bytes, full_bar, empty_bar, 0, n_stages, row_block, warp % kRowGroups, lane,
        red + group * kRowGroups * kRowTile * TOK, group);
    if (tid == 0) wide_trace(kTraceConsumed);
    if (lane == 0 && warp == kRowGroups) wide_trace(kTraceGroup1);
  }
  __syncthreads();
  if (tid == 0) wide_trace(kTraceRingDone);
  griddep_launch_dependents();  // this CTA reads no more weights: a kernel launched after it may start its own
  griddep_wait();               // y is written after the kernel before has finished
  // Thread r < 16 finishes row r: 0.f + the consumer warps' sums in warp order (a fixed order), then the escapes, then bf16.
  const int row = row_block + tid;
  if (tid < kRowTile && row < p.N) {
    float out[TOK];
#pragma unroll
    for (int m = 0; m < TOK; ++m) {
      out[m] = 0.f;
#pragma unroll
      for (int h = 0; h < kConsumers; ++h) out[m] += red[(h * kRowTile + tid) * TOK + m];
      if constexpr (kEscapeWarp == 1) out[m] += esc[tid * TOK + m];
    }
    if (tid == 0) wide_trace(kTraceSummed);
    store_bf16_row<TOK>(p, row, M, out);
  }
#if SPECDEC_WIDE_TRACE
  __syncthreads();  // the end once every row is stored
  if (tid == 0) wide_trace(kTraceEnd);
#endif
}

}  // namespace
