// SPECDEC_WIDE_TRACE, the build-time switch that records a CTA's phases on the global clock.
#pragma once

namespace {

// A build-time switch for timing the wide kernels', the 1-16 token persistent kernel's and the row tiles' phases on the
// GPU's global clock (benchmarks/kernels/wide_trace.py): nvcc -DSPECDEC_WIDE_TRACE=1 makes one thread of each of the
// first kWideTraceCtas CTAs (blockIdx.y * gridDim.x + blockIdx.x) write g_wide_trace[cta][field] at each point (ns;
// the WideTrace fields below); specdec_wide_trace_read copies them out. The products are the untraced build's; the
// records add a store a point and a barrier before the exit.
#ifndef SPECDEC_WIDE_TRACE
#define SPECDEC_WIDE_TRACE 0
#endif
// kTraceStart: after the ring's barriers are set up; kTraceConsumed: warp 0 (group 0) out of its K loop; kTraceRingDone:
// every warp past the K loop; kTraceSummed: the sums' tile complete (escapes and every group's MMAs); kTracePartial: the
// partial tile stored and ordered; kTraceCounted: the row block's counter read; kTraceReduced: the last CTA's sum of
// the splits done; kTraceEnd: the output stored; kTraceMeta: the SM (bits 0-15), the split (16-31), 1 << 32 for the
// last CTA of its row block, k_splits << 40; kTraceEscapes / kTraceGroup1 / kTraceProducer: the escape warp, warp 0
// of the second stage group and the producer out of their loops. The persistent kernels (tma_wide_stream_k_kernel,
// tma_stream_k_kernel) record kTraceStart, kTraceMeta (split 0, k_splits 1), kTraceRingDone (its last segment done),
// kTraceEnd (its owed sums done) and, summed over its run's segments, ns of warp 0's K loops (kTraceSegLoop), of its
// waits there for the CTA's other warps (kTraceSegWait) and of the segments' epilogues (kTraceSegEpilogue: the sums,
// the rows or the partial tile stored, the count); kTraceSegments: the segments (bits 0-15) and how many were partial
// (16-31); tma_stream_k_kernel also kTraceProducer, when its producer has issued the run's last copy, and, summed over
// its segments, ns of its epilogues' sums of the halves' tiles and escapes (kTraceSummed) and of its partial tiles'
// stores with the barrier after them (kTracePartial); of warp 0's griddep_wait before the sums (kTraceCounted); and of
// the sums' loop up to the barrier after it, by the lane 0 of warp 0 (kTraceReduced), of the second half's first warp
// (kTraceGroup1) and of the escape warp (kTraceEscapes): durations there, not clock readings. The row tiles
// (tma_rows_kernel, one CTA a 16-row tile over the whole of K, no split) record kTraceStart, kTraceMeta (split 0,
// last, k_splits 1), kTraceConsumed, kTraceGroup1 (the second stage group's first warp), kTraceEscapes and
// kTraceProducer out of their loops, kTraceRingDone (every warp past the loop), kTraceSummed (row 0's sums done) and
// kTraceEnd (every row stored).
enum WideTrace {
  kTraceStart,
  kTraceConsumed,
  kTraceRingDone,
  kTraceSummed,
  kTracePartial,
  kTraceCounted,
  kTraceReduced,
  kTraceEnd,
  kTraceMeta,
  kTraceEscapes,
  kTraceGroup1,
  kTraceProducer,
  kTraceSegLoop,
  kTraceSegWait,
  kTraceSegEpilogue,
  kTraceSegments,
  kWideTraceFields = 16
};
static_assert(kTraceSegments < kWideTraceFields, "a CTA's trace holds every field");
constexpr int kWideTraceCtas = 4096;
#if SPECDEC_WIDE_TRACE
__device__ unsigned long long g_wide_trace[kWideTraceCtas * kWideTraceFields];
#endif
// Records `value` as this CTA's `field` (traced builds; nothing otherwise).
__device__ __forceinline__ void wide_trace_value(int field, unsigned long long value) {
#if SPECDEC_WIDE_TRACE
  const int cta = blockIdx.y * gridDim.x + blockIdx.x;
  if (cta < kWideTraceCtas) g_wide_trace[cta * kWideTraceFields + field] = value;
#endif
}
// The global clock (ns) in traced builds, 0 otherwise.
__device__ __forceinline__ unsigned long long wide_clock() {
  unsigned long long now = 0;
#if SPECDEC_WIDE_TRACE
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
#endif
  return now;
}
// Records the global clock (ns) as this CTA's `field`.
__device__ __forceinline__ void wide_trace(int field) {
#if SPECDEC_WIDE_TRACE
  wide_trace_value(field, wide_clock());
#endif
}
// kTraceMeta's value: the SM, the split, whether the CTA sums its row block, the row block's K splits.
__device__ __forceinline__ unsigned long long wide_trace_meta(int split, bool last, int k_splits) {
  unsigned int sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  return sm | static_cast<unsigned long long>(split) << 16 | static_cast<unsigned long long>(last) << 32 |
         static_cast<unsigned long long>(k_splits) << 40;
}

}  // namespace
