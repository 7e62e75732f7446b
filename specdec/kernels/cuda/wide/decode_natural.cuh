// The W12 / Q decode in natural k order, as the wide kernels' A fragments need it.
#pragma once

#include "../common/decode.cuh"

namespace {

__device__ __forceinline__ uint32_t lds32(const unsigned char* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Keeps A fragments live (and unmoved) up to this point: an empty asm that reads and writes each register.
__device__ __forceinline__ void keep_live(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[q][i])::"memory");
}

// One bf16x2 word in natural k order from an AE word w (bytes k0, k2, k1, k3) and its nibble pair n: (k0, k1) for an
// even lane t, (k2, k3) for an odd one. decode_exact's pA and pB in one formula for both: E|m_hi of k0, k1 to bits
// 4..10 and 20..26 is w rotated right by 28 (w << 4), of k2, k3 by 4 (w >> 4), the bits wrapped around landing outside
// the mask; the signs of k0, k1 are w << 8, of k2, k3 w itself: w * sign_mul (256 or 1), an IMAD on the FMA pipe
// rather than a shift on the integer ALU, which the rest of the decode keeps busy (benchmarks/NOTES.md, "The wide
// kernels' decode on the integer pipe"). rot_em, sign_mul: 28, 256 for even t, 4, 1 for odd t. X: the row's base << 7
// (the Q view: | 8, with n = 0).
__device__ __forceinline__ uint32_t decode_natural(uint32_t w, uint32_t n, uint32_t X, uint32_t rot_em, uint32_t sign_mul) {
  const uint32_t t = (__funnelshift_r(w, w, rot_em) & 0x07F007F0u) | n;
  return add_base_if_nonzero(t, X) | ((w * sign_mul) & 0x80008000u);
}

}  // namespace
