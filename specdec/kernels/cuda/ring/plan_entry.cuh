// What the plan entry points share: size checks, the staged plan, plans written out for Python.
#pragma once

#include "../common/params.cuh"
#include "../common/plan.cuh"
#include "../registers/plans.cuh"
#include "plans.cuh"
#include "../common/launch_support.cuh"
#include "tensor_map_launch.cuh"
#include "row_tiles_launch.cuh"

namespace {

// Whether a stream-K launch of `kind` for M tokens runs tma_stream_k_kernel (runs_stream_k of the kernel it picks).
bool stream_k_tokens(int kind, int M) {
  const bool wide = M > kMaxTokens;
  if (kind == kW12) return wide ? runs_stream_k<kW12, kTmaMaxTokens, true>() : runs_stream_k<kW12, kMaxTokens, true>();
  return true;
}

// The plan of a tensor-map launch (K % 32 == 0) of `kind` on `pipeline`: stream-K where that kernel runs and pays.
Plan staged_plan(int kind, int pipeline, int M, int N, int K, int sms, bool stream_k) {
  return stream_k && stream_k_tokens(kind, M) && stream_k_pays(M, N, K, sms, pipeline) ? make_stream_k_plan(M, N, K, sms, pipeline)
                                                                                       : make_bulk_plan(M, N, K, sms, pipeline);
}

// max_tokens: kMaxTokens, or kTmaMaxTokens for the tensor-map kernels (where K % 32 == 0).
int check_sizes(int M, int N, int K, int max_tokens = kMaxTokens) {
  if (M < 1 || M > max_tokens || N < 1 || K < 8 || K % 8 != 0) {
    snprintf(g_error, sizeof(g_error), "expected 1 <= M <= %d, N >= 1, K >= 8 and K %% 8 == 0, got M=%d N=%d K=%d", max_tokens, M, N,
             K);
    return 3;
  }
  return 0;
}

// The most tokens a staged entry point takes at width K: the tensor-map kernels' where they run (K % 32 == 0).
int staged_max_tokens(int pipeline, int K) { return is_tma(pipeline) && K % 32 == 0 ? kTmaMaxTokens : kMaxTokens; }

// The checks every plan entry point starts with, and `sms` resolved (0: the current device's); 0 when it may go on.
int plan_prologue(int M, int N, int K, int* sms, int max_tokens = kMaxTokens) {
  if (*sms < 0) return 3;
  if (int rc = check_sizes(M, N, K, max_tokens)) return rc;
  if (*sms == 0) {
    *sms = sm_count();
    if (*sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  }
  return 0;
}

// A split-K plan into out[0..5] (row tiles per CTA, K splits, chunks or stages, grid x, shared bytes, workspace bytes);
// `splits_with_workspace` false: a kernel that needs no workspace (out[1] = 1, out[5] = 0).
void write_split_plan(const Plan& pl, int M, bool splits_with_workspace, long long* out) {
  out[0] = pl.rt_per_cta;
  out[1] = pl.stream_k ? stream_k_most_pieces(pl) : splits_with_workspace ? pl.k_splits : 1;
  out[2] = pl.n_chunks;
  out[3] = pl.grid_x;
  out[4] = pl.smem_bytes;
  out[5] = splits_with_workspace ? split_workspace_bytes(pl, M) : 0;
}

// The plan of a tensor-map entry point (`pipeline`) into out[0..6]: its ring's where K % 32 == 0 (out[6] = 1), else the
// register kernel of `kind` it runs instead (out[6] = 0; that kernel splits K inside clusters, without a workspace).
int tensor_map_plan(int kind, int pipeline, int M, int N, int K, int sms, long long* out, bool stream_k = false) {
  if (int rc = plan_prologue(M, N, K, &sms, staged_max_tokens(pipeline, K))) return rc;
  const bool tma = K % 32 == 0;
  write_split_plan(tma ? staged_plan(kind, pipeline, M, N, K, sms, stream_k) : make_plan(kind, M, N, K, sms), M, tma, out);
  out[6] = tma ? 1 : 0;
  return 0;
}


// The plan of a row-tile entry point (K % 32 == 0) into out[0..6]: make_rows_plan's values with the stage groups the
// launch takes (rows_stage_groups), no K splits (out[1] = 1), no workspace (out[5] = 0), out[6] = 1.
int rows_plan(int kind, int M, int N, int K, int sms, long long* out) {
  if (int rc = plan_prologue(M, N, K, &sms, kTmaMaxTokens)) return rc;
  const int groups = rows_stage_groups(kind, M, N, K, sms, g_row_stage_groups);
  write_split_plan(make_rows_plan(kind, M, N, K, groups), M, true, out);
  out[6] = 1;
  return 0;
}

// Whether a default entry point (W12 v10, Q v5, bf16 v5) runs the row tiles for this call on the current device.
bool rows_take(int kind, int M, int N, int K) {
  return K % 32 == 0 && check_sizes(M, N, K, kTmaMaxTokens) == 0 && rows_pay(kind, M, N, K, sm_count());
}

// The plan of a default entry point: rows_plan's where the row tiles pay, else the plan of the entry point it falls
// back to (`fallback`).
int rows_or_plan(int kind, int M, int N, int K, int sms, long long* out, int (*fallback)(int, int, int, int, long long*)) {
  if (K % 32 == 0) {
    if (int rc = plan_prologue(M, N, K, &sms, kTmaMaxTokens)) return rc;
    if (rows_pay(kind, M, N, K, sms)) return rows_plan(kind, M, N, K, sms, out);
  }
  return fallback(M, N, K, sms, out);
}

}  // namespace
