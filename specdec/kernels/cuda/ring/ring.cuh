// The shared-memory ring: stage sizes, mbarriers, bulk copies and the weights' L2 policy.
#pragma once

#include "../common/params.cuh"

namespace {

constexpr int kBulkStageK = 128;  // weights per row per stage: 2 chunks
constexpr int kBulkStages = 6;
constexpr int kBulkConsumerWarps = kStreamWarps;
__host__ __device__ constexpr int bulk_threads(int producer_warps) { return (kBulkConsumerWarps + producer_warps) * 32; }
constexpr int kBulkXRowBytes = kBulkStageK * 2 + 16;
constexpr int kBulkCtasPerSm = 2;
constexpr int kBulkMinStagesPerCta = 2;
constexpr double kBulkPartialShare = 0.10;
// After the ring: partials [64 rows][8 tokens] fp32, the escape round of bulk_threads(producer_warps) threads, then
// the band's escape offsets.
__host__ __device__ constexpr int bulk_smem_fixed(int producer_warps, int tokens = kMaxTokens) {
  return kStreamRows * tokens * 4 + bulk_threads(producer_warps) * 9 + (bulk_threads(producer_warps) / 32) * 4;
}

__host__ __device__ constexpr int bulk_stage_bytes(int M) {
  return kStreamRows * kBulkStageK + kStreamRows * (kBulkStageK / 2) + M * kBulkXRowBytes;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory; its
// completion counts `bytes` on the barrier. `policy`: an L2 cache policy (createpolicy).
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
// The L2 policy of the weights' loads, which stream through once: evict first (evict-normal measured 1-8 % slower,
// benchmarks/NOTES.md, "The weights' L2 policy and promotion: measured").
__device__ __forceinline__ uint64_t l2_stream_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ uint64_t l2_evict_last() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// A ring's barriers, by one thread: stage s is full after `full_count` arrivals (and their bytes), empty after
// `empty_count`; then made visible to the async proxy (the copies that complete them).
template <int STAGES>
__device__ __forceinline__ void init_ring_barriers(uint64_t* full_bar, uint64_t* empty_bar, uint32_t full_count, uint32_t empty_count) {
  for (int s = 0; s < STAGES; ++s) {
    mbar_init(smem_addr(&full_bar[s]), full_count);
    mbar_init(smem_addr(&empty_bar[s]), empty_count);
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace
