// A persistent call's units cut into equal runs, one a CTA: the arithmetic host and device share.
#pragma once

namespace {

constexpr int kStreamKMaxPieces = 64;  // pieces of a row block at most (make_stream_k_plan keeps the CTAs below it)
// I: the integer type of the unit arithmetic, long long, or int where units x (CTAs + 1) fits in one (the wide
// kernel's: a 32-bit division is a fraction of a 64-bit one's instructions).
template <typename I>
__host__ __device__ __forceinline__ I stream_k_unit_lo(I cta, I units, I ctas) {
  return cta * units / ctas;
}
// The CTA whose run holds unit u: the largest c with stream_k_unit_lo(c) <= u.
template <typename I>
__host__ __device__ __forceinline__ int stream_k_cta_of(I u, I units, I ctas) {
  return static_cast<int>(((u + 1) * ctas + units - 1) / units - 1);
}
// Workspace slot of CTA c's piece of the row block whose first unit is `block_lo`.
template <typename I>
__host__ __device__ __forceinline__ int stream_k_slot(int c, I block_lo, I units, I ctas) {
  return 2 * c + (stream_k_unit_lo<I>(c, units, ctas) < block_lo ? 1 : 0);
}

}  // namespace
