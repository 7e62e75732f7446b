// A lane's loads of one chunk of weights straight from global memory (streaming, cp.async, L2 prefetch).
#pragma once

#include "params.cuh"

namespace {

// Chunk registers of one lane: rows g and g + 8.
template <int KIND, bool VEC16>
struct ChunkRegs;
template <bool VEC16>
struct ChunkRegs<kBf16, VEC16> {
  uint4 w[2];
};
template <bool VEC16>
struct ChunkRegs<kW12, VEC16> {
  uint4 ae[2];
  uint2 nib[2];
};
template <bool VEC16>
struct ChunkRegs<kQ, VEC16> {
  uint4 ae[2];
};

__device__ __forceinline__ uint4 ldg_stream128(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint2 ldg_stream64(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t ldg_stream32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// Loads of one chunk for rows (row0, row1); CHECK: the chunk may run past K (pieces past K read as zero).
template <int KIND, bool VEC16, bool CHECK>
__device__ __forceinline__ void load_chunk(ChunkRegs<KIND, VEC16>& r, const Params& p, int row0, int row1, int chunk, int t) {
  constexpr int P = Traits<KIND>::kPiece;
  const int k0 = chunk * Traits<KIND>::kChunk + P * t;  // first k of this lane's piece
  const size_t K = p.K;
  const int rows[2] = {row0, row1};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if constexpr (KIND == kBf16) {
      const uint8_t* ptr = p.w + (rows[i] * K + k0) * 2;
      r.w[i] = (!CHECK || k0 < p.K) ? ldg_stream128(ptr) : make_uint4(0, 0, 0, 0);
    } else {
      const uint8_t* pa = p.w + rows[i] * K + k0;
      const uint8_t* pn = p.nib + rows[i] * (K / 2) + k0 / 2;
      if constexpr (VEC16) {
        // K % 16 == 0: rows start 16-byte aligned (ae) and 8-byte aligned (nib); a piece is all in or all out.
        const bool in = !CHECK || k0 < p.K;
        r.ae[i] = in ? ldg_stream128(pa) : make_uint4(0, 0, 0, 0);
        if constexpr (KIND == kW12) r.nib[i] = in ? ldg_stream64(pn) : make_uint2(0, 0);
      } else {
        // K % 16 == 8: 8-byte ae loads, 4-byte nib loads, each half-piece checked on its own.
        const bool in0 = !CHECK || k0 < p.K;
        const bool in1 = !CHECK || k0 + 8 < p.K;
        uint2 a0 = in0 ? ldg_stream64(pa) : make_uint2(0, 0);
        uint2 a1 = in1 ? ldg_stream64(pa + 8) : make_uint2(0, 0);
        r.ae[i] = make_uint4(a0.x, a0.y, a1.x, a1.y);
        if constexpr (KIND == kW12) {
          r.nib[i].x = in0 ? ldg_stream32(pn) : 0u;
          r.nib[i].y = in1 ? ldg_stream32(pn + 4) : 0u;
        }
      }
    }
  }
}

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// L2 prefetch of one lane's piece (first k = k0 < K) of rows (row0, row1).
template <int KIND>
__device__ __forceinline__ void prefetch_chunk(const Params& p, int row0, int row1, int k0) {
  const size_t K = p.K;
  const int rows[2] = {row0, row1};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if constexpr (KIND == kBf16) {
      prefetch_l2(p.w + (rows[i] * K + k0) * 2);
    } else {
      prefetch_l2(p.w + rows[i] * K + k0);
      if constexpr (KIND == kW12) prefetch_l2(p.nib + rows[i] * (K / 2) + k0 / 2);
    }
  }
}

}  // namespace
