// What a weight-streaming ring reaches when its consumers do no math: the memory side of the tensor-map GEMMs
// (specdec/kernels/cuda/skinny_gemm.cu, tma_gemm_kernel and tma_rows_kernel) alone, by the layout of a stage's bytes in
// global memory.
//
// The ring is the GEMMs' ring, built from the library's own device functions (this file includes skinny_gemm.cu): one
// producer thread and consumer warps that wait on a stage's full barrier, read all of its bytes from shared memory
// (16-byte loads, summed as 32-bit words so nothing is optimised away and every byte is counted) and release it, 6
// stages (7 for the wide geometry); K split over gridDim.y. Two geometries: the split-K kernels' (64-row CTAs, stages of 128 weights a row, eight
// consumer warps, two CTAs an SM) and the row tiles' (16-row CTAs over the whole of K, stages of 256 weights a row,
// four consumer warps, five CTAs an SM). Layouts of a stage:
//   0 rows W12:  a [64][128] box of the ae plane and a [64][64] box of the nib plane (12,288 bytes, 128 row pieces)
//   1 rows Q:    the [64][128] ae box alone (8,192 bytes)
//   2 rows bf16: a [64][256 bytes] box (16,384 bytes)
//   3 tiled W12: the same 12,288 bytes stored contiguously (one bulk copy: stage s of row block b at (b S + s) 12,288)
//   4 tiled bf16: 16,384 contiguous bytes
//   5 rows16 W12: a [16][256] box of ae and a [16][128] box of nib (6,144 bytes, 32 row pieces of 256 and 128 bytes)
//   6 rows16 Q:   the [16][256] ae box (4,096 bytes)
//   7 rows16 bf16: a [16][256] box of bf16 values (8,192 bytes, 16 row pieces of 512 bytes)
//   8, 9, 10 tiled16 W12 / Q / bf16: the same 6,144 / 4,096 / 8,192 bytes a stage stored contiguously
//   11 wide W12:   the wide kernels' geometry (tma_wide_kernel: 128-row CTAs, stages of 64 weights a row, eight
//                  consumer warps, one CTA an SM, 7 stages): a [128][64] ae box and a [128][32] nib box (12,288 bytes,
//                  256 row pieces of 64 and 32 bytes); the GEMM's x box (L2) is not read
//   12 wide Q:     its [128][64] ae box (8,192 bytes)
//   13 wide128 W12: that geometry with stages of 128 weights a row: [128][128] ae and [128][64] nib (24,576 bytes)
// The sum of every word read lands in *sum (one atomic a CTA), so the caller can check that each byte of the planes
// was read exactly once. L2 promotion of the tensor maps: 0 none, 1 128 bytes, 2 256 bytes (the GEMMs use 256).
//
// Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 --shared -Xcompiler -fPIC -cudart static stream_probe.cu
// -o stream_probe.so

#include "../../specdec/kernels/cuda/skinny_gemm.cu"

namespace probe {

constexpr int kStages = 6;
constexpr int kAlign = 128;

enum Layout : int {
  kRowsW12 = 0,
  kRowsQ = 1,
  kRowsBf16 = 2,
  kTiledW12 = 3,
  kTiledBf16 = 4,
  kRows16W12 = 5,
  kRows16Q = 6,
  kRows16Bf16 = 7,
  kTiled16W12 = 8,
  kTiled16Q = 9,
  kTiled16Bf16 = 10,
  kWideW12 = 11,
  kWideQ = 12,
  kWide128W12 = 13,
};
constexpr int kLayouts = 14;

__host__ __device__ constexpr bool wide(int layout) { return layout >= kWideW12; }
__host__ __device__ constexpr bool row_tile(int layout) { return layout >= kRows16W12 && !wide(layout); }
__host__ __device__ constexpr int rows_of(int layout) { return wide(layout) ? 128 : row_tile(layout) ? 16 : 64; }
__host__ __device__ constexpr int stage_k_of(int layout) {
  return layout == kWideW12 || layout == kWideQ ? 64 : row_tile(layout) ? 256 : 128;
}
__host__ __device__ constexpr int consumers_of(int layout) { return row_tile(layout) ? 4 : 8; }
__host__ __device__ constexpr int threads_of(int layout) { return (consumers_of(layout) + 1) * 32; }
__host__ __device__ constexpr int ctas_per_sm_of(int layout) { return wide(layout) ? 1 : row_tile(layout) ? 5 : 2; }
__host__ __device__ constexpr int stages_of(int layout) { return wide(layout) ? 7 : kStages; }
__host__ __device__ constexpr bool tiled(int layout) {
  return layout == kTiledW12 || layout == kTiledBf16 || layout == kTiled16W12 || layout == kTiled16Q || layout == kTiled16Bf16;
}
// Bytes a weight: W12 1.5, Q 1, bf16 2, in tenths.
__host__ __device__ constexpr int tenths_a_weight(int layout) {
  return (layout == kRowsQ || layout == kRows16Q || layout == kTiled16Q || layout == kWideQ)                             ? 10
         : (layout == kRowsBf16 || layout == kTiledBf16 || layout == kRows16Bf16 || layout == kTiled16Bf16) ? 20
                                                                                                            : 15;
}
__host__ __device__ constexpr int stage_bytes(int layout) { return rows_of(layout) * stage_k_of(layout) * tenths_a_weight(layout) / 10; }

char g_probe_error[512] = "";

// The sum-only consumer: consumer warp `warp` of CONSUMERS waits for each of `n` stages of `bytes` in the ring
// in turn, adds its share of the stage's 32-bit words (16-byte loads) and releases the stage; the warp's sum.
template <int STAGES, int CONSUMERS>
__device__ unsigned long long sum_stages(const unsigned char* ring, int bytes, uint64_t* full_bar, uint64_t* empty_bar, int n, int warp,
                                         int lane) {
  unsigned long long acc = 0ull;
  int s = 0;
  uint32_t round = 0;
  for (int it = 0; it < n; ++it) {
    mbar_wait(smem_addr(&full_bar[s]), round & 1);
    const uint4* words = reinterpret_cast<const uint4*>(ring + static_cast<size_t>(s) * bytes);
    for (int i = warp * 32 + lane; i < bytes / 16; i += CONSUMERS * 32) {
      const uint4 v = words[i];
      acc += static_cast<unsigned long long>(v.x) + v.y + v.z + v.w;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(smem_addr(&empty_bar[s]));
    if (++s == STAGES) s = 0, ++round;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
  return acc;
}

template <int LAYOUT>
__global__ void __launch_bounds__(threads_of(LAYOUT), ctas_per_sm_of(LAYOUT))
    stream_probe_kernel(const unsigned char* tiled, int K, int k_splits, unsigned long long* sum, const __grid_constant__ CUtensorMap map_a,
                        const __grid_constant__ CUtensorMap map_b) {
  constexpr int kBytes = stage_bytes(LAYOUT);
  constexpr int kRows = rows_of(LAYOUT), kStageK = stage_k_of(LAYOUT), kConsumerWarps = consumers_of(LAYOUT);
  constexpr int kRing = stages_of(LAYOUT);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kRing];
  __shared__ __align__(8) uint64_t empty_bar[kRing];
  __shared__ unsigned long long cta_sum;
  unsigned char* smem = smem_raw + ((kAlign - (smem_addr(smem_raw) & (kAlign - 1))) & (kAlign - 1));
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int n_stages = K / kStageK;
  const int s_lo = static_cast<int>((static_cast<long long>(blockIdx.y) * n_stages) / k_splits);
  const int s_hi = static_cast<int>((static_cast<long long>(blockIdx.y + 1) * n_stages) / k_splits);
  if (tid == 0) {
    cta_sum = 0ull;
    for (int s = 0; s < kRing; ++s) {
      mbar_init(smem_addr(&full_bar[s]), 1);
      mbar_init(smem_addr(&empty_bar[s]), kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (warp == kConsumerWarps) {
    if (lane == 0) {
      const uint64_t stream = l2_stream_policy();
      int s = 0;
      uint32_t round = 0;
      for (int st = s_lo; st < s_hi; ++st) {
        if (round > 0) mbar_wait(smem_addr(&empty_bar[s]), (round - 1) & 1);
        const uint32_t full = smem_addr(&full_bar[s]);
        mbar_arrive_expect_tx(full, kBytes);
        const uint32_t dst = smem_addr(smem + static_cast<size_t>(s) * kBytes);
        const int k0 = st * kStageK;
        if constexpr (LAYOUT == kRowsW12 || LAYOUT == kRows16W12 || LAYOUT == kWideW12 || LAYOUT == kWide128W12) {
          tma_load_2d(dst, &map_a, k0, blockIdx.x * kRows, full, stream);
          tma_load_2d(dst + kRows * kStageK, &map_b, k0 / 2, blockIdx.x * kRows, full, stream);
        } else if constexpr (LAYOUT == kRowsQ || LAYOUT == kRows16Q || LAYOUT == kRows16Bf16 || LAYOUT == kWideQ) {
          tma_load_2d(dst, &map_a, k0, blockIdx.x * kRows, full, stream);  // rows16 bf16: a map of 16-bit values
        } else if constexpr (LAYOUT == kRowsBf16) {
          tma_load_2d(dst, &map_a, 2 * k0, blockIdx.x * kRows, full, stream);
        } else {
          const size_t at = (static_cast<size_t>(blockIdx.x) * n_stages + st) * kBytes;
          bulk_copy(dst, tiled + at, kBytes, full, stream);
        }
        if (++s == kRing) s = 0, ++round;
      }
    }
  } else {
    const unsigned long long acc = sum_stages<kRing, kConsumerWarps>(smem, kBytes, full_bar, empty_bar, s_hi - s_lo, warp, lane);
    if (lane == 0) atomicAdd(&cta_sum, acc);
  }
  __syncthreads();
  if (tid == 0) atomicAdd(sum, cta_sum);
}

// A [rows][inner] plane of bytes (or of 16-bit values with `wide`) read in [box_rows][box_inner] boxes under L2
// promotion 0 none, 1 128 bytes, 2 256 bytes (the library's encode_2d); 2 with the message in g_probe_error on failure.
int encode(CUtensorMap* map, const void* base, unsigned long long inner, unsigned long long rows, unsigned box_inner, unsigned box_rows,
           int promotion, bool wide = false) {
  const CUtensorMapL2promotion promo = promotion == 0   ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                                       : promotion == 1 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                                        : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  const CUtensorMapDataType type = wide ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const int rc = encode_2d(map, type, base, inner, rows, inner * (wide ? 2 : 1), box_inner, box_rows, "plane", promo);
  if (rc != 0) snprintf(g_probe_error, sizeof(g_probe_error), "%s", g_error);
  return rc;
}

template <int LAYOUT>
int launch(const void* a, const void* b, int N, int K, int k_splits, int promotion, unsigned long long* sum, cudaStream_t stream) {
  static bool attr_set = false;
  constexpr int kRows = rows_of(LAYOUT), kStageK = stage_k_of(LAYOUT);
  const int smem = stages_of(LAYOUT) * stage_bytes(LAYOUT) + kAlign;
  if (!attr_set) {
    cudaError_t e = cudaFuncSetAttribute(stream_probe_kernel<LAYOUT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess)  // as the GEMMs: the largest shared-memory carveout, for two (five) CTAs an SM
      e = cudaFuncSetAttribute(stream_probe_kernel<LAYOUT>, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) {
      snprintf(g_probe_error, sizeof(g_probe_error), "cudaFuncSetAttribute: %s", cudaGetErrorString(e));
      return 1;
    }
    attr_set = true;
  }
  CUtensorMap map_a{}, map_b{};
  if (LAYOUT == kRowsW12 || LAYOUT == kRowsQ || LAYOUT == kRows16W12 || LAYOUT == kRows16Q || wide(LAYOUT)) {
    if (int rc = encode(&map_a, a, K, N, kStageK, kRows, promotion)) return rc;
  } else if (LAYOUT == kRowsBf16) {
    if (int rc = encode(&map_a, a, 2ull * K, N, 2 * kStageK, kRows, promotion)) return rc;
  } else if (LAYOUT == kRows16Bf16) {
    if (int rc = encode(&map_a, a, K, N, kStageK, kRows, promotion, true)) return rc;
  }
  if (LAYOUT == kRowsW12 || LAYOUT == kRows16W12 || LAYOUT == kWideW12 || LAYOUT == kWide128W12) {
    if (int rc = encode(&map_b, b, K / 2, N, kStageK / 2, kRows, promotion)) return rc;
  }
  stream_probe_kernel<LAYOUT><<<dim3(N / kRows, k_splits, 1), dim3(threads_of(LAYOUT), 1, 1), smem, stream>>>(
      static_cast<const unsigned char*>(a), K, k_splits, sum, map_a, map_b);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    snprintf(g_probe_error, sizeof(g_probe_error), "stream_probe_kernel launch: %s", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}

}  // namespace probe

using namespace probe;

extern "C" {

// Reads a [N][K]-weight matrix's planes once through the ring of `layout` with K split k_splits ways; *sum += the
// sum of every 32-bit word read. Rows layouts: `a` the ae plane [N][K] bytes (bf16: [N][2K] bytes), `b` the nib plane
// [N][K / 2] (W12 only). Tiled layouts: `a` the contiguous stages. Needs N a multiple of the layout's rows (64, 16
// for the row tiles, 128 for the wide geometry), K of its stage (64, 128 or 256 weights), k_splits <= K / stage, 16-byte aligned planes. 0 on success,
// else the message in specdec_probe_error().
int specdec_probe_stream(int layout, const void* a, const void* b, int N, int K, int k_splits, int promotion,
                         unsigned long long* sum, cudaStream_t stream) {
  if (layout < 0 || layout >= kLayouts) {
    snprintf(g_probe_error, sizeof(g_probe_error), "layout: expected 0..%d, got %d", kLayouts - 1, layout);
    return 2;
  }
  const int rows = rows_of(layout), stage_k = stage_k_of(layout);
  if (N % rows != 0 || K % stage_k != 0 || k_splits < 1 || k_splits > K / stage_k) {
    snprintf(g_probe_error, sizeof(g_probe_error), "expected N %% %d == 0, K %% %d == 0, 1 <= k_splits <= K / %d, got N=%d K=%d k_splits=%d",
             rows, stage_k, stage_k, N, K, k_splits);
    return 2;
  }
  switch (layout) {
    case kRowsW12: return launch<kRowsW12>(a, b, N, K, k_splits, promotion, sum, stream);
    case kRowsQ: return launch<kRowsQ>(a, b, N, K, k_splits, promotion, sum, stream);
    case kRowsBf16: return launch<kRowsBf16>(a, b, N, K, k_splits, promotion, sum, stream);
    case kTiledW12: return launch<kTiledW12>(a, b, N, K, k_splits, promotion, sum, stream);
    case kTiledBf16: return launch<kTiledBf16>(a, b, N, K, k_splits, promotion, sum, stream);
    case kRows16W12: return launch<kRows16W12>(a, b, N, K, k_splits, promotion, sum, stream);
    case kRows16Q: return launch<kRows16Q>(a, b, N, K, k_splits, promotion, sum, stream);
    case kRows16Bf16: return launch<kRows16Bf16>(a, b, N, K, k_splits, promotion, sum, stream);
    case kTiled16W12: return launch<kTiled16W12>(a, b, N, K, k_splits, promotion, sum, stream);
    case kTiled16Q: return launch<kTiled16Q>(a, b, N, K, k_splits, promotion, sum, stream);
    case kTiled16Bf16: return launch<kTiled16Bf16>(a, b, N, K, k_splits, promotion, sum, stream);
    case kWideW12: return launch<kWideW12>(a, b, N, K, k_splits, promotion, sum, stream);
    case kWideQ: return launch<kWideQ>(a, b, N, K, k_splits, promotion, sum, stream);
    default: return launch<kWide128W12>(a, b, N, K, k_splits, promotion, sum, stream);
  }
}

const char* specdec_probe_error() { return g_probe_error; }

}  // extern "C"
