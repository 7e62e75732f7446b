// Launches of the wide kernels and the per-thread settings that choose among them.
#pragma once

#include "../common/params.cuh"
#include "layout.cuh"
#include "kernel.cuh"
#include "stream_k_kernel.cuh"
#include "../common/plan.cuh"
#include "../common/launch_support.cuh"
#include "../ring/tensor_maps.cuh"
#include "../ring/plan_entry.cuh"
#include "plan.cuh"

namespace {

// Launches a wide kernel (`kernel`, `threads` a CTA, of NB token blocks) on p with the plan make_plan(sms) gives: the
// kernel's shared-memory attribute (`attr_bytes`) once per device, the plan's workspace buffers, the tensor maps, a
// grid of (grid_x, k_splits) CTAs. `what` names the kernel in errors.
template <int KIND, int NB, typename Kernel, typename MakePlan>
int launch_wide_kernel(Kernel kernel, PerDevice<bool>& attr_once, int threads, int attr_bytes, MakePlan make_plan, const char* what,
                       Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  bool& attr_set = attr_once.here();  // once per device, before any graph capture (the warm-up's call)
  if (!attr_set) {
    if (int rc = set_smem_attributes(kernel, attr_bytes)) return rc;
    attr_set = true;
  }
  const int sms = sm_count();
  if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  const Plan pl = make_plan(sms);
  float* partials = nullptr;
  unsigned int* counters = nullptr;
  if (int rc = split_buffers(pl, p, workspace, workspace_bytes, &partials, &counters)) return rc;
  CUtensorMap ae_map, nib_map, x_map;
  if (int rc = encode_weight_maps<KIND>(p, kWideRows, kWideStageK, &ae_map, &nib_map, &x_map, NB * kWideBlockTokens,
                                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_SWIZZLE_64B))
    return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = pl.n_chunks;
  const cudaError_t e = launch_tma_kernel(kernel, dim3(pl.grid_x, pl.k_splits, 1), threads, pl.smem_bytes, stream, p, partials, counters,
                                          ae_map, nib_map, x_map);
  if (e != cudaSuccess) return fail(what, e);
  return 0;
}

// tma_wide_kernel<KIND, NB, PIPE, CTAS, GROUPS, UNROLL> on p (M <= 32 NB).
template <int KIND, int NB, bool PIPE, int CTAS, int GROUPS = 1, bool UNROLL = false>
int launch_wide_blocks(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  static PerDevice<bool> attr_once;
  return launch_wide_kernel<KIND, NB>(
      tma_wide_kernel<KIND, NB, PIPE, CTAS, GROUPS, UNROLL>, attr_once, wide_threads(KIND, NB, PIPE, GROUPS), wide_smem_bytes(KIND, NB, CTAS),
      [&](int sms) { return make_wide_plan(KIND, p.M, p.N, p.K, sms, PIPE, CTAS); }, "tma_wide_kernel launch", p, workspace,
      workspace_bytes, stream);
}

// Whether the wide kernels this thread launches from now on decode the next stage while a stage's MMAs run
// (specdec_set_wide_pipeline), and the CTAs an SM they ask for (specdec_set_wide_ctas_per_sm).
thread_local int g_wide_pipeline = 0;
thread_local int g_wide_ctas = 1;
// The consumer stage groups the wide kernels this thread launches from now on take with one CTA an SM and the one-set
// loop up to 64 tokens (specdec_set_wide_stage_groups): 2 or 1.
thread_local int g_wide_groups = 2;
// Which one-set wide kernels with one CTA an SM this thread launches from now on run their loop unrolled over a pass
// of the ring (specdec_set_wide_unroll): 1 all, 0 none, 2 (wide_unrolled's measured choice) all but W12 up to 32 tokens.
thread_local int g_wide_unroll = 2;
// Which wide calls this thread launches from now on run the persistent kernel (specdec_set_wide_stream_k; the modes of
// wide_stream_k_takes).
thread_local int g_wide_stream_k = 2;

// The plan a wide call of this thread launches with: the persistent kernel's where it runs, else the split-K one.
Plan wide_launch_plan(int kind, int M, int N, int K, int sms) {
  return wide_stream_k_takes(kind, M, N, K, sms, g_wide_pipeline != 0, g_wide_ctas, g_wide_groups, g_wide_stream_k)
             ? make_wide_stream_k_plan(kind, M, N, K, sms)
             : make_wide_plan(kind, M, N, K, sms, g_wide_pipeline != 0, g_wide_ctas);
}

// tma_wide_stream_k_kernel<KIND, NB, GROUPS, UNROLL> on p (M <= 32 NB).
template <int KIND, int NB, int GROUPS, bool UNROLL>
int launch_wide_stream_k(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  static PerDevice<bool> attr_once;
  return launch_wide_kernel<KIND, NB>(
      tma_wide_stream_k_kernel<KIND, NB, GROUPS, UNROLL>, attr_once, wide_threads(KIND, NB, false, GROUPS), wide_smem_bytes(KIND, NB, 1),
      [&](int sms) { return make_wide_stream_k_plan(KIND, p.M, p.N, p.K, sms); }, "tma_wide_stream_k_kernel launch", p, workspace,
      workspace_bytes, stream);
}

// Whether a one-set wide call of `kind` over M tokens runs the unrolled loop under `mode` (g_wide_unroll's values). The
// choice of mode 2 is measured (H100, benchmarks/NOTES.md, "The wide loop unrolled over a pass of the ring: measured"):
// the Q kernel up to 7 % faster at 32-128 tokens, W12 1-7 % at 128 and level at 64, but up to 6 % slower at 24-32.
__host__ __device__ constexpr bool wide_unrolled(int kind, int M, int mode) {
  return mode == 1 || (mode == 2 && (kind != kW12 || wide_blocks(M) >= 2));
}

template <int KIND, bool PIPE>
int launch_wide_pipe(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  if constexpr (!PIPE) {
    if (wide_stream_k_takes(KIND, p.M, p.N, p.K, sm_count(), PIPE, g_wide_ctas, g_wide_groups, g_wide_stream_k)) {
      if (wide_unrolled(KIND, p.M, g_wide_unroll)) {
        switch (wide_blocks(p.M)) {
          case 1: return launch_wide_stream_k<KIND, 1, 2, true>(p, workspace, workspace_bytes, stream);
          case 2: return launch_wide_stream_k<KIND, 2, 2, true>(p, workspace, workspace_bytes, stream);
          case 3: return launch_wide_stream_k<KIND, 3, 1, true>(p, workspace, workspace_bytes, stream);
          default: return launch_wide_stream_k<KIND, 4, 1, true>(p, workspace, workspace_bytes, stream);
        }
      }
      switch (wide_blocks(p.M)) {
        case 1: return launch_wide_stream_k<KIND, 1, 2, false>(p, workspace, workspace_bytes, stream);
        case 2: return launch_wide_stream_k<KIND, 2, 2, false>(p, workspace, workspace_bytes, stream);
        case 3: return launch_wide_stream_k<KIND, 3, 1, false>(p, workspace, workspace_bytes, stream);
        default: return launch_wide_stream_k<KIND, 4, 1, false>(p, workspace, workspace_bytes, stream);
      }
    }
    if (wide_ctas_per_sm(wide_blocks(p.M), PIPE, g_wide_ctas) == 2)
      return wide_blocks(p.M) == 1 ? launch_wide_blocks<KIND, 1, PIPE, 2>(p, workspace, workspace_bytes, stream)
                                   : launch_wide_blocks<KIND, 2, PIPE, 2>(p, workspace, workspace_bytes, stream);
    if (g_wide_groups == 2 && wide_blocks(p.M) <= 2) {
      if (wide_unrolled(KIND, p.M, g_wide_unroll))
        return wide_blocks(p.M) == 1 ? launch_wide_blocks<KIND, 1, PIPE, 1, 2, true>(p, workspace, workspace_bytes, stream)
                                     : launch_wide_blocks<KIND, 2, PIPE, 1, 2, true>(p, workspace, workspace_bytes, stream);
      return wide_blocks(p.M) == 1 ? launch_wide_blocks<KIND, 1, PIPE, 1, 2>(p, workspace, workspace_bytes, stream)
                                   : launch_wide_blocks<KIND, 2, PIPE, 1, 2>(p, workspace, workspace_bytes, stream);
    }
    if (wide_unrolled(KIND, p.M, g_wide_unroll)) {
      switch (wide_blocks(p.M)) {
        case 1: return launch_wide_blocks<KIND, 1, PIPE, 1, 1, true>(p, workspace, workspace_bytes, stream);
        case 2: return launch_wide_blocks<KIND, 2, PIPE, 1, 1, true>(p, workspace, workspace_bytes, stream);
        case 3: return launch_wide_blocks<KIND, 3, PIPE, 1, 1, true>(p, workspace, workspace_bytes, stream);
        default: return launch_wide_blocks<KIND, 4, PIPE, 1, 1, true>(p, workspace, workspace_bytes, stream);
      }
    }
  }
  switch (wide_blocks(p.M)) {
    case 1: return launch_wide_blocks<KIND, 1, PIPE, 1>(p, workspace, workspace_bytes, stream);
    case 2: return launch_wide_blocks<KIND, 2, PIPE, 1>(p, workspace, workspace_bytes, stream);
    case 3: return launch_wide_blocks<KIND, 3, PIPE, 1>(p, workspace, workspace_bytes, stream);
    default: return launch_wide_blocks<KIND, 4, PIPE, 1>(p, workspace, workspace_bytes, stream);
  }
}

template <int KIND>
int launch_wide(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  return g_wide_pipeline ? launch_wide_pipe<KIND, true>(p, workspace, workspace_bytes, stream)
                         : launch_wide_pipe<KIND, false>(p, workspace, workspace_bytes, stream);
}

// The wide plan into out[0..6] as the split-K plans write theirs, for the loop and the CTAs an SM this thread launches.
int wide_plan(int kind, int M, int N, int K, int sms, long long* out) {
  if (sms < 0) return 3;
  if (int rc = check_wide_sizes(M, N, K)) return rc;
  if (sms == 0) {
    sms = sm_count();
    if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  }
  write_split_plan(wide_launch_plan(kind, M, N, K, sms), M, true, out);
  out[6] = 1;
  return 0;
}

}  // namespace
