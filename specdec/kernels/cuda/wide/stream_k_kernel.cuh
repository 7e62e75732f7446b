// Persistent wide CTAs over a stream of stages.
#pragma once

#include "../common/params.cuh"
#include "../common/split_sums.cuh"
#include "../ring/ring.cuh"
#include "../common/ablate.cuh"
#include "../common/programmatic_launch.cuh"
#include "../ring/producer.cuh"
#include "../ring/escape_warp.cuh"
#include "../common/trace.cuh"
#include "../ring/stream_k_units.cuh"
#include "../ring/stream_k_kernel.cuh"
#include "layout.cuh"
#include "consumer.cuh"
#include "epilogue.cuh"

namespace {

// The producer of tma_wide_stream_k_kernel (one thread): the run's units u_lo .. u_hi - 1 (unit u: row block u / stages,
// stage u % stages) in order into ring slots 0, 1, ..., STAGES - 1, 0, ... across row blocks, so the ring does not
// drain where a row block ends: each unit's weights' boxes and x's [32 NB][kWideStageK] box, in issue_ring's order.
template <int KIND, int STAGES>
__device__ __forceinline__ void produce_wide_run(unsigned char* smem, int stage_bytes, uint64_t* full_bar, uint64_t* empty_bar,
                                                 int u_lo, int u_hi, int stages, const CUtensorMap* ae_map,
                                                 const CUtensorMap* nib_map, const CUtensorMap* x_map) {
  const uint64_t stream = l2_stream_policy();
  const uint64_t keep = l2_evict_last();
  const uint32_t tx = static_cast<uint32_t>(stage_bytes);
  const int k_end = stages * kWideStageK;
  // the unit's row and column kept as counters: a division a stage would hold the one issuing thread up
  int row = (u_lo / stages) * kWideRows, k0 = (u_lo % stages) * kWideStageK;
  int x_k0 = k0;
  auto weights = [&](int, int slot, uint32_t full) {
    const uint32_t st = smem_addr(smem + static_cast<size_t>(slot) * stage_bytes);
    tma_load_2d(st, ae_map, k0, row, full, stream);
    if constexpr (KIND == kW12) tma_load_2d(st + kWideRows * kWideStageK, nib_map, k0 / 2, row, full, stream);
    k0 += kWideStageK;
    if (k0 == k_end) k0 = 0, row += kWideRows;
  };
  auto x_of = [&](int, int slot, uint32_t full) {
    tma_load_2d(smem_addr(smem + static_cast<size_t>(slot) * stage_bytes) + wide_weight_bytes(KIND), x_map, x_k0, 0, full, keep);
    x_k0 += kWideStageK;
    if (x_k0 == k_end) x_k0 = 0;
  };
  issue_ring<STAGES>(u_hi - u_lo, tx, full_bar, empty_bar, weights, x_of);
}

// The row blocks a persistent wide CTA has counted a piece of (at most two: its run's first segment and its last) and
// its tickets (the counters' values before its counts), in shared memory rather than in every thread's registers (the
// W12 kernels at 96 registers spill without room for them).
struct WideOwed {
  int block[2];
  unsigned int ticket[2];
  int n;
};

// The sums a persistent wide CTA owes after its run (tma_wide_stream_k_kernel), by its EPI epilogue threads: for each
// row block it counted a piece of (ticket: the counter's value before its count, taken by e_tid 0 with an
// acquire-release add, so a last piece's e_tid 0 has acquired every other piece's partial tile), if its piece came
// last, sum every piece's partial tile ([M][128] fp32 at the piece's slot, TOK tokens' room a slot) in piece order from
// 0.f (sum_wide_tiles through the spent ring `spare`), store the rows and set the counter back to 0.
template <int EPI, int TOK>
__device__ __forceinline__ void finish_wide_stream_k_owed(const Params& p, float* red, const float* partials, unsigned int* counters,
                                                          const WideOwed& owed, int stages, int units, int e_tid, StreamKShared& sh,
                                                          unsigned char* spare, int spare_bytes) {
  constexpr int kTileVec = TOK * (kWideRows / 4);
  const int ctas = gridDim.x;
  const float4* tiles = reinterpret_cast<const float4*>(partials);
  for (int i = 0; i < owed.n; ++i) {
    const int block = owed.block[i];
    const int block_lo = block * stages;
    const int first = stream_k_cta_of<int>(block_lo, units, ctas);
    const int n_pieces = stream_k_cta_of<int>(block_lo + stages - 1, units, ctas) - first + 1;
    if (e_tid == 0) {
      sh.arrived_last = owed.ticket[i] == static_cast<unsigned int>(n_pieces - 1);
      if (sh.arrived_last) counters[block] = 0u;  // every piece has arrived: ready for the next launch
    }
    if (e_tid < n_pieces) sh.slot[e_tid] = stream_k_slot<int>(first + e_tid, block_lo, units, ctas);
    epilogue_barrier(EPI);
    if (sh.arrived_last) {
      sum_wide_tiles<EPI, TOK>(
          p.M, red, [&](int q) { return tiles + static_cast<size_t>(sh.slot[q]) * kTileVec; }, n_pieces, -1, spare, spare_bytes, e_tid);
      epilogue_barrier(EPI);
      store_wide_rows(p, red, block * kWideRows, e_tid, EPI);
    }
    epilogue_barrier(EPI);  // red, slot and arrived_last are read before the next block writes them
  }
}

// tma_wide_kernel's ring, consumers and escape warps in persistent CTAs (../README.md, "Persistent wide CTAs"): the
// work of a call is units = 128-row blocks x stages, cut into gridDim.x contiguous runs of equal length, one a CTA
// (stream_k_unit_lo), so the waves of a multi-wave call do not round up. The producer issues the run's units in order
// into one ring (produce_wide_run); every other warp takes the run a segment (the units of one row block) at a time:
// the consumers' K loop (consume_wide_ring from the segment's ring position), the escape warps' fold of its escapes,
// then the epilogue, while the producer already fills the next segment's stages. A row block inside one run is stored
// at once; one cut by CTA boundaries gets each piece's partial tile in the workspace (slot 2 CTA for the run's first
// segment, 2 CTA + 1 for its last), and the piece counted last sums them in piece order after its run
// (finish_wide_stream_k_owed), so the result does not depend on timing and no reduction holds a run's consumers.
// One CTA an SM, the one-set loop, rolled or UNROLLed as tma_wide_kernel's; GROUPS stage groups as tma_wide_kernel's
// (the groups alternate by ring position). The unit arithmetic is 32-bit: the host launches it only where units x
// (CTAs + 1) fits in an int (wide_stream_k_takes).
template <int KIND, int NB, int GROUPS, bool UNROLL>
__global__ void __launch_bounds__(wide_threads(KIND, NB, false, GROUPS), 1)
    tma_wide_stream_k_kernel(const Params p, float* partials, unsigned int* counters, const __grid_constant__ CUtensorMap ae_map,
                             const __grid_constant__ CUtensorMap nib_map, const __grid_constant__ CUtensorMap x_map) {
  constexpr int kStages = wide_stages(KIND, NB, 1) / GROUPS * GROUPS;
  constexpr int kTok = NB * kWideBlockTokens;
  constexpr int kThreads = wide_threads(KIND, NB, false, GROUPS);
  constexpr int kConsumers = GROUPS * kWideConsumerWarps;
  constexpr int kEpilogue = kThreads - 32;  // every warp but the producer's
  constexpr int kRowVecs = kWideRows / 4;
  constexpr int kTileVec = kTok * kRowVecs;  // float4s of a workspace slot
  static_assert(kEpilogue >= kStreamKMaxPieces, "one epilogue thread a piece's slot");
  static_assert(GROUPS == 1 || NB <= 2, "stage groups up to 64 tokens");
  static_assert(kStages * wide_stage_bytes(KIND, NB) >= kWideRows * kTok * 4, "the spent ring holds at least one partial tile");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  __shared__ StreamKShared sh;
  __shared__ WideOwed owed;
  unsigned char* smem =
      smem_raw + ((kWideSwizzleAlign - (smem_addr(smem_raw) & (kWideSwizzleAlign - 1))) & (kWideSwizzleAlign - 1));
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int stages = p.K / kWideStageK;
  const int units = ((p.N + kWideRows - 1) / kWideRows) * stages;
  const int ctas = gridDim.x;
  const int u_lo = stream_k_unit_lo<int>(blockIdx.x, units, ctas);
  const int u_hi = stream_k_unit_lo<int>(blockIdx.x + 1, units, ctas);
  const int stage_bytes = wide_stage_bytes(KIND, NB);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kStages) * stage_bytes);  // [kTok][kWideRowStride]
  float* rounds = red + kTok * kWideRowStride;  // the escape warps' rounds

  if (tid == 0) {
    init_ring_barriers<kStages>(full_bar, empty_bar, 1, kWideConsumerWarps);  // a stage: one group's warps
    owed.n = 0;
  }
  __syncthreads();
  if (tid == 0) {
    wide_trace(kTraceStart);
    wide_trace_value(kTraceMeta, wide_trace_meta(0, false, 1));
  }
  if (warp == kConsumers) {
    if (lane == 0) produce_wide_run<KIND, kStages>(smem, stage_bytes, full_bar, empty_bar, u_lo, u_hi, stages, &ae_map, &nib_map, &x_map);
    griddep_launch_dependents();
    return;
  }
  const bool consumer = warp < kConsumers;
  const int e_tid = consumer ? tid : tid - 32;
  const int group = warp / kWideConsumerWarps, group_warp = warp % kWideConsumerWarps;
  float acc[NB][16];
  auto add_sums = [&](bool first) { add_wide_sums<KIND, NB>(red, acc, lane, group_warp, first); };
  unsigned long long seg_loop = 0, seg_wait = 0, seg_epilogue = 0, seg_mark = 0;  // traced builds' sums (tid 0)
  unsigned int segments = 0, partial_segments = 0;
  int block = u_lo / stages;  // then counted up: one division a run
  for (int u = u_lo; u < u_hi; ++block) {
    const int block_lo = block * stages;
    const int end = min(u_hi, block_lo + stages);
    const int s_lo = u - block_lo, s_hi = end - block_lo;
    const int row_block = block * kWideRows;
    if (SPECDEC_WIDE_TRACE && tid == 0) seg_mark = wide_clock();
    if (consumer) {
      if constexpr (UNROLL && GROUPS == 2) {  // a copy of the loop for each group's constant slots
        if (group == 0)
          consume_wide_ring<KIND, NB, kStages, false, GROUPS, true, 0>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block,
                                                                       group_warp, lane, acc, 0, u - u_lo);
        else
          consume_wide_ring<KIND, NB, kStages, false, GROUPS, true, 1>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block,
                                                                       group_warp, lane, acc, 1, u - u_lo);
      } else {
        consume_wide_ring<KIND, NB, kStages, false, GROUPS, UNROLL, 0>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block,
                                                                       group_warp, lane, acc, group, u - u_lo);
      }
    } else if constexpr (KIND == kW12 && (SPECDEC_WIDE_ABLATE & 16) == 0) {
      const int w = warp - kConsumers - 1;  // tokens 32 w .. 32 w + 31
      fold_escapes<kWideBlockTokens, kWideRows, 1, kWideRowStride, (SPECDEC_WIDE_ABLATE & 32) == 0>(
          p, row_block, s_lo * kWideStageK, s_hi * kWideStageK, lane, red + w * kWideBlockTokens * kWideRowStride,
          rounds + w * kWideEscapeRoundFloats, w * kWideBlockTokens);
    }
    if (end == u_hi) griddep_launch_dependents();  // this CTA reads no more weights
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      const unsigned long long now = wide_clock();
      seg_loop += now - seg_mark;
      seg_mark = now;
    }
    epilogue_barrier(kEpilogue);  // for W12 the escape sums are in red
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      const unsigned long long now = wide_clock();
      seg_wait += now - seg_mark;
      seg_mark = now;
    }
    if (consumer && group == 0) add_sums(true);
    if constexpr (GROUPS == 2) {
      epilogue_barrier(kEpilogue);
      if (consumer && group == 1) add_sums(false);
    }
    const int tid_here = thread_index_here();
    const int e_tid_here = consumer ? tid_here : tid_here - 32;
    griddep_wait();  // the epilogue writes the workspace and y: after the kernel before has finished
    epilogue_barrier(kEpilogue);
    if (s_lo == 0 && s_hi == stages) {  // the block lies in this run: no other piece
      store_wide_rows(p, red, row_block, e_tid_here, kEpilogue);
    } else {
      float4* own = reinterpret_cast<float4*>(partials) + static_cast<size_t>(stream_k_slot<int>(blockIdx.x, block_lo, units, ctas)) * kTileVec;
      for (int v = e_tid_here; v < p.M * kRowVecs; v += kEpilogue)
        __stcg(own + v, reinterpret_cast<const float4*>(red + (v / kRowVecs) * kWideRowStride)[v % kRowVecs]);
      epilogue_barrier(kEpilogue);
      if (e_tid_here == 0) {  // the release covers every thread's partial stored before the barrier (cumulativity)
        owed.ticket[owed.n] = atomic_add_acq_rel_gpu(counters + block, 1u);
        owed.block[owed.n++] = block;
      }
    }
    epilogue_barrier(kEpilogue);  // red is read before the next segment writes it
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      seg_epilogue += wide_clock() - seg_mark;
      ++segments;
      partial_segments += s_lo != 0 || s_hi != stages;
    }
    u = end;
  }
  if (tid == 0) {
    wide_trace(kTraceRingDone);
    wide_trace_value(kTraceSegLoop, seg_loop);
    wide_trace_value(kTraceSegWait, seg_wait);
    wide_trace_value(kTraceSegEpilogue, seg_epilogue);
    wide_trace_value(kTraceSegments, segments | partial_segments << 16);
  }
  // the ring is spent: every stage the producer issued was waited for and consumed
  finish_wide_stream_k_owed<kEpilogue, kTok>(p, red, partials, counters, owed, stages, units, e_tid, sh, smem, kStages * stage_bytes);
#if SPECDEC_WIDE_TRACE
  epilogue_barrier(kEpilogue);  // the end once every thread's sums are stored
  if (tid == 0) wide_trace(kTraceEnd);
#endif
}

}  // namespace
