// The producer thread of a tensor-map ring: its copies and the order it issues them in.
#pragma once

#include "../common/params.cuh"
#include "ring.cuh"
#include "../common/programmatic_launch.cuh"

namespace {

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int inner, int row, uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], "
      "%5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(row), "r"(bar), "l"(policy)
      : "memory");
}

// The order a ring's producer thread issues n stages in, over slots 0, 1, ..., STAGES - 1, 0, ...: the first STAGES
// stages' weights (weights(it, slot, full)) before griddep_wait, since they do not depend on the kernel before this
// one, then their x (x_of(it, slot, full)); every later stage's weights and x together, once the consumers have
// released its slot. tx: the bytes a stage's copies bring (its full barrier's transaction count).
template <int STAGES, typename Weights, typename X>
__device__ __forceinline__ void issue_ring(int n, uint32_t tx, uint64_t* full_bar, uint64_t* empty_bar, Weights weights, X x_of) {
  const int first = min(n, STAGES);
  for (int it = 0; it < first; ++it) {
    mbar_arrive_expect_tx(smem_addr(&full_bar[it]), tx);
    weights(it, it, smem_addr(&full_bar[it]));
  }
  griddep_wait();
  for (int it = 0; it < first; ++it) x_of(it, it, smem_addr(&full_bar[it]));
  int s = first % STAGES;
  uint32_t round = first == STAGES ? 1u : 0u;
  for (int it = first; it < n; ++it) {
    mbar_wait(smem_addr(&empty_bar[s]), (round - 1) & 1);
    const uint32_t full = smem_addr(&full_bar[s]);
    mbar_arrive_expect_tx(full, tx);
    weights(it, s, full);
    x_of(it, s, full);
    if (++s == STAGES) s = 0, ++round;
  }
}

// The producer of a tensor-map ring, one thread: stages s_lo .. s_lo + n - 1 (SK weights each) of the ROWS-row block at
// row_block in issue_ring's order: a box of [ROWS][SK] weights (the ae plane, or bf16), for W12 one of [ROWS][SK / 2]
// nib bytes, and x's [M][SK] at x_offset in the stage.
template <int KIND, int STAGES, int ROWS, int SK>
__device__ __forceinline__ void produce_tma_ring(unsigned char* smem, int stage_bytes, int x_offset, uint64_t* full_bar,
                                                 uint64_t* empty_bar, int s_lo, int n, int row_block, const CUtensorMap* ae_map,
                                                 const CUtensorMap* nib_map, const CUtensorMap* x_map, bool with_x = true) {
  const uint64_t stream = l2_stream_policy();
  const uint64_t keep = l2_evict_last();
  // whole boxes, zeros past N and K included (without x, for SPECDEC_WIDE_ABLATE's timing builds: the weights' boxes)
  const uint32_t tx = static_cast<uint32_t>(with_x ? stage_bytes : x_offset);
  auto weights = [&](int it, int, uint32_t full) {
    const int k0 = (s_lo + it) * SK;
    const uint32_t st = smem_addr(smem + static_cast<size_t>(it % STAGES) * stage_bytes);
    tma_load_2d(st, ae_map, k0, row_block, full, stream);  // bf16: the weights
    if constexpr (KIND == kW12) tma_load_2d(st + ROWS * SK, nib_map, k0 / 2, row_block, full, stream);
  };
  auto x_of = [&](int it, int, uint32_t full) {
    const uint32_t st = smem_addr(smem + static_cast<size_t>(it % STAGES) * stage_bytes);
    if (with_x) tma_load_2d(st + x_offset, x_map, (s_lo + it) * SK, 0, full, keep);
  };
  issue_ring<STAGES>(n, tx, full_bar, empty_bar, weights, x_of);
}

}  // namespace
