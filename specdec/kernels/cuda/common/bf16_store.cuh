// fp32 -> bf16 rounding and the store of one output row.
#pragma once

#include "params.cuh"

namespace {

// fp32 -> bf16 bits, round to nearest even; a NaN stays a (quiet) NaN.
__device__ __forceinline__ uint16_t bf16_bits_rn(float v) {
  const uint32_t b = __float_as_uint(v);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((b >> 16) | 0x0040u);
  return static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// y[m, row] = out[m] as bf16 for m < M.
template <int TOK = kMaxTokens>
__device__ __forceinline__ void store_bf16_row(const Params& p, int row, int M, const float (&out)[TOK]) {
#pragma unroll
  for (int m = 0; m < TOK; ++m)
    if (m < M) p.y[static_cast<size_t>(m) * p.N + row] = bf16_bits_rn(out[m]);
}

}  // namespace
