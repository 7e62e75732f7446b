// The wide kernel: 128-row CTAs, K split over independent CTAs.
#pragma once

#include "../common/params.cuh"
#include "../ring/ring.cuh"
#include "../common/ablate.cuh"
#include "../common/programmatic_launch.cuh"
#include "../ring/producer.cuh"
#include "../ring/escape_warp.cuh"
#include "../common/trace.cuh"
#include "layout.cuh"
#include "consumer.cuh"
#include "epilogue.cuh"

namespace {

// Wide calls (../README.md, "Wide calls: wgmma from registers"): 17 to kWideMaxTokens tokens, the tree and two-level
// verifiers' passes. The 1-16 token kernels (ring/) multiply with mma.sync, every warp loading its own copy of x's B
// fragments from shared memory; at 32 tokens they ran at 0.25-0.66x cuBLAS bf16 (benchmarks/NOTES.md). Here a CTA owns
// kWideRows = 128 weight rows: two consumer warpgroups of 64 rows, each issuing wgmma.mma_async m64n32k16 with A, the
// decoded weights, from registers and B, x, read by the tensor cores straight from the ring (a [32 * NB tokens][64 k]
// box a stage, 128-byte swizzled by its tensor map). x is read from shared memory once a warpgroup, not once a warp,
// and through the L2 once for 128 rows (2 M / 192 bytes a W12 weight byte). A warp's A fragment is mma.sync's (rows g
// and g + 8, k 2t.. and 2t + 8..) in natural k order, since x lies in the ring as the tensor map copies it: lane t
// needs the pair (2t, 2t + 1) of a step, which is the (k0, k1) pair of an AE word for even t and the (k2, k3) pair for
// odd t; decode_natural writes decode_exact's two formulas as rotations by lane-dependent amounts. A stage is
// [128 rows][64 k]: ae, for W12 nib, then x at a 1024-byte boundary; K splits over independent CTAs as in
// tma_gemm_kernel, the last CTA of a row block summing the partials in split order (finish_wide_row_block). Each
// warpgroup waits for its MMAs before decoding the next stage (wgmma reads A from its registers until its group
// completes, and the next decode rewrites them); the other warpgroup's decode overlaps them. The ae box lands in the
// 64-byte swizzle (chunk c of row r at c ^ (r / 2 % 4)), so the eight rows of a quarter-warp's AE loads fall in eight
// different banks. Needs K % 64 == 0 and 16-byte aligned planes and x.
// kWideRows weight rows a CTA, stages s_lo .. s_hi - 1 of K (blockIdx.y of p.k_splits slices), 32 * NB token columns:
// warps 0-7 the consumers (two warpgroups), warp 8 the producer (one thread issuing the tensor-map copies), for W12
// warps 9 .. 8 + NB the escape warps (fold_escapes over the CTA's rows and K slice, warp w for tokens 32 w .. 32 w +
// 31, straight into the sums' tile; the consumers add their sums to it after the K loop: one fp32 addition a value,
// the same bits in either order). GROUPS = 2 (one
// CTA an SM, the one-set loop, up to 64 tokens): warps 0-7 and 8-15 are two stage groups over the same 128 rows, the
// first taking the slice's even stages, the second its odd ones, so that four consumer warps a scheduler, not two,
// cover each other's decode chains and MMA waits; the producer and escape warps follow them. The sums' tile gets the
// escape sums, then the first group's sums, then the second's (the same bits for the same plan and GROUPS).
template <int KIND, int NB, bool PIPE, int CTAS, int GROUPS = 1, bool UNROLL = false>
__global__ void __launch_bounds__(wide_threads(KIND, NB, PIPE, GROUPS), CTAS)
    tma_wide_kernel(const Params p, float* partials, unsigned int* counters, const __grid_constant__ CUtensorMap ae_map,
                    const __grid_constant__ CUtensorMap nib_map, const __grid_constant__ CUtensorMap x_map) {
  // With stage groups, a multiple of GROUPS (consume_wide_ring: each slot one group's); the shared memory the plan
  // asks for holds the undivided ring.
  constexpr int kStages = wide_stages(KIND, NB, CTAS) / GROUPS * GROUPS;
  constexpr int kTok = NB * kWideBlockTokens;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  unsigned char* smem =
      smem_raw + ((kWideSwizzleAlign - (smem_addr(smem_raw) & (kWideSwizzleAlign - 1))) & (kWideSwizzleAlign - 1));
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.y;
  const int n_stages = p.K / kWideStageK;
  const int s_lo = static_cast<int>((static_cast<long long>(split) * n_stages) / p.k_splits);
  const int s_hi = static_cast<int>((static_cast<long long>(split + 1) * n_stages) / p.k_splits);
  const int row_block = blockIdx.x * kWideRows;
  const int stage_bytes = wide_stage_bytes(KIND, NB);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kStages) * stage_bytes);  // [kTok][kWideRowStride]
  float* rounds = red + kTok * kWideRowStride;  // the escape warps' rounds

  static_assert(GROUPS == 1 || (CTAS == 1 && !PIPE && NB <= 2), "stage groups: one CTA an SM, the one-set loop, 64 tokens");
  static_assert(!UNROLL || (CTAS == 1 && !PIPE && GROUPS <= 2), "the unrolled loop: one CTA an SM, the one-set loop");
  constexpr int kConsumers = GROUPS * kWideConsumerWarps;
  if (tid == 0) init_ring_barriers<kStages>(full_bar, empty_bar, 1, kWideConsumerWarps);  // a stage: one group's warps
  __syncthreads();
  if (tid == 0) {
    wide_trace(kTraceStart);
    wide_trace_value(kTraceMeta, wide_trace_meta(split, p.k_splits == 1, p.k_splits));
  }
  float acc[NB][16];
  const bool consumer = warp < kConsumers;
  const int group = warp / kWideConsumerWarps, group_warp = warp % kWideConsumerWarps;
  if (warp == kConsumers) {
    if (lane == 0)
      produce_tma_ring<KIND, kStages, kWideRows, kWideStageK>(smem, stage_bytes, wide_weight_bytes(KIND), full_bar, empty_bar, s_lo,
                                                              s_hi - s_lo, row_block, &ae_map, &nib_map, &x_map,
                                                              (SPECDEC_WIDE_ABLATE & 4) == 0);
    if (lane == 0) wide_trace(kTraceProducer);
  } else if (!consumer) {  // W12 only: the Q kernel has no such warps
    if constexpr ((SPECDEC_WIDE_ABLATE & 16) != 0) {
      // the escape warps fold nothing (a timing build: the sums' tile is left as it was)
    } else if constexpr (KIND == kW12 && wide_escape_warps(KIND, NB, PIPE) == 1) {
      fold_escapes<kTok, kWideRows, 1, kWideRowStride, (SPECDEC_WIDE_ABLATE & 32) == 0>(p, row_block, s_lo * kWideStageK,
                                                                                         s_hi * kWideStageK, lane, red, rounds);
    } else if constexpr (KIND == kW12) {
      const int w = warp - kConsumers - 1;  // tokens 32 w .. 32 w + 31
      fold_escapes<kWideBlockTokens, kWideRows, 1, kWideRowStride, (SPECDEC_WIDE_ABLATE & 32) == 0>(
          p, row_block, s_lo * kWideStageK, s_hi * kWideStageK, lane, red + w * kWideBlockTokens * kWideRowStride,
          rounds + w * kWideEscapeRoundFloats, w * kWideBlockTokens);
    }
    if (lane == 0) wide_trace(kTraceEscapes);
  } else {
    if constexpr (UNROLL && GROUPS == 1) {
      consume_wide_ring<KIND, NB, kStages, PIPE, 1, true, 0>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block, group_warp,
                                                             lane, acc);
    } else if constexpr (UNROLL) {  // a copy of the loop for each group's constant slots
      if (group == 0)
        consume_wide_ring<KIND, NB, kStages, PIPE, GROUPS, true, 0>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block,
                                                                    group_warp, lane, acc);
      else
        consume_wide_ring<KIND, NB, kStages, PIPE, GROUPS, true, 1>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block,
                                                                    group_warp, lane, acc);
    } else {
      consume_wide_ring<KIND, NB, kStages, PIPE, GROUPS>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block, group_warp,
                                                         lane, acc, group);
    }
    if (lane == 0 && group_warp == 0) wide_trace(group == 0 ? kTraceConsumed : kTraceGroup1);
  }
  __syncthreads();  // the ring is done; for W12 the escape sums are in red
  if (tid == 0) wide_trace(kTraceRingDone);
  griddep_launch_dependents();
  auto add_sums = [&](bool first) { add_wide_sums<KIND, NB>(red, acc, lane, group_warp, first); };
  if (consumer && group == 0) add_sums(true);
  if constexpr (GROUPS == 2) {
    __syncthreads();
    if (consumer && group == 1) add_sums(false);
  }
  griddep_wait();
  __syncthreads();
  if (tid == 0) wide_trace(kTraceSummed);
  static_assert(kStages * wide_stage_bytes(KIND, NB) >= kWideRows * kTok * 4, "the spent ring holds at least one partial tile");
  if constexpr ((SPECDEC_WIDE_ABLATE & 8) == 0)
    finish_wide_row_block<wide_threads(KIND, NB, PIPE, GROUPS), kTok>(p, red, partials, counters, split, smem, kStages * stage_bytes);
#if SPECDEC_WIDE_TRACE
  __syncthreads();  // a CTA that is not its row block's last returned above with all its threads
  if (tid == 0) wide_trace(kTraceEnd);
#endif
}

}  // namespace
