// Persistent tensor-map CTAs over a stream of stages (W12 v8, Q and bf16 v3).
#pragma once

#include "../common/params.cuh"
#include "../common/bf16_store.cuh"
#include "../common/split_sums.cuh"
#include "ring.cuh"
#include "../common/ablate.cuh"
#include "consumers.cuh"
#include "tensor_map_layout.cuh"
#include "../common/programmatic_launch.cuh"
#include "producer.cuh"
#include "escape_warp.cuh"
#include "../common/trace.cuh"
#include "stream_k_units.cuh"

namespace {

// Persistent CTAs over a stream of stages (../README.md, "Persistent CTAs over a stream of stages"): the work of a call
// is units = row blocks x stages (a unit: one 64-row block's kBulkStageK columns), cut into gridDim.x contiguous runs
// of equal length, one a CTA (stream_k_unit_lo). A CTA's run crosses row blocks: its producer issues every unit of it
// in order into one ring, so the ring does not drain where a row block ends; its consumers take the run a segment
// (the units of one row block) at a time and finish each segment while the producer already fills the next one's
// stages. A row block covered by one segment is stored at once; one cut into pieces by CTA boundaries gets each
// piece's partial in the workspace, and the piece that arrives last sums them in piece order (k order), so the result
// does not depend on timing. A CTA counts its pieces in as it goes and does the sums it turns out to owe after its run,
// so no reduction holds its consumers mid-run. Piece j of a row block is CTA (first CTA of the block) + j; its partial
// goes to slot 2 CTA (the CTA's first segment) or 2 CTA + 1 (its last), so the partials take 2 x gridDim.x tiles.

__device__ __forceinline__ void epilogue_barrier(int threads) { asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory"); }

// Shared memory of a persistent CTA's epilogue (static): the pieces' slots of the block being summed and a flag.
struct StreamKShared {
  int slot[kStreamKMaxPieces];
  int arrived_last;
};

// y rows of `block` from red (thread e_tid < 64: row e_tid), as tma_gemm_kernel's epilogue stores them.
template <int TOK>
__device__ __forceinline__ void store_block_rows(const Params& p, const float* red, int block, int e_tid) {
  const int row = block * kStreamRows + e_tid;
  if (e_tid < kStreamRows && row < p.N) {
    float out[TOK];
#pragma unroll
    for (int m = 0; m < TOK; ++m) out[m] = 0.f;
#pragma unroll
    for (int m = 0; m < TOK; ++m)
      if (m < p.M) out[m] += red[e_tid * TOK + m];
    store_bf16_row<TOK>(p, row, p.M, out);
  }
}

// The sums a CTA owes after its run, by the EPI epilogue threads: for each block it counted a piece of (ticket: the
// counter's value before its count, held by e_tid 0), if its piece came last, sum every piece's partial in piece order
// from 0.f (sum_partial_tiles) and store the rows.
template <int EPI, int TOK>
__device__ __forceinline__ void finish_stream_k_owed(const Params& p, float* red, const float* partials, unsigned int* counters,
                                                     int owed0, unsigned int ticket0, int owed1, unsigned int ticket1, int n_owed,
                                                     int stages, long long units, int e_tid, StreamKShared& sh) {
  const int M = p.M;
  const long long ctas = gridDim.x;
  const int tile_values = kStreamRows * M;
  for (int i = 0; i < n_owed; ++i) {
    const int block = i == 0 ? owed0 : owed1;
    const unsigned int ticket = i == 0 ? ticket0 : ticket1;
    const long long block_lo = static_cast<long long>(block) * stages;
    const int first = stream_k_cta_of<long long>(block_lo, units, ctas);
    const int n_pieces = stream_k_cta_of<long long>(block_lo + stages - 1, units, ctas) - first + 1;
    if (e_tid == 0) {
      sh.arrived_last = ticket == static_cast<unsigned int>(n_pieces - 1);
      if (sh.arrived_last) counters[block] = 0u;  // every piece has arrived: ready for the next launch
    }
    if (e_tid < n_pieces) sh.slot[e_tid] = stream_k_slot<long long>(first + e_tid, block_lo, units, ctas);
    epilogue_barrier(EPI);
    if (sh.arrived_last) {
      // the other pieces' partials: visible through the count's acquire, ordered by the barrier above
      sum_partial_tiles<EPI, TOK>(red, M, n_pieces, e_tid,
                                  [&](int q) { return partials + static_cast<size_t>(sh.slot[q]) * tile_values; });
      epilogue_barrier(EPI);
      store_block_rows<TOK>(p, red, block, e_tid);
    }
    epilogue_barrier(EPI);  // red, slot and arrived_last are read before the next block writes them
  }
}

// tma_gemm_kernel's stages, consumers and escape warp in persistent CTAs (above): gridDim.x CTAs, each a run of
// units. Where the escape warp would not run (tma_epilogue_escapes), the entry point launches tma_gemm_kernel.
template <int KIND, int TOK = kMaxTokens>
__global__ void __launch_bounds__(tma_threads(KIND, TOK), kBulkCtasPerSm)
    tma_stream_k_kernel(const Params p, float* partials, unsigned int* counters, const __grid_constant__ CUtensorMap ae_map,
                        const __grid_constant__ CUtensorMap nib_map, const __grid_constant__ CUtensorMap x_map) {
  constexpr int kTmaThreads = tma_threads(KIND, TOK);
  constexpr int kHalves = tma_halves(KIND);
  constexpr int kConsumers = kHalves * kBulkConsumerWarps;
  constexpr bool kEscapeWarp = tma_escape_warps(KIND, TOK) == 1;
  constexpr int kEpilogue = kTmaThreads - 32;  // every warp but the producer's
  constexpr int kStages = tma_stages(KIND);
  static_assert(!tma_epilogue_escapes(KIND, TOK), "the persistent kernel adds W12 escapes through the escape warp only");
  static_assert(kEpilogue >= kStreamKMaxPieces, "one epilogue thread a piece's slot");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  __shared__ StreamKShared sh;
  unsigned char* smem = smem_raw + ((kTmaAlign - (smem_addr(smem_raw) & (kTmaAlign - 1))) & (kTmaAlign - 1));
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int stages = (p.K + kBulkStageK - 1) / kBulkStageK;
  const long long units = static_cast<long long>((p.N + kStreamRows - 1) / kStreamRows) * stages;
  const long long u_lo = stream_k_unit_lo<long long>(blockIdx.x, units, gridDim.x);
  const long long u_hi = stream_k_unit_lo<long long>(blockIdx.x + 1, units, gridDim.x);
  const int stage_bytes = tma_stage_bytes(KIND, p.M);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kStages) * stage_bytes);
  float* esc = red + kHalves * kStreamRows * TOK;

  if (tid == 0) init_ring_barriers<kStages>(full_bar, empty_bar, 1, kConsumers);
  __syncthreads();
#if SPECDEC_WIDE_TRACE
  if (tid == 0) {
    wide_trace(kTraceStart);
    wide_trace_value(kTraceMeta, wide_trace_meta(0, false, 1));
  }
#endif

  if (warp == kConsumers) {
    if (lane == 0) {
      // As tma_gemm_kernel's producer, over the run's units (row block `row`, stage `k0` kept as counters): the first
      // kStages units' weights before griddep_wait, their x after it.
      const uint64_t stream = l2_stream_policy();
      const uint64_t keep = l2_evict_last();
      constexpr bool kWithX = (SPECDEC_WIDE_ABLATE & 128) == 0;
      const uint32_t tx = static_cast<uint32_t>(kWithX ? stage_bytes : tma_stage_bytes(KIND, 0));
      const int n = static_cast<int>(u_hi - u_lo);
      const int first = min(n, kStages);
      const int k_end = stages * kBulkStageK;
      int row = static_cast<int>(u_lo / stages) * kStreamRows, k0 = static_cast<int>(u_lo % stages) * kBulkStageK;
      int x_k0 = k0;
      auto next = [&](int& r, int& k) {
        k += kBulkStageK;
        if (k == k_end) k = 0, r += kStreamRows;
      };
      for (int it = 0; it < first; ++it) {
        const uint32_t full = smem_addr(&full_bar[it]);
        const uint32_t st = smem_addr(smem + static_cast<size_t>(it) * stage_bytes);
        mbar_arrive_expect_tx(full, tx);
        tma_load_2d(st, &ae_map, k0, row, full, stream);
        if constexpr (KIND == kW12) tma_load_2d(st + kStreamRows * kBulkStageK, &nib_map, k0 / 2, row, full, stream);
        next(row, k0);
      }
      griddep_wait();
      int x_row = 0;
      for (int it = 0; it < first; ++it) {
        const uint32_t st = smem_addr(smem + static_cast<size_t>(it) * stage_bytes);
        if constexpr (kWithX) tma_load_2d(st + tma_stage_bytes(KIND, 0), &x_map, x_k0, 0, smem_addr(&full_bar[it]), keep);
        next(x_row, x_k0);
      }
      int s = first % kStages;
      uint32_t round = first == kStages ? 1u : 0u;
      for (int it = first; it < n; ++it) {
        mbar_wait(smem_addr(&empty_bar[s]), (round - 1) & 1);
        const uint32_t full = smem_addr(&full_bar[s]);
        const uint32_t st = smem_addr(smem + static_cast<size_t>(s) * stage_bytes);
        mbar_arrive_expect_tx(full, tx);
        tma_load_2d(st, &ae_map, k0, row, full, stream);
        if constexpr (KIND == kW12) tma_load_2d(st + kStreamRows * kBulkStageK, &nib_map, k0 / 2, row, full, stream);
        if constexpr (kWithX) tma_load_2d(st + tma_stage_bytes(KIND, 0), &x_map, k0, 0, full, keep);
        next(row, k0);
        if (++s == kStages) s = 0, ++round;
      }
      wide_trace(kTraceProducer);
    }
    griddep_launch_dependents();
    return;
  }
  const int M = p.M;
  const long long ctas = gridDim.x;
  const int e_tid = warp < kConsumers ? tid : tid - 32;
  int owed0 = 0, owed1 = 0;  // the blocks this run has pieces of (at most two: its first segment and its last)
  unsigned int ticket0 = 0u, ticket1 = 0u;
  int n_owed = 0;
  int slot = 0;
  uint32_t round = 0;
  unsigned long long seg_loop = 0, seg_wait = 0, seg_epilogue = 0, seg_mark = 0;  // traced builds' sums (tid 0)
  unsigned long long epi_sums = 0, epi_store = 0, epi_mark = 0;  // the epilogues' parts
  unsigned long long own_sums = 0, own_mark = 0, acquire = 0;     // each warp's lane 0: its own part of the sums
  unsigned int segments = 0, partial_segments = 0;
  for (long long u = u_lo; u < u_hi;) {
    const int block = static_cast<int>(u / stages);
    const long long block_lo = static_cast<long long>(block) * stages;
    const long long end = min(u_hi, block_lo + stages);
    const int s_lo = static_cast<int>(u - block_lo), s_hi = static_cast<int>(end - block_lo);
    if (SPECDEC_WIDE_TRACE && tid == 0) seg_mark = wide_clock();
    if (kEscapeWarp && warp == kConsumers + 1)
      fold_escapes<TOK>(p, block * kStreamRows, s_lo * kBulkStageK, min(s_hi * kBulkStageK, p.K), lane, esc);
    else
      consume_segment<kTmaXRowBytes, KIND, kStages, TOK, kHalves>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi,
                                                                  block * kStreamRows, warp, lane, red, slot, round);
    if (end == u_hi) griddep_launch_dependents();  // this CTA reads no more weights
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      const unsigned long long now = wide_clock();
      seg_loop += now - seg_mark;
      seg_mark = now;
    }
    epilogue_barrier(kEpilogue);
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      const unsigned long long now = wide_clock();
      seg_wait += now - seg_mark;
      seg_mark = now;
    }
    if (SPECDEC_WIDE_TRACE && lane == 0) own_mark = wide_clock();
    griddep_wait();  // the epilogue writes the workspace and y: after the kernel before has finished
    if (SPECDEC_WIDE_TRACE && tid == 0) acquire += wide_clock() - own_mark;
    if constexpr (kHalves == 2 || kEscapeWarp) {  // the halves' tiles, then this segment's escapes, as tma_gemm_kernel
      for (int e = e_tid; e < ((SPECDEC_WIDE_ABLATE & 512) == 0 ? kStreamRows * TOK : 0); e += kEpilogue) {
        float v = red[e];
        if constexpr (kHalves == 2) v += red[kStreamRows * TOK + e];
        if constexpr (kEscapeWarp) {
          if (e % TOK < M) v += esc[e];
        }
        red[e] = v;
      }
      if (SPECDEC_WIDE_TRACE && lane == 0) own_sums += wide_clock() - own_mark;
      epilogue_barrier(kEpilogue);
    }
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      epi_mark = wide_clock();
      epi_sums += epi_mark - seg_mark;
    }
    const bool whole = s_lo == 0 && s_hi == stages;  // the block lies in this run: no other piece
    if (whole) {
      store_block_rows<TOK>(p, red, block, e_tid);
    } else {
      const int tile_values = kStreamRows * M;
      float* own = partials + static_cast<size_t>(stream_k_slot<long long>(blockIdx.x, block_lo, units, ctas)) * tile_values;
      for (int e = e_tid; e < tile_values; e += kEpilogue) own[e] = red[(e / M) * TOK + e % M];
      epilogue_barrier(kEpilogue);
      if (SPECDEC_WIDE_TRACE && tid == 0) {
        const unsigned long long now = wide_clock();
        epi_store += now - epi_mark;
        epi_mark = now;
      }
      if (e_tid == 0) {  // the barrier orders every thread's partial before this release (cumulativity)
        const unsigned int t = atomic_add_acq_rel_gpu(counters + block, 1u);
        if (n_owed == 0) ticket0 = t;
        else ticket1 = t;
      }
      if (n_owed == 0) owed0 = block;
      else owed1 = block;
      ++n_owed;
    }
    epilogue_barrier(kEpilogue);  // red is read before the next segment writes it
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      seg_epilogue += wide_clock() - seg_mark;
      ++segments;
      partial_segments += whole ? 0u : 1u;
    }
    u = end;
  }
#if SPECDEC_WIDE_TRACE
  if (tid == 0) {
    wide_trace(kTraceRingDone);
    wide_trace_value(kTraceSummed, epi_sums);
    wide_trace_value(kTracePartial, epi_store);
    wide_trace_value(kTraceSegLoop, seg_loop);
    wide_trace_value(kTraceSegWait, seg_wait);
    wide_trace_value(kTraceSegEpilogue, seg_epilogue);
    wide_trace_value(kTraceSegments, segments | partial_segments << 16);
    wide_trace_value(kTraceCounted, acquire);
    wide_trace_value(kTraceReduced, own_sums);
  }
  if (kHalves == 2 && tid == kBulkConsumerWarps * 32) wide_trace_value(kTraceGroup1, own_sums);
  if (kEscapeWarp && tid == (kConsumers + 1) * 32) wide_trace_value(kTraceEscapes, own_sums);
#endif
  finish_stream_k_owed<kEpilogue, TOK>(p, red, partials, counters, owed0, ticket0, owed1, ticket1, n_owed, stages, units, e_tid, sh);
#if SPECDEC_WIDE_TRACE
  epilogue_barrier(kEpilogue);  // the end once every thread's sums are stored
  if (tid == 0) wide_trace(kTraceEnd);
#endif
}

}  // namespace
