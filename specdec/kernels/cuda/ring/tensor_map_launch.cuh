// Launches of the split-K and persistent tensor-map kernels.
#pragma once

#include "../common/params.cuh"
#include "ring.cuh"
#include "tensor_map_layout.cuh"
#include "tensor_map_kernel.cuh"
#include "stream_k_kernel.cuh"
#include "../common/plan.cuh"
#include "plans.cuh"
#include "../common/launch_support.cuh"
#include "bulk_launch.cuh"
#include "tensor_maps.cuh"

namespace {

// The kernel a tensor-map launch of KIND for TOK tokens runs: tma_stream_k_kernel when STREAM_K and its escapes go
// through the escape warp, else tma_gemm_kernel.
template <int KIND, int TOK, bool STREAM_K>
constexpr bool runs_stream_k() {
  return STREAM_K && !tma_epilogue_escapes(KIND, TOK);
}

// tma_gemm_kernel<KIND, TOK> (STREAM_K: tma_stream_k_kernel<KIND, TOK>, runs_stream_k) on p (M <= TOK).
template <int KIND, int TOK, bool STREAM_K = false>
int launch_tma_tokens(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  static PerDevice<bool> attr_once[2];  // split-K kernel, persistent kernel
  Plan pl{};
  float* partials = nullptr;
  unsigned int* counters = nullptr;
  constexpr int pipeline = KIND == kW12 ? kTmaPipeline : KIND == kQ ? kTmaQPipeline : kTmaBf16Pipeline;
  auto kernel = tma_gemm_kernel<KIND, TOK>;
  bool persistent = false;
  if constexpr (runs_stream_k<KIND, TOK, STREAM_K>()) {
    const int sms = sm_count();
    if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
    persistent = stream_k_pays(p.M, p.N, p.K, sms, pipeline);
    if (persistent) kernel = tma_stream_k_kernel<KIND, TOK>;
  }
  if (int rc = prepare_ring_launch(kernel, attr_once[persistent ? 1 : 0].here(), pipeline, p, workspace, workspace_bytes, &pl, &partials,
                                   &counters, TOK, persistent))
    return rc;
  CUtensorMap ae_map, nib_map, x_map;
  if (int rc = encode_weight_maps<KIND>(p, kStreamRows, kBulkStageK, &ae_map, &nib_map, &x_map)) return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = (p.K + 63) / 64;
  const dim3 grid(pl.grid_x, persistent ? 1 : pl.k_splits, 1);
  const cudaError_t e =
      launch_tma_kernel(kernel, grid, tma_threads(KIND, TOK), pl.smem_bytes, stream, p, partials, counters, ae_map, nib_map, x_map);
  if (e != cudaSuccess) return fail(persistent ? "tma_stream_k_kernel launch" : "tma_gemm_kernel launch", e);
  return 0;
}

// The tensor-map kernel of KIND for p.M tokens: one MMA n-tile for M <= 8, two for 9..16. (Four n-tiles for 17..32
// ran 0.25-0.66x cuBLAS bf16 on the H200, below two 16-token calls: benchmarks/NOTES.md.)
template <int KIND, bool STREAM_K = false>
int launch_tma(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  if (p.M > kMaxTokens) return launch_tma_tokens<KIND, kTmaMaxTokens, STREAM_K>(p, workspace, workspace_bytes, stream);
  return launch_tma_tokens<KIND, kMaxTokens, STREAM_K>(p, workspace, workspace_bytes, stream);
}

}  // namespace
