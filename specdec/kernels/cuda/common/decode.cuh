// W12 / Q decode of AE words and nibbles into bf16x2 MMA fragments, and one chunk's mma.sync.
#pragma once

#include "params.cuh"
#include "chunk_loads.cuh"

namespace {

// Adds B to each 16-bit half of t that is nonzero (halves <= 0x07FF): B = base << 7 (exact) or
// base << 7 | 8 (Q view: the midpoint nibble with the base). min(t, 1) per half (VIMNMX.U16x2, a Hopper DPX
// instruction) is the nonzero flag of each half, and flags * B + t is one IMAD: B < 2^15, so the low half's
// product never reaches the high half.
__device__ __forceinline__ uint32_t add_base_if_nonzero(uint32_t t, uint32_t B) {
  return __vminu2(t, 0x00010001u) * B + t;
}

// One AE word (bytes k0, k2, k1, k3) and the nibble pairs of (k0, k1), (k2, k3) -> bf16x2 words.
__device__ __forceinline__ void decode_exact(uint32_t w, uint32_t nA, uint32_t nB, uint32_t X, uint32_t& pA, uint32_t& pB) {
  const uint32_t tA = ((w << 4) & 0x07F007F0u) | nA;
  const uint32_t tB = ((w >> 4) & 0x07F007F0u) | nB;
  pA = add_base_if_nonzero(tA, X) | ((w << 8) & 0x80008000u);
  pB = add_base_if_nonzero(tB, X) | (w & 0x80008000u);
}

__device__ __forceinline__ void decode_q(uint32_t w, uint32_t X, uint32_t& pA, uint32_t& pB) {
  const uint32_t tA = (w << 4) & 0x07F007F0u;
  const uint32_t tB = (w >> 4) & 0x07F007F0u;
  pA = add_base_if_nonzero(tA, X) | ((w << 8) & 0x80008000u);
  pB = add_base_if_nonzero(tB, X) | (w & 0x80008000u);
}

__device__ __forceinline__ uint32_t comp(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                          uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The A fragment of step s of a W12 / Q chunk: AE word s covers k 4s..4s+3 of the piece, pairs (4s, 4s+1) -> A cols
// 2t.. (a0 row g, a1 row g + 8), (4s+2, 4s+3) -> A cols 2t+8.. (a2, a3).
template <int KIND, bool VEC16>
__device__ __forceinline__ void decode_step(const ChunkRegs<KIND, VEC16>& r, int s, uint32_t X0, uint32_t X1, uint32_t& a0,
                                            uint32_t& a1, uint32_t& a2, uint32_t& a3) {
  if constexpr (KIND == kW12) {
    const uint32_t n0 = (s >> 1) == 0 ? r.nib[0].x : r.nib[0].y;
    const uint32_t n1 = (s >> 1) == 0 ? r.nib[1].x : r.nib[1].y;
    const int shA = (s & 1) ? 8 : 0;
    decode_exact(comp(r.ae[0], s), (n0 >> shA) & 0x000F000Fu, (n0 >> (shA + 4)) & 0x000F000Fu, X0, a0, a2);
    decode_exact(comp(r.ae[1], s), (n1 >> shA) & 0x000F000Fu, (n1 >> (shA + 4)) & 0x000F000Fu, X1, a1, a3);
  } else {
    decode_q(comp(r.ae[0], s), X0, a0, a2);
    decode_q(comp(r.ae[1], s), X1, a1, a3);
  }
}

// Decode one chunk and multiply it into acc. xs: this lane's x units of the chunk (zeros when g >= M).
template <int KIND, bool VEC16>
__device__ __forceinline__ void compute_chunk(float (&acc)[4], const ChunkRegs<KIND, VEC16>& r, const uint4 (&xs)[2],
                                              uint32_t X0, uint32_t X1) {
  if constexpr (KIND == kBf16) {
#pragma unroll
    for (int s = 0; s < 2; ++s)
      mma_16816(acc, comp(r.w[0], 2 * s), comp(r.w[1], 2 * s), comp(r.w[0], 2 * s + 1), comp(r.w[1], 2 * s + 1),
                comp(xs[0], 2 * s), comp(xs[0], 2 * s + 1));
  } else {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t a0, a1, a2, a3;
      decode_step(r, s, X0, X1, a0, a1, a2, a3);
      const uint4& xu = xs[s >> 1];
      mma_16816(acc, a0, a1, a2, a3, comp(xu, 2 * (s & 1)), comp(xu, 2 * (s & 1) + 1));
    }
  }
}

// compute_chunk for NT n-tiles of tokens: the chunk decoded once, multiplied into acc[j] for the tokens g + 8 j
// (this lane's x units xs[j]), tile after tile within each k step. (With NT = 1 the callers call compute_chunk
// itself: the same arithmetic, and the binary the H200 measurements were taken with.)
template <int KIND, bool VEC16, int NT>
__device__ __forceinline__ void compute_chunk_tiles(float (&acc)[NT][4], const ChunkRegs<KIND, VEC16>& r, const uint4 (&xs)[NT][2],
                                                    uint32_t X0, uint32_t X1) {
  if constexpr (KIND == kBf16) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const uint32_t a0 = comp(r.w[0], 2 * s), a1 = comp(r.w[1], 2 * s), a2 = comp(r.w[0], 2 * s + 1), a3 = comp(r.w[1], 2 * s + 1);
#pragma unroll
      for (int j = 0; j < NT; ++j) mma_16816(acc[j], a0, a1, a2, a3, comp(xs[j][0], 2 * s), comp(xs[j][0], 2 * s + 1));
    }
  } else {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t a0, a1, a2, a3;
      decode_step(r, s, X0, X1, a0, a1, a2, a3);
      const int h = 2 * (s & 1);
#pragma unroll
      for (int j = 0; j < NT; ++j) mma_16816(acc[j], a0, a1, a2, a3, comp(xs[j][s >> 1], h), comp(xs[j][s >> 1], h + 1));
    }
  }
}

}  // namespace
