// What every launch uses: errors, per-device attributes, the SM count, the split-K workspace, W12 operands.
#pragma once

#include "params.cuh"
#include "plan.cuh"

namespace {

constexpr int kSplitCounterAlign = 256;  // bytes: a workspace's counters take their bytes rounded up to this
// Workspace of the split-K kernels: the fp32 partials [grid_x][k_splits][rows of a CTA: 16 rt_per_cta, 64, or 128 for
// the wide kernel][M tokens] from its start, and its row-block counters (zero between launches) at its end, none without
// K splits; of tma_stream_k_kernel: 2 x grid_x partial tiles [64 rows][M tokens], and the counters of its row blocks.
// A workspace larger than a plan needs is used the same way: every launch's partials start at the same address, and
// launches of plans with other counts of row blocks can share one workspace of at least twice the larger's bytes
// (each one's partials end below half of it, each one's counters begin above).
long long split_partial_bytes(const Plan& pl, int M) {
  const long long tiles = pl.stream_k ? 2LL * pl.grid_x : static_cast<long long>(pl.grid_x) * pl.k_splits;
  return tiles * (pl.rt_per_cta * 16) * (pl.partial_tokens > 0 ? pl.partial_tokens : M) * 4;
}
long long split_workspace_bytes(const Plan& pl, int M) {
  if (!pl.stream_k && pl.k_splits == 1) return 0;
  const long long blocks = pl.stream_k ? pl.row_blocks : pl.grid_x;
  const long long counters = (blocks * 4 + kSplitCounterAlign - 1) / kSplitCounterAlign * kSplitCounterAlign;
  return counters + split_partial_bytes(pl, M);
}

thread_local char g_error[512] = "";

int fail(const char* what, cudaError_t err) {
  snprintf(g_error, sizeof(g_error), "%s: %s", what, cudaGetErrorString(err));
  cudaGetLastError();  // reported here: a later launch's cudaGetLastError check must not report it again as its own
  return 1;
}

// Kernel attributes (dynamic shared memory, cluster sizes) are set per device: what a launcher has set is kept per
// device, so a process that uses several GPUs sets them on each. here() is the current device's entry (a throwaway
// one, reset each call, when the device is unknown or past kMaxDevices).
constexpr int kMaxDevices = 64;
template <typename T>
struct PerDevice {
  T value[kMaxDevices] = {};
  T scratch{};
  T& here() {
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return scratch = T{};
    return value[dev];
  }
};

int sm_count() {
  static int cached[64] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  if (dev < 64 && cached[dev]) return cached[dev];
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return -1;
  if (dev < 64) cached[dev] = sms;
  return sms;
}

// 0 when the plan's dynamic shared memory fits `limit`, else 2 with the message set.
int check_smem(const Plan& pl, const Params& p, int limit) {
  if (pl.smem_bytes <= limit) return 0;
  snprintf(g_error, sizeof(g_error), "K=%d with M=%d needs %d bytes of shared memory per CTA (limit %d)", p.K, p.M, pl.smem_bytes,
           limit);
  return 2;
}

// Where a plan's buffers lie in a split-K workspace of `workspace_bytes` (at least the plan's need), in bytes from its
// start: out[0] the fp32 partials (0), out[1] their bytes, out[2] the per-row-block counters (at the workspace's end,
// 4-byte aligned), out[3] the counters' bytes (rounded up to kSplitCounterAlign); all 0 for a plan without K splits.
void split_layout(const Plan& pl, int M, long long workspace_bytes, long long* out) {
  const long long need = split_workspace_bytes(pl, M);
  const long long partial = need > 0 ? split_partial_bytes(pl, M) : 0;
  out[0] = 0;
  out[1] = partial;
  out[2] = need > 0 ? (workspace_bytes - (need - partial)) & ~3LL : 0;
  out[3] = need - partial;
}

// 2 with the message set when a workspace of `workspace_bytes` is smaller than the `need` of an M x N x K call, else 0.
int check_workspace(long long need, long long workspace_bytes, int M, int N, int K) {
  if (workspace_bytes >= need) return 0;
  snprintf(g_error, sizeof(g_error), "M=%d N=%d K=%d needs a workspace of %lld bytes, got %lld", M, N, K, need, workspace_bytes);
  return 2;
}

// The split-K workspace of a plan, laid out by split_layout; 2 with the message set when `workspace` is smaller than
// the plan needs.
int split_buffers(const Plan& pl, const Params& p, void* workspace, long long workspace_bytes, float** partials,
                  unsigned int** counters) {
  const long long need = split_workspace_bytes(pl, p.M);
  if (int rc = check_workspace(need, need > 0 && workspace == nullptr ? 0LL : workspace_bytes, p.M, p.N, p.K)) return rc;
  unsigned char* ws = static_cast<unsigned char*>(workspace);
  long long at[4];
  split_layout(pl, p.M, workspace_bytes, at);
  *counters = need > 0 ? reinterpret_cast<unsigned int*>(ws + at[2]) : nullptr;
  *partials = need > 0 ? reinterpret_cast<float*>(ws + at[0]) : nullptr;
  return 0;
}

// A kernel's dynamic shared memory up to `bytes` and the largest shared-memory carveout (the kernels do not use L1).
template <typename Kernel>
int set_smem_attributes(Kernel kernel, int bytes) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return fail("cudaFuncSetAttribute(carveout)", e);
  return 0;
}

// `kernel` over (grid_x, k_splits) CTAs of `threads` threads, the K splits of a row block one thread-block cluster.
template <typename Kernel>
int launch_in_clusters(Kernel kernel, const Plan& pl, int threads, cudaStream_t stream, const Params& p) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(pl.grid_x, pl.k_splits, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.dynamicSmemBytes = pl.smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = pl.k_splits;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p);
  if (e != cudaSuccess) return fail("cudaLaunchKernelEx", e);
  return 0;
}

// The kernel parameters of a W12 call: planes of specdec/formats/w12.py.
Params w12_params(const void* x, const void* ae, const void* nib, const void* base, const void* esc_ptr, const void* esc_pos,
                  const void* esc_bits, void* y, int M, int N, int K) {
  Params p{};
  p.x = static_cast<const uint16_t*>(x);
  p.w = static_cast<const uint8_t*>(ae);
  p.nib = static_cast<const uint8_t*>(nib);
  p.base = static_cast<const uint8_t*>(base);
  p.esc_ptr = static_cast<const int32_t*>(esc_ptr);
  p.esc_pos = static_cast<const uint16_t*>(esc_pos);
  p.esc_bits = static_cast<const uint16_t*>(esc_bits);
  p.y = static_cast<uint16_t*>(y);
  p.M = M, p.N = N, p.K = K;
  return p;
}

}  // namespace
