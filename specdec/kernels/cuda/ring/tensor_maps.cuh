// Tensor maps encoded through the driver, and a launch in programmatic dependent launch.
#pragma once

#include "../common/params.cuh"
#include "../common/launch_support.cuh"

namespace {

using TensorMapEncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                          const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                          CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled from the driver, through the runtime (no link against libcuda); nullptr when missing.
TensorMapEncodeTiled tensor_map_encoder() {
  static TensorMapEncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return static_cast<TensorMapEncodeTiled>(nullptr);
    return reinterpret_cast<TensorMapEncodeTiled>(f);
  }();
  return fn;
}

// A 2-D row-major tensor [rows][inner] of `type` at `base` (row stride `row_bytes`), read in boxes of
// [box_rows][box_inner]; elements past its edges read as zeros; `promotion`: the L2 sector promotion of its loads;
// `swizzle`: how a box lands in shared memory (plainly row after row, or the 128-byte swizzle wgmma reads).
// 2 with the message set on failure.
int encode_2d(CUtensorMap* map, CUtensorMapDataType type, const void* base, unsigned long long inner, unsigned long long rows,
              unsigned long long row_bytes, unsigned int box_inner, unsigned int box_rows, const char* what,
              CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
  const TensorMapEncodeTiled encode = tensor_map_encoder();
  if (encode == nullptr) {
    snprintf(g_error, sizeof(g_error), "cuTensorMapEncodeTiled is not available from the driver");
    return 2;
  }
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) {
    snprintf(g_error, sizeof(g_error), "%s: expected a 16-byte aligned address for a tensor map, got %p", what, base);
    return 2;
  }
  const cuuint64_t dims[2] = {inner, rows};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_inner, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    snprintf(g_error, sizeof(g_error), "cuTensorMapEncodeTiled(%s, %llu x %llu, box %u x %u): error %d", what, rows, inner, box_rows,
             box_inner, static_cast<int>(r));
    return 2;
  }
  return 0;
}

// How the tensor-map kernels this thread launches next launch (../README.md, "Programmatic dependent launch"): 0 plainly;
// 1 programmatically, their prologue and the weights of their first stages overlapping the kernels before them, each
// CTA letting the next kernel start after its K loop (the persistent kernel's producer once it has issued its last
// copy). Set per thread by specdec_set_programmatic_launch before each launch (specdec/kernels/launch.py decides).
thread_local int g_programmatic_launch = 0;

// The tensor maps of a tensor-map kernel of KIND reading boxes of [rows][sk] weights: ae (bf16: the weights), nib (W12;
// the Q and bf16 kernels get a copy of ae, never read) and x, read in boxes of [x_rows][sk] (0: [M][sk]); x's and ae's
// boxes laid out by x_swizzle and ae_swizzle.
template <int KIND>
int encode_weight_maps(const Params& p, unsigned int rows, unsigned int sk, CUtensorMap* ae_map, CUtensorMap* nib_map,
                       CUtensorMap* x_map, unsigned int x_rows = 0, CUtensorMapSwizzle x_swizzle = CU_TENSOR_MAP_SWIZZLE_NONE,
                       CUtensorMapSwizzle ae_swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
  const unsigned long long K = p.K, N = p.N;
  if (KIND == kBf16) {
    if (int rc = encode_2d(ae_map, CU_TENSOR_MAP_DATA_TYPE_UINT16, p.w, K, N, 2 * K, sk, rows, "weight")) return rc;
  } else if (int rc = encode_2d(ae_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.w, K, N, K, sk, rows, "ae", CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                               ae_swizzle)) {
    return rc;
  }
  if (KIND == kW12) {
    if (int rc = encode_2d(nib_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.nib, K / 2, N, K / 2, sk / 2, rows, "nib")) return rc;
  } else {
    *nib_map = *ae_map;
  }
  return encode_2d(x_map, CU_TENSOR_MAP_DATA_TYPE_UINT16, p.x, K, p.M, 2 * K, sk, x_rows > 0 ? x_rows : p.M, "x",
                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, x_swizzle);
}

// kernel<<<grid, threads, smem_bytes, stream>>>(args...), in programmatic dependent launch where this thread asked for it
// (specdec_set_programmatic_launch); the launch's error, or the first one after it.
template <typename Kernel, typename... Args>
cudaError_t launch_tma_kernel(Kernel kernel, dim3 grid, int threads, int smem_bytes, cudaStream_t stream, Params p, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(threads, 1, 1);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (g_programmatic_launch != 0) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  cudaError_t e = cudaLaunchKernelEx(&config, kernel, p, args...);
  if (e == cudaSuccess) e = cudaGetLastError();
  return e;
}

}  // namespace
