// A ring kernel's launch preparation, and the bulk-copy kernels' launch.
#pragma once

#include "../common/params.cuh"
#include "ring.cuh"
#include "bulk_kernel.cuh"
#include "../common/plan.cuh"
#include "plans.cuh"
#include "../common/launch_support.cuh"

namespace {

// What every ring kernel's launch does first: its shared-memory attributes once per process (the first call comes
// before any graph capture, in the warm-up), the plan of `pipeline`, the shared-memory check and the split-K buffers.
template <typename Kernel>
int prepare_ring_launch(Kernel kernel, bool& attr_set, int pipeline, const Params& p, void* workspace, long long workspace_bytes,
                        Plan* pl, float** partials, unsigned int** counters, int max_tokens = kMaxTokens, bool stream_k = false) {
  const int smem_max = bulk_smem_bytes(max_tokens, 1 << 20, pipeline);
  if (!attr_set) {  // two CTAs of ~60-90 KB per SM need the largest shared-memory carveout
    if (int rc = set_smem_attributes(kernel, smem_max)) return rc;
    attr_set = true;
  }
  const int sms = sm_count();
  if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  *pl = stream_k ? make_stream_k_plan(p.M, p.N, p.K, sms, pipeline) : make_bulk_plan(p.M, p.N, p.K, sms, pipeline);
  if (int rc = check_smem(*pl, p, smem_max)) return rc;
  return split_buffers(*pl, p, workspace, workspace_bytes, partials, counters);
}

template <int PRODUCER_WARPS>
int launch_bulk(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  static PerDevice<bool> attr_once;
  Plan pl{};
  float* partials = nullptr;
  unsigned int* counters = nullptr;
  if (int rc = prepare_ring_launch(w12_bulk_kernel<PRODUCER_WARPS>, attr_once.here(), PRODUCER_WARPS, p, workspace, workspace_bytes, &pl,
                                   &partials, &counters))
    return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = (p.K + 63) / 64;
  w12_bulk_kernel<PRODUCER_WARPS>
      <<<dim3(pl.grid_x, pl.k_splits, 1), dim3(bulk_threads(PRODUCER_WARPS), 1, 1), pl.smem_bytes, stream>>>(p, partials, counters);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail("w12_bulk_kernel launch", e);
  return 0;
}

}  // namespace
