// Launches of the register kernels.
#pragma once

#include "../common/params.cuh"
#include "chunked_kernel.cuh"
#include "stream_kernel.cuh"
#include "split_kernel.cuh"
#include "../common/plan.cuh"
#include "plans.cuh"
#include "../common/launch_support.cuh"

namespace {

template <int KIND, bool VEC16>
int launch(Params p, cudaStream_t stream) {
  static PerDevice<bool> attr_once;
  bool& attr_set = attr_once.here();  // the first call on a device happens before any graph capture (warm-up)
  if (!attr_set) {
    cudaError_t e = cudaFuncSetAttribute(skinny_gemm_kernel<KIND, VEC16>, cudaFuncAttributeMaxDynamicSharedMemorySize, kXBytesHard);
    if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
    attr_set = true;
  }
  const int sms = sm_count();
  if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  const Plan pl = make_plan(KIND, p.M, p.N, p.K, sms);
  if (int rc = check_smem(pl, p, kXBytesHard)) return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = pl.n_chunks;
  return launch_in_clusters(skinny_gemm_kernel<KIND, VEC16>, pl, kThreads, stream, p);
}

template <bool VEC16>
int launch_stream(Params p, cudaStream_t stream) {
  static PerDevice<int> max_splits_of;
  int& max_splits = max_splits_of.here();  // set on the first call on a device, before any graph capture (warm-up)
  if (max_splits == 0) {
    cudaError_t e = cudaFuncSetAttribute(w12_stream_kernel<VEC16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         kStreamXSliceMax + kStreamSmemFixed + 4096);
    if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
    // Clusters of 16 are non-portable: allowed on sm_90 when asked for.
    max_splits = cudaFuncSetAttribute(w12_stream_kernel<VEC16>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess
                     ? kStreamMaxSplits
                     : kMaxClusterSplits;
    cudaGetLastError();
  }
  const int sms = sm_count();
  if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  const Plan pl = make_stream_plan(p.M, p.N, p.K, sms, max_splits);
  if (int rc = check_smem(pl, p, kStreamXSliceMax + kStreamSmemFixed + 4096)) return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = pl.n_chunks;
  return launch_in_clusters(w12_stream_kernel<VEC16>, pl, kStreamThreads, stream, p);
}

template <bool VEC16>
int launch_split(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  static PerDevice<bool> attr_once;
  bool& attr_set = attr_once.here();  // the first call on a device happens before any graph capture (warm-up)
  if (!attr_set) {
    cudaError_t e = cudaFuncSetAttribute(w12_split_kernel<VEC16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         kStreamXSliceMax + kStreamSmemFixed + 4096);
    if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
    attr_set = true;
  }
  const int sms = sm_count();
  if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  const Plan pl = make_split_plan(p.M, p.N, p.K, sms);
  if (int rc = check_smem(pl, p, kStreamXSliceMax + kStreamSmemFixed + 4096)) return rc;
  float* partials = nullptr;
  unsigned int* counters = nullptr;
  if (int rc = split_buffers(pl, p, workspace, workspace_bytes, &partials, &counters)) return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = pl.n_chunks;
  w12_split_kernel<VEC16><<<dim3(pl.grid_x, pl.k_splits, 1), dim3(kStreamThreads, 1, 1), pl.smem_bytes, stream>>>(p, partials, counters);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail("w12_split_kernel launch", e);
  return 0;
}

}  // namespace
