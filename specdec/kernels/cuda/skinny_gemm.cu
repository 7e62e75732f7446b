// The C ABI of the weight-streaming GEMMs for few tokens, y[M, N] = x[M, K] @ W^T (bf16 x and y, fp32 accumulation,
// M <= 128), as specdec/kernels/cuda/ops.py loads it through ctypes, and the one translation unit nvcc builds
// (build.py). The kernels, their plans and their launches are the headers included below, one idea each, in the
// order they build on each other; README.md beside this file has the math, the byte floor, a map of the files and
// where each measurement is. Weight formats: bf16 W [N, K]; W12 exact (planes ae / nib / base and escape tiles,
// specdec/formats/w12.py); its Q view (ae and base).
//
// Build (build.py): nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 --shared -Xcompiler -fPIC -cudart static
//   skinny_gemm.cu -o build/specdec_cuda_kernels.so

#include "common/params.cuh"
#include "common/chunk_loads.cuh"
#include "common/decode.cuh"
#include "common/band_escapes.cuh"
#include "common/bf16_store.cuh"
#include "registers/chunked_kernel.cuh"
#include "registers/stream_kernel.cuh"
#include "common/split_sums.cuh"
#include "registers/split_kernel.cuh"
#include "ring/ring.cuh"
#include "common/ablate.cuh"
#include "ring/consumers.cuh"
#include "ring/bulk_kernel.cuh"
#include "ring/tensor_map_layout.cuh"
#include "common/programmatic_launch.cuh"
#include "ring/producer.cuh"
#include "ring/escape_warp.cuh"
#include "ring/tensor_map_kernel.cuh"
#include "common/trace.cuh"
#include "ring/stream_k_units.cuh"
#include "ring/stream_k_kernel.cuh"
#include "ring/row_tiles.cuh"
#include "wide/layout.cuh"
#include "wide/wgmma.cuh"
#include "wide/decode_natural.cuh"
#include "wide/consumer.cuh"
#include "wide/epilogue.cuh"
#include "wide/kernel.cuh"
#include "wide/stream_k_kernel.cuh"
#include "common/plan.cuh"
#include "registers/plans.cuh"
#include "ring/plans.cuh"
#include "common/launch_support.cuh"
#include "registers/launch.cuh"
#include "ring/bulk_launch.cuh"
#include "ring/tensor_maps.cuh"
#include "ring/tensor_map_launch.cuh"
#include "ring/row_tiles_launch.cuh"
#include "ring/plan_entry.cuh"
#include "wide/plan.cuh"
#include "wide/launch.cuh"

extern "C" {

// Message of the last failed call of this thread ("" after none).
const char* specdec_cuda_last_error() { return g_error; }

// The build's SPECDEC_WIDE_ABLATE (0: the shipped kernels; else bits of the wide kernels' parts left out, products wrong).
int specdec_wide_ablation() { return SPECDEC_WIDE_ABLATE; }

// The fields a CTA of the wide kernels records in a build with SPECDEC_WIDE_TRACE (0 without), and the CTAs recorded.
int specdec_wide_trace_fields() { return SPECDEC_WIDE_TRACE ? kWideTraceFields : 0; }
int specdec_wide_trace_ctas() { return SPECDEC_WIDE_TRACE ? kWideTraceCtas : 0; }

// Zeroes the trace on `stream` (asynchronously), or copies its first `ctas` CTAs' records ([ctas][fields] uint64, ns
// and kTraceMeta's value) to host memory `out` after the device's work: traced builds only (else 1).
int specdec_wide_trace_reset(void* stream) {
#if SPECDEC_WIDE_TRACE
  void* at = nullptr;
  if (cudaError_t e = cudaGetSymbolAddress(&at, g_wide_trace); e != cudaSuccess) return fail("cudaGetSymbolAddress", e);
  if (cudaError_t e = cudaMemsetAsync(at, 0, sizeof(g_wide_trace), static_cast<cudaStream_t>(stream)); e != cudaSuccess)
    return fail("cudaMemsetAsync(trace)", e);
  return 0;
#else
  (void)stream;
  snprintf(g_error, sizeof(g_error), "a library built without -DSPECDEC_WIDE_TRACE=1 records no trace");
  return 1;
#endif
}
int specdec_wide_trace_read(unsigned long long* out, int ctas) {
#if SPECDEC_WIDE_TRACE
  if (ctas < 1 || ctas > kWideTraceCtas) {
    snprintf(g_error, sizeof(g_error), "ctas: expected 1 to %d, got %d", kWideTraceCtas, ctas);
    return 3;
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail("cudaDeviceSynchronize", e);
  const size_t bytes = static_cast<size_t>(ctas) * kWideTraceFields * sizeof(unsigned long long);
  if (cudaError_t e = cudaMemcpyFromSymbol(out, g_wide_trace, bytes); e != cudaSuccess) return fail("cudaMemcpyFromSymbol(trace)", e);
  return 0;
#else
  (void)out, (void)ctas;
  snprintf(g_error, sizeof(g_error), "a library built without -DSPECDEC_WIDE_TRACE=1 records no trace");
  return 1;
#endif
}

// The launch mode of the tensor-map kernels this thread launches from now on: 0 plain, 1 programmatic with each CTA
// signalling after its K loop (other values: 0).
void specdec_set_programmatic_launch(int mode) { g_programmatic_launch = mode == 1 ? 1 : 0; }

// Up to how many consumer stage groups the row-tile calls this thread launches from now on may run (1 or 2; other
// values: 1): tma_rows_kernel's STAGE_GROUPS, where the call takes them (specdec_rows_stage_groups).
void specdec_set_row_stage_groups(int groups) { g_row_stage_groups = groups == 2 ? 2 : 1; }

// Whether the wide kernels this thread launches from now on pipeline a warpgroup's decode with its MMAs (1) or wait
// for a stage's MMAs before decoding the next (other values).
void specdec_set_wide_pipeline(int on) { g_wide_pipeline = on == 1 ? 1 : 0; }

// The CTAs an SM the wide kernels this thread launches from now on ask for: 2 (taken up to 64 tokens with the one-set
// loop) or 1 (other values).
void specdec_set_wide_ctas_per_sm(int ctas) { g_wide_ctas = ctas == 2 ? 2 : 1; }

// The consumer stage groups the wide kernels this thread launches from now on take where they run one CTA an SM with
// the one-set loop up to 64 tokens: 1 (one group) or 2 (other values: even and odd stages, 16 consumer warps).
void specdec_set_wide_stage_groups(int groups) { g_wide_groups = groups == 1 ? 1 : 2; }

// Which wide kernels this thread launches from now on with one CTA an SM and the one-set loop run it unrolled over a
// pass of the ring, its MMA descriptors uniform: 1 all, 0 none, 2 (other values) the Q view's and W12's above 32 tokens.
void specdec_set_wide_unroll(int mode) { g_wide_unroll = mode == 0 || mode == 1 ? mode : 2; }

// Which wide calls this thread launches from now on run the persistent kernel (tma_wide_stream_k_kernel): 0 none, 1
// every one it applies to, 2 (other values) those it was measured faster on (wide_stream_k_takes).
void specdec_set_wide_stream_k(int mode) { g_wide_stream_k = mode == 0 || mode == 1 ? mode : 2; }

// Whether a wide call (kind 1 W12 / 2 Q) on `sms` multiprocessors runs the persistent kernel under persistent mode
// `mode` (as specdec_set_wide_stream_k takes it) with this thread's other wide settings: 1 or 0; host only. -1 for a
// kind, sizes or mode the wide kernels do not take.
int specdec_wide_stream_k_takes(int kind, int M, int N, int K, int sms, int mode) {
  if ((kind != kW12 && kind != kQ) || sms <= 0 || check_wide_sizes(M, N, K) != 0 || mode < 0 || mode > 2) return -1;
  return wide_stream_k_takes(kind, M, N, K, sms, g_wide_pipeline != 0, g_wide_ctas, g_wide_groups, mode) ? 1 : 0;
}

// Whether a one-set wide call (kind 1 W12 / 2 Q, 1 <= M <= 128) runs the unrolled loop under unroll mode `mode` (0, 1
// or 2, as specdec_set_wide_unroll takes them): 1 or 0; host only. -1 for a kind, M or mode the wide kernels do not take.
int specdec_wide_unrolled(int kind, int M, int mode) {
  if ((kind != kW12 && kind != kQ) || M < 1 || M > kWideMaxTokens || mode < 0 || mode > 2) return -1;
  return wide_unrolled(kind, M, mode) ? 1 : 0;
}

// The consumer stage groups a row-tile call (kind 0 bf16 / 1 W12 / 2 Q, M <= 16, K % 32 == 0) runs on a GPU with `sms`
// multiprocessors when up to `wanted` are asked for; host only. -1 for sizes the row tiles do not take.
int specdec_rows_stage_groups(int kind, int M, int N, int K, int sms, int wanted) {
  if (kind < 0 || kind > 2 || K % 32 != 0 || check_sizes(M, N, K, kTmaMaxTokens) != 0) return -1;
  return rows_stage_groups(kind, M, N, K, sms, wanted);
}

// Launch plan for (kind 0 bf16 / 1 W12 / 2 Q, M, N, K) on a GPU with `sms` multiprocessors; host only.
// out[0] row tiles per CTA, out[1] K splits (cluster size), out[2] chunks, out[3] grid x, out[4] shared bytes.
int specdec_skinny_plan(int kind, int M, int N, int K, int sms, int* out) {
  if (kind < 0 || kind > 2 || sms < 1) return 3;
  if (int rc = check_sizes(M, N, K)) return rc;
  const Plan pl = make_plan(kind, M, N, K, sms);
  out[0] = pl.rt_per_cta;
  out[1] = pl.k_splits;
  out[2] = pl.n_chunks;
  out[3] = pl.grid_x;
  out[4] = pl.smem_bytes;
  return 0;
}

// y[M, N] = x[M, K] @ w[N, K]^T, all bf16, contiguous, 16-byte aligned.
int specdec_skinny_gemm_bf16(const void* x, const void* w, void* y, int M, int N, int K, void* stream) {
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K)) return rc;
  Params p{};
  p.x = static_cast<const uint16_t*>(x);
  p.w = static_cast<const uint8_t*>(w);
  p.y = static_cast<uint16_t*>(y);
  p.M = M, p.N = N, p.K = K;
  return launch<kBf16, true>(p, static_cast<cudaStream_t>(stream));
}

// The same product through tensor-map copies (tma_gemm_kernel<kBf16>: the W12 v7 ring, consumers and split-K epilogue
// with plain bf16 weights), K split over independent CTAs with a workspace of specdec_bf16_v2_plan's out[5] bytes (the
// W12 split-K contract). K % 32 != 0: runs specdec_skinny_gemm_bf16 (workspace unused). Needs 16-byte aligned x and w.
int specdec_skinny_gemm_bf16_v2(const void* x, const void* w, void* y, int M, int N, int K, void* workspace, long long workspace_bytes,
                                void* stream) {
  if (K % 32 != 0) return specdec_skinny_gemm_bf16(x, w, y, M, N, K, stream);
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K, kTmaMaxTokens)) return rc;
  const Params p = w12_params(x, w, nullptr, nullptr, nullptr, nullptr, nullptr, y, M, N, K);  // the bf16 weights in ae's place
  return launch_tma<kBf16>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

// Launch plan of specdec_skinny_gemm_bf16_v2, as specdec_q_v2_plan (out[6] 0 where K % 32 != 0 and the register kernel
// runs, with specdec_skinny_plan's values).
int specdec_bf16_v2_plan(int M, int N, int K, int sms, long long* out) { return tensor_map_plan(kBf16, kTmaBf16Pipeline, M, N, K, sms, out); }

// bf16 weights in the persistent CTAs of specdec_w12_gemm_small_m_v8 (tma_stream_k_kernel<kBf16>): same contracts as
// specdec_skinny_gemm_bf16_v2, with specdec_bf16_v3_plan's out[5] bytes of workspace.
int specdec_skinny_gemm_bf16_v3(const void* x, const void* w, void* y, int M, int N, int K, void* workspace, long long workspace_bytes,
                                void* stream) {
  if (K % 32 != 0) return specdec_skinny_gemm_bf16(x, w, y, M, N, K, stream);
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K, kTmaMaxTokens)) return rc;
  const Params p = w12_params(x, w, nullptr, nullptr, nullptr, nullptr, nullptr, y, M, N, K);
  return launch_tma<kBf16, true>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

// Launch plan of specdec_skinny_gemm_bf16_v3, as specdec_bf16_v2_plan with specdec_w12_v8_plan's persistent values.
int specdec_bf16_v3_plan(int M, int N, int K, int sms, long long* out) {
  return tensor_map_plan(kBf16, kTmaBf16Pipeline, M, N, K, sms, out, true);
}

// W12 exact: planes of specdec/formats/w12.py (k_padded == K since K % 8 == 0).
int specdec_w12_gemm_small_m(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr,
                             const void* esc_pos, const void* esc_bits, void* y, int M, int N, int K, void* stream) {
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K)) return rc;
  const Params p = w12_params(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K);
  if (K % 16 == 0) return launch<kW12, true>(p, static_cast<cudaStream_t>(stream));
  return launch<kW12, false>(p, static_cast<cudaStream_t>(stream));
}

// W12 exact, the kernel without barriers in its K loop (64-row CTAs, cluster K splits up to 16); same planes
// and result contract as specdec_w12_gemm_small_m.
int specdec_w12_gemm_small_m_v3(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr,
                                const void* esc_pos, const void* esc_bits, void* y, int M, int N, int K, void* stream) {
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K)) return rc;
  const Params p = w12_params(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K);
  if (K % 16 == 0) return launch_stream<true>(p, static_cast<cudaStream_t>(stream));
  return launch_stream<false>(p, static_cast<cudaStream_t>(stream));
}

// Launch plan of specdec_w12_gemm_small_m_v3 on `sms` multiprocessors with clusters of up to `max_splits` CTAs
// (16 where non-portable clusters are allowed, else 8); host only. out as specdec_skinny_plan.
int specdec_w12_v3_plan(int M, int N, int K, int sms, int max_splits, int* out) {
  if (sms < 1 || (max_splits != kMaxClusterSplits && max_splits != kStreamMaxSplits)) return 3;
  if (int rc = check_sizes(M, N, K)) return rc;
  const Plan pl = make_stream_plan(M, N, K, sms, max_splits);
  out[0] = pl.rt_per_cta;
  out[1] = pl.k_splits;
  out[2] = pl.n_chunks;
  out[3] = pl.grid_x;
  out[4] = pl.smem_bytes;
  return 0;
}

// W12 exact with K split over independent CTAs (64-row CTAs, the last CTA of a row block reduces); same planes
// and result contract as specdec_w12_gemm_small_m. `workspace`: at least specdec_w12_v4_plan's out[5] bytes for
// the current device (may be null when that is 0), 16-byte aligned, its counters zero before the first launch
// (each launch leaves them zero). Launches sharing a workspace must not run concurrently.
int specdec_w12_gemm_small_m_v4(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr,
                                const void* esc_pos, const void* esc_bits, void* y, int M, int N, int K, void* workspace,
                                long long workspace_bytes, void* stream) {
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K)) return rc;
  const Params p = w12_params(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K);
  if (K % 16 == 0) return launch_split<true>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
  return launch_split<false>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

// Launch plan of specdec_w12_gemm_small_m_v4 on `sms` multiprocessors (sms = 0: the current device's); host
// only. out[0..4] as specdec_skinny_plan (out[1]: K splits, independent CTAs), out[5] the workspace bytes.
int specdec_w12_v4_plan(int M, int N, int K, int sms, long long* out) {
  if (int rc = plan_prologue(M, N, K, &sms)) return rc;
  write_split_plan(make_split_plan(M, N, K, sms), M, true, out);
  return 0;
}

// The ring entry points: `pipeline` 1 or kBulkConsumerWarps producer warps issuing bulk copies, or kTmaPipeline.
static int run_bulk(int pipeline, const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr,
                    const void* esc_pos, const void* esc_bits, void* y, int M, int N, int K, void* workspace,
                    long long workspace_bytes, void* stream) {
  if (K % 32 != 0)
    return specdec_w12_gemm_small_m_v4(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K, workspace, workspace_bytes,
                                       stream);
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K, staged_max_tokens(pipeline, K))) return rc;
  const Params p = w12_params(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K);
  if (pipeline == kTmaPipeline) return launch_tma<kW12>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
  if (pipeline == 1) return launch_bulk<1>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
  return launch_bulk<kBulkConsumerWarps>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

static int bulk_plan(int pipeline, int M, int N, int K, int sms, long long* out) {
  if (int rc = plan_prologue(M, N, K, &sms, staged_max_tokens(pipeline, K))) return rc;
  const bool bulk = K % 32 == 0;
  write_split_plan(bulk ? make_bulk_plan(M, N, K, sms, pipeline) : make_split_plan(M, N, K, sms), M, true, out);
  out[6] = bulk ? 1 : 0;
  return 0;
}

// W12 exact through the bulk-copy pipeline (64-row CTAs of 4 consumer warps and a producer warp, K split over
// independent CTAs as in v4); same planes, workspace contract and result contract as specdec_w12_gemm_small_m_v4,
// with specdec_w12_v5_plan's out[5] bytes of workspace. K % 32 != 0: runs specdec_w12_gemm_small_m_v4 (its plan
// is then the one specdec_w12_v5_plan returns).
int specdec_w12_gemm_small_m_v5(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr,
                                const void* esc_pos, const void* esc_bits, void* y, int M, int N, int K, void* workspace,
                                long long workspace_bytes, void* stream) {
  return run_bulk(1, x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K, workspace, workspace_bytes, stream);
}

// The same with 4 producer warps (one per 16-row tile) issuing the stage's copies: same contracts, the workspace
// of specdec_w12_v6_plan's out[5].
int specdec_w12_gemm_small_m_v6(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr,
                                const void* esc_pos, const void* esc_bits, void* y, int M, int N, int K, void* workspace,
                                long long workspace_bytes, void* stream) {
  return run_bulk(kBulkConsumerWarps, x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K, workspace, workspace_bytes,
                  stream);
}

// Launch plan of specdec_w12_gemm_small_m_v5 on `sms` multiprocessors (sms = 0: the current device's); host only.
// out[0..5] as specdec_w12_v4_plan except out[2]: K stages of 128 weights (chunks of 64 where out[6] == 0);
// out[6] 1 when the bulk-copy kernel runs (K % 32 == 0), 0 when v4's kernel and plan do.
int specdec_w12_v5_plan(int M, int N, int K, int sms, long long* out) { return bulk_plan(1, M, N, K, sms, out); }

// Launch plan of specdec_w12_gemm_small_m_v6, as specdec_w12_v5_plan (out[4]: its larger CTA's shared memory).
int specdec_w12_v6_plan(int M, int N, int K, int sms, long long* out) { return bulk_plan(kBulkConsumerWarps, M, N, K, sms, out); }

// W12 exact through tensor-map copies (tma_gemm_kernel<kW12>: v5's ring, consumers and split-K epilogue, one producer
// thread issuing one 2-D copy per plane and one of x per stage): same contracts as specdec_w12_gemm_small_m_v5,
// with specdec_w12_v7_plan's out[5] bytes of workspace; also needs 16-byte aligned x, ae and nib (error 2 otherwise).
int specdec_w12_gemm_small_m_v7(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr,
                                const void* esc_pos, const void* esc_bits, void* y, int M, int N, int K, void* workspace,
                                long long workspace_bytes, void* stream) {
  return run_bulk(kTmaPipeline, x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K, workspace, workspace_bytes, stream);
}

// Launch plan of specdec_w12_gemm_small_m_v7, as specdec_w12_v5_plan (out[4]: its shared memory, x rows unpadded).
int specdec_w12_v7_plan(int M, int N, int K, int sms, long long* out) { return bulk_plan(kTmaPipeline, M, N, K, sms, out); }

// W12 exact on v7's stages, consumers and escape warp in persistent CTAs (tma_stream_k_kernel<kW12>: each CTA a run of
// equal length over row blocks x stages, pieces of a row block summed in k order): same contracts as
// specdec_w12_gemm_small_m_v7, with specdec_w12_v8_plan's out[5] bytes of workspace. K % 32 != 0: runs
// specdec_w12_gemm_small_m_v4.
int specdec_w12_gemm_small_m_v8(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr,
                                const void* esc_pos, const void* esc_bits, void* y, int M, int N, int K, void* workspace,
                                long long workspace_bytes, void* stream) {
  if (K % 32 != 0)
    return specdec_w12_gemm_small_m_v4(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K, workspace, workspace_bytes,
                                       stream);
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K, kTmaMaxTokens)) return rc;
  const Params p = w12_params(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K);
  return launch_tma<kW12, true>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

// Launch plan of specdec_w12_gemm_small_m_v8, as specdec_w12_v7_plan except where the persistent kernel runs: out[3]
// its CTAs, out[1] the most pieces a row block is cut into, out[5] row-block counters and 2 x out[3] partial tiles.
int specdec_w12_v8_plan(int M, int N, int K, int sms, long long* out) {
  if (K % 32 != 0) return bulk_plan(kTmaPipeline, M, N, K, sms, out);
  return tensor_map_plan(kW12, kTmaPipeline, M, N, K, sms, out, true);
}

// W12 exact in row-tile CTAs over the whole of K (tma_rows_kernel<kW12>: a CTA a 16-row tile, no K split, so no
// workspace: specdec_w12_v9_plan's out[5] is 0 where it runs); same contracts as specdec_w12_gemm_small_m_v8 (the
// workspace arguments are passed on where K % 32 != 0, which runs specdec_w12_gemm_small_m_v4).
int specdec_w12_gemm_small_m_v9(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr,
                                const void* esc_pos, const void* esc_bits, void* y, int M, int N, int K, void* workspace,
                                long long workspace_bytes, void* stream) {
  if (K % 32 != 0)
    return specdec_w12_gemm_small_m_v4(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K, workspace, workspace_bytes,
                                       stream);
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K, kTmaMaxTokens)) return rc;
  const Params p = w12_params(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K);
  return launch_rows<kW12>(p, static_cast<cudaStream_t>(stream));
}

// Launch plan of specdec_w12_gemm_small_m_v9: out[0] 1 row tile a CTA, out[1] 1 (no K split), out[2] stages of 256
// weights, out[3] the CTAs (ceil(N / 16)), out[4] shared bytes, out[5] 0, out[6] 1; where K % 32 != 0,
// specdec_w12_v8_plan's (v4's kernel runs).
int specdec_w12_v9_plan(int M, int N, int K, int sms, long long* out) {
  if (K % 32 != 0) return specdec_w12_v8_plan(M, N, K, sms, out);
  return rows_plan(kW12, M, N, K, sms, out);
}

// W12 exact in row tiles where they pay (rows_pay: specdec_w12_gemm_small_m_v9), else specdec_w12_gemm_small_m_v8;
// same contracts, with specdec_w12_v10_plan's out[5] bytes of workspace (0 where the row tiles run).
int specdec_w12_gemm_small_m_v10(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr,
                                 const void* esc_pos, const void* esc_bits, void* y, int M, int N, int K, void* workspace,
                                 long long workspace_bytes, void* stream) {
  if (rows_take(kW12, M, N, K))
    return specdec_w12_gemm_small_m_v9(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K, workspace, workspace_bytes, stream);
  return specdec_w12_gemm_small_m_v8(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K, workspace, workspace_bytes, stream);
}

// Launch plan of specdec_w12_gemm_small_m_v10: specdec_w12_v9_plan's where the row tiles run, else specdec_w12_v8_plan's.
int specdec_w12_v10_plan(int M, int N, int K, int sms, long long* out) {
  return rows_or_plan(kW12, M, N, K, sms, out, specdec_w12_v8_plan);
}

// Exact W12 for 1 <= M <= 128 tokens, K % 64 == 0 (tma_wide_kernel), the workspace of its plan (specdec_wide_plan).
int specdec_w12_gemm_wide(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr, const void* esc_pos,
                          const void* esc_bits, void* y, int M, int N, int K, void* workspace, long long workspace_bytes, void* stream) {
  g_error[0] = 0;
  if (int rc = check_wide_sizes(M, N, K)) return rc;
  const Params p = w12_params(x, ae, nib, base, esc_ptr, esc_pos, esc_bits, y, M, N, K);
  return launch_wide<kW12>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

// The Q view for 1 <= M <= 128 tokens, K % 64 == 0 (tma_wide_kernel), the workspace of its plan.
int specdec_q_gemm_wide(const void* x, const void* ae, const void* base, void* y, int M, int N, int K, void* workspace,
                        long long workspace_bytes, void* stream) {
  g_error[0] = 0;
  if (int rc = check_wide_sizes(M, N, K)) return rc;
  const Params p = w12_params(x, ae, nullptr, base, nullptr, nullptr, nullptr, y, M, N, K);
  return launch_wide<kQ>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

// The wide kernels' plan (kind 1: W12, 2: the Q view) into out[0..6] as the split-K plans: 16-row tiles a CTA (8), K
// splits, stages of 64 weights, row blocks of 128, dynamic shared memory, workspace bytes, 1; for the consumer loop
// and CTAs an SM of specdec_set_wide_pipeline and specdec_set_wide_ctas_per_sm.
int specdec_wide_plan(int kind, int M, int N, int K, int sms, long long* out) {
  if (kind != kW12 && kind != kQ) return 3;
  return wide_plan(kind, M, N, K, sms, out);
}

// Where a wide call's split-K buffers lie in a workspace of `workspace_bytes` (split_layout's out[0..3]; the plan of
// specdec_wide_plan on `sms` > 0 multiprocessors), host only: 0, 3 for sizes or a kind the wide kernels do not take, 2
// with the message set when the workspace is smaller than the plan needs.
int specdec_wide_split_layout(int kind, int M, int N, int K, int sms, long long workspace_bytes, long long* out) {
  if ((kind != kW12 && kind != kQ) || sms <= 0 || check_wide_sizes(M, N, K)) return 3;
  const Plan pl = wide_launch_plan(kind, M, N, K, sms);
  if (int rc = check_workspace(split_workspace_bytes(pl, M), workspace_bytes, M, N, K)) return rc;
  split_layout(pl, M, workspace_bytes, out);
  return 0;
}

// The runs of tma_stream_k_kernel for `row_blocks` blocks of `stages` stages over `ctas` CTAs, host only: for CTA c and
// its segments in order, out gets (c, row block, first stage, end stage, piece, pieces of the block, workspace slot
// or -1 where the block is stored whole), 7 values a segment, at most `cap` segments. Returns the segment count
// (more than cap: only cap written), or -1 for sizes out of range.
long long specdec_stream_k_segments(long long row_blocks, long long stages, long long ctas, long long* out, long long cap) {
  if (row_blocks < 1 || stages < 1 || ctas < 1 || ctas > row_blocks * stages) return -1;
  const long long units = row_blocks * stages;
  long long n = 0;
  for (long long c = 0; c < ctas; ++c) {
    const long long hi = stream_k_unit_lo<long long>(c + 1, units, ctas);
    for (long long u = stream_k_unit_lo<long long>(c, units, ctas); u < hi;) {
      const long long block = u / stages, block_lo = block * stages;
      const long long end = hi < block_lo + stages ? hi : block_lo + stages;
      const int first = stream_k_cta_of<long long>(block_lo, units, ctas);
      const int pieces = stream_k_cta_of<long long>(block_lo + stages - 1, units, ctas) - first + 1;
      if (n < cap) {
        long long* o = out + 7 * n;
        o[0] = c, o[1] = block, o[2] = u - block_lo, o[3] = end - block_lo, o[4] = c - first, o[5] = pieces;
        o[6] = pieces > 1 ? stream_k_slot<long long>(static_cast<int>(c), block_lo, units, ctas) : -1;
      }
      ++n;
      u = end;
    }
  }
  return n;
}

// Q view: ae plane and bases only.
int specdec_q_gemm_small_m(const void* x, const void* ae, const void* base, void* y, int M, int N, int K, void* stream) {
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K)) return rc;
  const Params p = w12_params(x, ae, nullptr, base, nullptr, nullptr, nullptr, y, M, N, K);  // the Q view: ae and bases
  if (K % 16 == 0) return launch<kQ, true>(p, static_cast<cudaStream_t>(stream));
  return launch<kQ, false>(p, static_cast<cudaStream_t>(stream));
}

// The Q view through tensor-map copies (tma_gemm_kernel<kQ>: the W12 v7 pipeline with the ae plane only, the bases'
// midpoint nibble, no escapes; K split over independent CTAs with its own workspace of specdec_q_v2_plan's out[5]
// bytes, the W12 split-K contract). K % 32 != 0: runs specdec_q_gemm_small_m (workspace unused). Needs 16-byte
// aligned x and ae (error 2 otherwise).
int specdec_q_gemm_small_m_v2(const void* x, const void* ae, const void* base, void* y, int M, int N, int K, void* workspace,
                              long long workspace_bytes, void* stream) {
  if (K % 32 != 0) return specdec_q_gemm_small_m(x, ae, base, y, M, N, K, stream);
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K, kTmaMaxTokens)) return rc;
  const Params p = w12_params(x, ae, nullptr, base, nullptr, nullptr, nullptr, y, M, N, K);  // the Q view: ae and bases
  return launch_tma<kQ>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

// Launch plan of specdec_q_gemm_small_m_v2 on `sms` multiprocessors (0: the current device's); host only. out[0..6]
// as specdec_w12_v5_plan's; out[6] 0 when the register kernel runs (K % 32 != 0: then out[1] == 1, out[5] == 0 and
// out[0], out[2..4] are specdec_skinny_plan's).
int specdec_q_v2_plan(int M, int N, int K, int sms, long long* out) { return tensor_map_plan(kQ, kTmaQPipeline, M, N, K, sms, out); }

// The Q view in the persistent CTAs of specdec_w12_gemm_small_m_v8 (tma_stream_k_kernel<kQ>): same contracts as
// specdec_q_gemm_small_m_v2, with specdec_q_v3_plan's out[5] bytes of workspace.
int specdec_q_gemm_small_m_v3(const void* x, const void* ae, const void* base, void* y, int M, int N, int K, void* workspace,
                              long long workspace_bytes, void* stream) {
  if (K % 32 != 0) return specdec_q_gemm_small_m(x, ae, base, y, M, N, K, stream);
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K, kTmaMaxTokens)) return rc;
  const Params p = w12_params(x, ae, nullptr, base, nullptr, nullptr, nullptr, y, M, N, K);
  return launch_tma<kQ, true>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

// Launch plan of specdec_q_gemm_small_m_v3, as specdec_q_v2_plan with specdec_w12_v8_plan's persistent values.
int specdec_q_v3_plan(int M, int N, int K, int sms, long long* out) { return tensor_map_plan(kQ, kTmaQPipeline, M, N, K, sms, out, true); }

// The Q view in the row-tile CTAs of specdec_w12_gemm_small_m_v9 (tma_rows_kernel<kQ>): same contracts as
// specdec_q_gemm_small_m_v2 (no workspace where K % 32 == 0: specdec_q_v4_plan's out[5] is 0).
int specdec_q_gemm_small_m_v4(const void* x, const void* ae, const void* base, void* y, int M, int N, int K, void* workspace,
                              long long workspace_bytes, void* stream) {
  if (K % 32 != 0) return specdec_q_gemm_small_m(x, ae, base, y, M, N, K, stream);
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K, kTmaMaxTokens)) return rc;
  const Params p = w12_params(x, ae, nullptr, base, nullptr, nullptr, nullptr, y, M, N, K);
  return launch_rows<kQ>(p, static_cast<cudaStream_t>(stream));
}

// Launch plan of specdec_q_gemm_small_m_v4, as specdec_w12_v9_plan (specdec_q_v2_plan's where K % 32 != 0).
int specdec_q_v4_plan(int M, int N, int K, int sms, long long* out) {
  if (K % 32 != 0) return specdec_q_v2_plan(M, N, K, sms, out);
  return rows_plan(kQ, M, N, K, sms, out);
}

// The Q view in row tiles where they pay (rows_pay: specdec_q_gemm_small_m_v4), else specdec_q_gemm_small_m_v2; same
// contracts, with specdec_q_v5_plan's out[5] bytes of workspace.
int specdec_q_gemm_small_m_v5(const void* x, const void* ae, const void* base, void* y, int M, int N, int K, void* workspace,
                              long long workspace_bytes, void* stream) {
  if (rows_take(kQ, M, N, K))
    return specdec_q_gemm_small_m_v4(x, ae, base, y, M, N, K, workspace, workspace_bytes, stream);
  return specdec_q_gemm_small_m_v2(x, ae, base, y, M, N, K, workspace, workspace_bytes, stream);
}

// Launch plan of specdec_q_gemm_small_m_v5: specdec_q_v4_plan's where the row tiles run, else specdec_q_v2_plan's.
int specdec_q_v5_plan(int M, int N, int K, int sms, long long* out) {
  return rows_or_plan(kQ, M, N, K, sms, out, specdec_q_v2_plan);
}

// bf16 weights in the row-tile CTAs of specdec_w12_gemm_small_m_v9 (tma_rows_kernel<kBf16>): same contracts as
// specdec_skinny_gemm_bf16_v2 (no workspace where K % 32 == 0: specdec_bf16_v4_plan's out[5] is 0).
int specdec_skinny_gemm_bf16_v4(const void* x, const void* w, void* y, int M, int N, int K, void* workspace, long long workspace_bytes,
                                void* stream) {
  if (K % 32 != 0) return specdec_skinny_gemm_bf16(x, w, y, M, N, K, stream);
  g_error[0] = 0;
  if (int rc = check_sizes(M, N, K, kTmaMaxTokens)) return rc;
  const Params p = w12_params(x, w, nullptr, nullptr, nullptr, nullptr, nullptr, y, M, N, K);  // the bf16 weights in ae's place
  return launch_rows<kBf16>(p, static_cast<cudaStream_t>(stream));
}

// Launch plan of specdec_skinny_gemm_bf16_v4, as specdec_w12_v9_plan (specdec_bf16_v2_plan's where K % 32 != 0).
int specdec_bf16_v4_plan(int M, int N, int K, int sms, long long* out) {
  if (K % 32 != 0) return specdec_bf16_v2_plan(M, N, K, sms, out);
  return rows_plan(kBf16, M, N, K, sms, out);
}

// bf16 weights in row tiles where they pay (rows_pay: specdec_skinny_gemm_bf16_v4), else specdec_skinny_gemm_bf16_v3;
// same contracts, with specdec_bf16_v5_plan's out[5] bytes of workspace.
int specdec_skinny_gemm_bf16_v5(const void* x, const void* w, void* y, int M, int N, int K, void* workspace, long long workspace_bytes,
                                void* stream) {
  if (rows_take(kBf16, M, N, K))
    return specdec_skinny_gemm_bf16_v4(x, w, y, M, N, K, workspace, workspace_bytes, stream);
  return specdec_skinny_gemm_bf16_v3(x, w, y, M, N, K, workspace, workspace_bytes, stream);
}

// Launch plan of specdec_skinny_gemm_bf16_v5: specdec_bf16_v4_plan's where the row tiles run, else specdec_bf16_v3_plan's.
int specdec_bf16_v5_plan(int M, int N, int K, int sms, long long* out) {
  return rows_or_plan(kBf16, M, N, K, sms, out, specdec_bf16_v3_plan);
}

}  // extern "C"
