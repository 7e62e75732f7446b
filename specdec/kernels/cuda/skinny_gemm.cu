// Weight-streaming GEMMs for few tokens: y[M, N] = x[M, K] @ W^T, bf16 x and y, fp32 accumulation, M <= 8.
//
// Three weight formats (README.md beside this file has the math, the byte floor and the predictions):
//   bf16 W [N, K];  W12 exact (planes ae/nib/base + escape tiles, specdec/formats/w12.py);  Q view (ae + base).
//
// Layout of the work. A warp owns a tile of 16 weight rows and walks K in chunks. Inside a chunk the 4 lanes
// of a quad (same lane / 4 = g) read one contiguous piece each of rows g and g + 8: 16 weights for W12 / Q
// (one 16-byte load of ae, one 8-byte load of nib per row), 8 weights for bf16 (one 16-byte load per row),
// so a quad covers 64 contiguous bytes of ae (32 of nib, 64 of bf16) per row and load: whole sectors.
// The decoded bf16x2 words are the A operand of mma.sync m16n8k16 (weight rows = MMA rows), the tokens the
// B operand (n = 8, tokens >= M are zeros). Every weight row uses the same permutation of k inside a chunk,
// so the B fragment is x permuted the same way: lane (g, t) needs x[g, piece t] for the whole chunk, which
// sits contiguously in shared memory (two conflict-free 16-byte loads per chunk for W12 / Q, one for bf16).
//
// A CTA (8 warps) owns rt_per_cta row tiles; its warps split the CTA's K range (a contiguous share each) and add
// their partial sums in shared memory in a fixed order. For small N the K range is also split over the CTAs
// of a thread-block cluster (k_splits <= 8 along gridDim.y): each CTA reduces its share of the rows by
// reading the other CTAs' partials through distributed shared memory, in rank order (deterministic, no
// atomics, no second launch). The CTA that owns a row applies that row's escapes at the end: the plane
// slot holds a signed zero, so the correction is x[m, col] * value in fp32, in the stored order.
//
// Build (see build.py): nvcc -O3 -arch=sm_90a -std=c++17 --shared -Xcompiler -fPIC -cudart static
//   skinny_gemm.cu -o build/specdec_cuda_kernels.so

#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace cg = cooperative_groups;

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;        // chunks whose loads are issued before the first is used
constexpr int kMaxTokens = 8;
constexpr int kTmaMaxTokens = 16;  // the tensor-map kernels: two MMA n-tiles of 8 tokens
constexpr int kMaxClusterSplits = 8;
constexpr int kEscapeTile = 256;  // specdec.kernels.w12_gemm.ESCAPE_TILE
constexpr int kXBytesHard = 200 * 1024;  // dynamic shared memory limit requested for the kernels
constexpr int kMinChunksPerWarp = 4;
// Shared memory after x: warp partials [8][16][8] fp32, the escape round (int2 + row byte per thread, counts);
// W12 adds the band's escape offsets after it.
constexpr int kSmemFixed = kWarps * 128 * 4 + kThreads * 9 + kWarps * 4;

enum Kind : int { kBf16 = 0, kW12 = 1, kQ = 2 };

// Weights (k) per chunk per row: 4 lanes x piece.
template <int KIND>
struct Traits {
  static constexpr int kPiece = KIND == kBf16 ? 8 : 16;  // weights per lane per row per chunk
  static constexpr int kChunk = 4 * kPiece;
  static constexpr int kXUnits = kPiece / 8;             // 16-byte x units per lane per chunk
};

struct Params {
  const uint16_t* x;         // [M, K] bf16 bits
  const uint8_t* w;          // bf16 weight [N, K] (as bytes) or ae [N, K]
  const uint8_t* nib;        // [N, K / 2]
  const uint8_t* base;       // [N]
  const int32_t* esc_ptr;    // [ceil(N/256) * ceil(K/256) + 1]
  const uint16_t* esc_pos;   // [E]
  const uint16_t* esc_bits;  // [E]
  uint16_t* y;               // [M, N] bf16 bits
  int M, N, K;
  int rt_per_cta;  // row tiles (16 rows) per CTA: 1, 2, 4 or 8; warps per row tile = 8 / rt_per_cta
  int k_splits;    // CTAs of a cluster sharing the row block, each a slice of K
  int n_chunks;    // ceil(K / chunk)
};

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

// The escapes of the CTA's 256-row band are contiguous (tiles row-major). Rounds of THREADS escapes: each
// thread tests one, those of rows [r_lo, r_lo + rows) are packed in stored order (ballot + prefix) into shared
// memory at `scratch`, then every row thread adds its own in that order: the same fmas in the same order as a
// serial walk of the band. `row_local` = the thread's row - r_lo.
template <int THREADS, int TOK = kMaxTokens>
__device__ __forceinline__ void add_band_escapes(const Params& p, const int* band_ptr, int col_tiles, int band_row, int rows,
                                                 bool has_row, int row_local, int M, void* scratch, float (&out)[TOK]) {
  constexpr int kWarpsT = THREADS / 32;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int2* esc_list = reinterpret_cast<int2*>(scratch);                                // (column, value bits) [THREADS]
  unsigned char* esc_row = reinterpret_cast<unsigned char*>(esc_list + THREADS);   // row - r_lo [THREADS]
  int* warp_kept = reinterpret_cast<int*>(esc_row + THREADS);                      // [THREADS / 32]
  const int e_begin = band_ptr[0], e_end = band_ptr[col_tiles];
  for (int e_round = e_begin; e_round < e_end; e_round += THREADS) {
    const int e = e_round + tid;
    bool keep = false;
    int col = 0, rloc = 0;
    uint32_t bits = 0;
    if (e < e_end) {
      const uint32_t pos = p.esc_pos[e];
      rloc = static_cast<int>(pos >> 8) - band_row;
      if (rloc >= 0 && rloc < rows) {
        int lo = 0, hi = col_tiles - 1;  // column tile of e: the last with esc_ptr <= e
        while (lo < hi) {
          const int mid = (lo + hi + 1) >> 1;
          if (band_ptr[mid] <= e) lo = mid;
          else hi = mid - 1;
        }
        col = lo * kEscapeTile + static_cast<int>(pos & 0xFF);
        bits = static_cast<uint32_t>(p.esc_bits[e]) << 16;
        keep = true;
      }
    }
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, keep);
    if (lane == 0) warp_kept[warp] = __popc(ballot);
    __syncthreads();
    int offset = __popc(ballot & ((1u << lane) - 1u)), total = 0;
#pragma unroll
    for (int w = 0; w < kWarpsT; ++w) {
      const int c = warp_kept[w];
      if (w < warp) offset += c;
      total += c;
    }
    if (keep) {
      esc_list[offset] = make_int2(col, static_cast<int>(bits));
      esc_row[offset] = static_cast<unsigned char>(rloc);
    }
    __syncthreads();
    if (has_row) {
      for (int j = 0; j < total; ++j) {
        if (esc_row[j] != row_local) continue;
        const int2 en = esc_list[j];
        const float v = __int_as_float(en.y);
#pragma unroll
        for (int m = 0; m < TOK; ++m)
          if (m < M) out[m] = fmaf(__uint_as_float(static_cast<uint32_t>(p.x[static_cast<size_t>(m) * p.K + en.x]) << 16), v, out[m]);
      }
    }
    __syncthreads();
  }
}

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

template <int KIND, bool VEC16>
__global__ void __launch_bounds__(kThreads, 2) skinny_gemm_kernel(const Params p) {
  using T = Traits<KIND>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int rt = warp % p.rt_per_cta;
  const int warps_per_tile = kWarps / p.rt_per_cta;
  const int wk = warp / p.rt_per_cta;
  const int split = blockIdx.y;
  const int c_lo = static_cast<int>((static_cast<long long>(split) * p.n_chunks) / p.k_splits);
  const int c_hi = static_cast<int>((static_cast<long long>(split + 1) * p.n_chunks) / p.k_splits);
  const int cta_rows = p.rt_per_cta * 16;
  const int row_block = blockIdx.x * cta_rows;

  // x of this CTA's K range, in the order lanes read it: unit ((c * XU + h) * M + g) * 4 + t holds
  // x[g, c * chunk + piece * t + 8 h .. + 8].
  uint4* xs_smem = reinterpret_cast<uint4*>(smem);
  const int n_chunks_cta = c_hi - c_lo;
  const int x_units = n_chunks_cta * T::kXUnits * M * 4;
  for (int u = tid; u < x_units; u += kThreads) {
    const int ut = u & 3;
    const int ug = (u >> 2) % M;
    const int uh = (u / (4 * M)) % T::kXUnits;
    const int uc = u / (4 * M * T::kXUnits);
    const int k = (c_lo + uc) * T::kChunk + T::kPiece * ut + 8 * uh;
    if (k < p.K)
      cp_async16(xs_smem + u, p.x + static_cast<size_t>(ug) * p.K + k);
    else
      xs_smem[u] = make_uint4(0, 0, 0, 0);
  }
  // [8 warps][16 rows][8 tokens], at the same offset in every CTA of the cluster (read through distributed
  // shared memory by rank), so placed after the largest K share of x, not this CTA's.
  const int max_chunks_cta = (p.n_chunks + p.k_splits - 1) / p.k_splits;
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(max_chunks_cta) * T::kXUnits * M * 4 * 16);
  // W12: the escape offsets of this CTA's 256-row band (col_tiles + 1 of them), for the escape pass.
  int* band_ptr = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(red) + kSmemFixed);
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  const int tile0 = (row_block / kEscapeTile) * col_tiles;
  if constexpr (KIND == kW12)
    for (int i = tid; i <= col_tiles; i += kThreads) cp_async4(band_ptr + i, p.esc_ptr + tile0 + i);
  cp_async_commit();

  const int row_g = min(row_block + rt * 16 + g, p.N - 1);  // rows past N read the last row; never stored
  const int row_h = min(row_block + rt * 16 + g + 8, p.N - 1);
  {
    // While x arrives: ask L2 for this warp's first batch of weight lines.
    const int n_cta_chunks = c_hi - c_lo;
    const int first_chunk = c_lo + (wk * n_cta_chunks) / warps_per_tile;
    const int last_chunk = c_lo + ((wk + 1) * n_cta_chunks) / warps_per_tile;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k0 = (first_chunk + u) * T::kChunk + T::kPiece * t;
      if (first_chunk + u < last_chunk && k0 < p.K) prefetch_chunk<KIND>(p, row_g, row_h, k0);
    }
  }
  uint32_t X0 = 0, X1 = 0;
  if constexpr (KIND == kW12) {
    X0 = static_cast<uint32_t>(p.base[row_g]) << 7;
    X1 = static_cast<uint32_t>(p.base[row_h]) << 7;
  } else if constexpr (KIND == kQ) {
    X0 = (static_cast<uint32_t>(p.base[row_g]) << 7) | 8u;
    X1 = (static_cast<uint32_t>(p.base[row_h]) << 7) | 8u;
  }
  cp_async_wait_all();
  __syncthreads();
  // Tokens >= M read token M - 1: the MMA columns are independent and those outputs are never stored.
  const int g_x = min(g, M - 1);

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const int n_full = p.K / T::kChunk;  // chunks entirely inside K
  // This warp's chunks: a contiguous share [first, last) of the CTA's range.
  const int n_cta = c_hi - c_lo;
  const int first = c_lo + (wk * n_cta) / warps_per_tile;
  const int last = c_lo + ((wk + 1) * n_cta) / warps_per_tile;
  const int full_end = max(first, min(last, n_full));
  const uint4* x_lane = xs_smem + ((first - c_lo) * T::kXUnits * M + g_x) * 4 + t;
  const int x_chunk_stride = T::kXUnits * M * 4;

  auto x_units_of = [&](int i, uint4 (&xs)[2]) {
#pragma unroll
    for (int h = 0; h < T::kXUnits; ++h) xs[h] = x_lane[i * x_chunk_stride + h * M * 4];
    if constexpr (T::kXUnits == 1) xs[1] = make_uint4(0, 0, 0, 0);
  };

  int i = 0;
  const int n_mine_full = full_end - first;
  for (; i + kUnroll <= n_mine_full; i += kUnroll) {
    ChunkRegs<KIND, VEC16> regs[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_chunk<KIND, VEC16, false>(regs[u], p, row_g, row_h, first + i + u, t);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      uint4 xs[2];
      x_units_of(i + u, xs);
      compute_chunk<KIND, VEC16>(acc, regs[u], xs, X0, X1);
    }
  }
  for (; first + i < last; ++i) {
    const int chunk = first + i;
    ChunkRegs<KIND, VEC16> regs;
    if (chunk < n_full)
      load_chunk<KIND, VEC16, false>(regs, p, row_g, row_h, chunk, t);
    else
      load_chunk<KIND, VEC16, true>(regs, p, row_g, row_h, chunk, t);
    uint4 xs[2];
    x_units_of(i, xs);
    compute_chunk<KIND, VEC16>(acc, regs, xs, X0, X1);
  }

  // acc: rows (g, g + 8) of the tile, tokens (2t, 2t + 1). Warp partials -> red[warp], summed per row tile
  // over its warps in warp order into the slot of the tile's first warp (index rt).
  float* mine = red + warp * 128;
  mine[g * 8 + 2 * t] = acc[0];
  mine[g * 8 + 2 * t + 1] = acc[1];
  mine[(g + 8) * 8 + 2 * t] = acc[2];
  mine[(g + 8) * 8 + 2 * t + 1] = acc[3];
  __syncthreads();
  for (int e = tid; e < cta_rows * 8; e += kThreads) {
    const int tile = e / 128, within = e % 128;
    float s = red[tile * 128 + within];
    for (int w = 1; w < warps_per_tile; ++w) s += red[(w * p.rt_per_cta + tile) * 128 + within];
    red[tile * 128 + within] = s;  // warp index tile (wk = 0) holds the CTA's partial of that tile
  }
  cg::cluster_group cluster = cg::this_cluster();
  if (p.k_splits > 1) cluster.sync();
  else __syncthreads();

  // This CTA finishes rows [r_lo, r_hi) of the row block (at most one per thread): sums the k-split partials
  // in rank order, adds the escapes of each row in stored order, rounds to bf16.
  const int r_lo = (split * cta_rows) / p.k_splits;
  const int r_hi = ((split + 1) * cta_rows) / p.k_splits;
  const int rl = r_lo + tid;
  const bool has_row = rl < r_hi;
  const int row = row_block + rl;
  float out[kMaxTokens];
#pragma unroll
  for (int m = 0; m < kMaxTokens; ++m) out[m] = 0.f;
  if (has_row) {
    for (int q = 0; q < p.k_splits; ++q) {
      const float* part = red;
      if (p.k_splits > 1) part = cluster.map_shared_rank(red, q);
#pragma unroll
      for (int m = 0; m < kMaxTokens; ++m)
        if (m < M) out[m] += part[rl * 8 + m];
    }
  }
  if constexpr (KIND == kW12)
    add_band_escapes<kThreads>(p, band_ptr, col_tiles, row_block % kEscapeTile + r_lo, r_hi - r_lo, has_row, rl - r_lo, M,
                               red + kWarps * 128, out);
  if (has_row && row < p.N) store_bf16_row(p, row, M, out);
  if (p.k_splits > 1) cluster.sync();  // the other CTAs' reads of this CTA's partials are done
}

// The W12 kernel without barriers in its K loop (README.md, "W12 without barriers in the K loop").
// A CTA of 4 warps owns 64 rows (one 16-row tile per warp) and one K slice; every warp walks the whole slice
// for its tile, so no partials are combined inside the CTA. The slice's x is staged in shared memory once,
// after the first weight loads are issued; the loop keeps kStreamDepth chunks of loads in flight per lane
// (a ring of registers: chunk i + depth is requested right after chunk i is multiplied). K splits are the
// CTAs of a cluster (gridDim.y); after the loop each CTA reduces its share of the rows over the cluster's
// partials in rank order through distributed shared memory and applies those rows' escapes.
constexpr int kStreamWarps = 4;
constexpr int kStreamThreads = kStreamWarps * 32;
constexpr int kStreamRows = kStreamWarps * 16;
constexpr int kStreamDepth = 3;
constexpr int kStreamMaxSplits = 16;          // non-portable cluster size on sm_90
constexpr int kStreamXSliceMax = 48 * 1024;   // bytes of x per CTA
constexpr int kStreamMinChunksPerWarp = 4;
constexpr int kStreamCtasPerSm = 7;           // by registers (<= 72 a thread)
// Partials [64 rows][8 tokens] fp32, then the escape round: (col, bits) int2 and row byte per thread, counts.
constexpr int kStreamSmemFixed = kStreamRows * 8 * 4 + kStreamThreads * 9 + kStreamWarps * 4;

// Shared memory of the streaming kernels: x of the largest K slice, then the partials [64 rows][8 tokens] (at
// the same offset in every CTA of a launch), then the escape round, then the band's escape offsets.
__device__ __forceinline__ float* stream_partials(unsigned char* smem, const Params& p) {
  const int max_chunks_cta = (p.n_chunks + p.k_splits - 1) / p.k_splits;
  return reinterpret_cast<float*>(smem + static_cast<size_t>(max_chunks_cta) * Traits<kW12>::kXUnits * p.M * 4 * 16);
}
__device__ __forceinline__ int* stream_band_ptr(float* partials) {
  return reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(partials) + kStreamSmemFixed);
}

// Prologue and K loop of the streaming kernels for chunks [c_lo, c_hi) of the 64-row block at row_block: the
// first kStreamDepth chunks' loads go out, x of the slice and the band's escape offsets are staged (cp.async,
// then the one barrier), and the loop keeps kStreamDepth chunks of loads in flight with no barrier.
// acc: rows (g, g + 8) of the warp's tile, tokens (2t, 2t + 1), summed over the slice in k order.
template <bool VEC16>
__device__ __forceinline__ void stream_k_slice(const Params& p, int c_lo, int c_hi, int row_block, unsigned char* smem,
                                               int* band_ptr, float (&acc)[4]) {
  using T = Traits<kW12>;
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int n_mine = c_hi - c_lo;
  const int row_g = min(row_block + warp * 16 + g, p.N - 1);  // rows past N read the last row; never stored
  const int row_h = min(row_block + warp * 16 + g + 8, p.N - 1);

  // The first chunks' loads go out before anything waits.
  ChunkRegs<kW12, VEC16> ring[kStreamDepth];
#pragma unroll
  for (int u = 0; u < kStreamDepth; ++u)
    if (u < n_mine) load_chunk<kW12, VEC16, true>(ring[u], p, row_g, row_h, c_lo + u, t);

  // x of the slice in lane order (unit ((c * XU + h) * M + g) * 4 + t = x[g, c * chunk + piece * t + 8 h ..]),
  // and the escape offsets of the CTA's 256-row band.
  uint4* xs_smem = reinterpret_cast<uint4*>(smem);
  const int x_units = n_mine * T::kXUnits * M * 4;
  for (int u = tid; u < x_units; u += kStreamThreads) {
    const int ut = u & 3;
    const int ug = (u >> 2) % M;
    const int uh = (u / (4 * M)) % T::kXUnits;
    const int uc = u / (4 * M * T::kXUnits);
    const int k = (c_lo + uc) * T::kChunk + T::kPiece * ut + 8 * uh;
    if (k < p.K)
      cp_async16(xs_smem + u, p.x + static_cast<size_t>(ug) * p.K + k);
    else
      xs_smem[u] = make_uint4(0, 0, 0, 0);
  }
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  const int tile0 = (row_block / kEscapeTile) * col_tiles;
  for (int i = tid; i <= col_tiles; i += kStreamThreads) cp_async4(band_ptr + i, p.esc_ptr + tile0 + i);
  cp_async_commit();
  const uint32_t X0 = static_cast<uint32_t>(p.base[row_g]) << 7;
  const uint32_t X1 = static_cast<uint32_t>(p.base[row_h]) << 7;
  cp_async_wait_all();
  __syncthreads();

  const int g_x = min(g, M - 1);  // tokens >= M read token M - 1; those outputs are never stored
  const uint4* x_lane = xs_smem + g_x * 4 + t;
  const int x_chunk_stride = T::kXUnits * M * 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) acc[j] = 0.f;
  auto x_units_of = [&](int i, uint4 (&xs)[2]) {
    xs[0] = x_lane[i * x_chunk_stride];
    xs[1] = x_lane[i * x_chunk_stride + M * 4];
  };
  // Steady state: every slot's next chunk exists and lies inside K (no checks, no branches in the body).
  const int n_full_mine = min(c_hi, p.K / T::kChunk) - c_lo;
  int i = 0;
  for (; i + 2 * kStreamDepth <= n_full_mine; i += kStreamDepth) {
#pragma unroll
    for (int u = 0; u < kStreamDepth; ++u) {
      uint4 xs[2];
      x_units_of(i + u, xs);
      compute_chunk<kW12, VEC16>(acc, ring[u], xs, X0, X1);
      load_chunk<kW12, VEC16, false>(ring[u], p, row_g, row_h, c_lo + i + u + kStreamDepth, t);
    }
  }
  for (; i < n_mine; i += kStreamDepth) {
#pragma unroll
    for (int u = 0; u < kStreamDepth; ++u) {
      if (i + u < n_mine) {
        uint4 xs[2];
        x_units_of(i + u, xs);
        compute_chunk<kW12, VEC16>(acc, ring[u], xs, X0, X1);
        if (i + u + kStreamDepth < n_mine) load_chunk<kW12, VEC16, true>(ring[u], p, row_g, row_h, c_lo + i + u + kStreamDepth, t);
      }
    }
  }
}

template <bool VEC16>
__global__ void __launch_bounds__(kStreamThreads, kStreamCtasPerSm) w12_stream_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int split = blockIdx.y;
  const int c_lo = static_cast<int>((static_cast<long long>(split) * p.n_chunks) / p.k_splits);
  const int c_hi = static_cast<int>((static_cast<long long>(split + 1) * p.n_chunks) / p.k_splits);
  const int row_block = blockIdx.x * kStreamRows;
  float* red = stream_partials(smem, p);  // read by rank through DSMEM: the same offset in every CTA
  int* band_ptr = stream_band_ptr(red);
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  float acc[4];
  stream_k_slice<VEC16>(p, c_lo, c_hi, row_block, smem, band_ptr, acc);

  // acc: rows (g, g + 8) of the warp's tile, tokens (2t, 2t + 1) -> red[row][token].
  float* mine = red + warp * 16 * 8;
  mine[g * 8 + 2 * t] = acc[0];
  mine[g * 8 + 2 * t + 1] = acc[1];
  mine[(g + 8) * 8 + 2 * t] = acc[2];
  mine[(g + 8) * 8 + 2 * t + 1] = acc[3];
  cg::cluster_group cluster = cg::this_cluster();
  if (p.k_splits > 1) cluster.sync();
  else __syncthreads();

  // Rows [r_lo, r_hi) of the block are this CTA's: K-split partials in rank order, then escapes in stored order.
  const int r_lo = (split * kStreamRows) / p.k_splits;
  const int r_hi = ((split + 1) * kStreamRows) / p.k_splits;
  const int rl = r_lo + tid;
  const bool has_row = rl < r_hi;
  const int row = row_block + rl;
  float out[kMaxTokens];
#pragma unroll
  for (int m = 0; m < kMaxTokens; ++m) out[m] = 0.f;
  if (has_row) {
    for (int q = 0; q < p.k_splits; ++q) {
      const float* part = red;
      if (p.k_splits > 1) part = cluster.map_shared_rank(red, q);
#pragma unroll
      for (int m = 0; m < kMaxTokens; ++m)
        if (m < M) out[m] += part[rl * 8 + m];
    }
  }
  add_band_escapes<kStreamThreads>(p, band_ptr, col_tiles, row_block % kEscapeTile + r_lo, r_hi - r_lo, has_row, rl - r_lo, M,
                                   red + kStreamRows * 8, out);
  if (has_row && row < p.N) store_bf16_row(p, row, M, out);
  if (p.k_splits > 1) cluster.sync();  // the other CTAs' reads of this CTA's partials are done
}

// A partial tile is counted in with one thread's acquire-release add after the CTA's barrier: the release covers what
// the CTA's threads stored before the barrier (cumulativity), the acquire what the other pieces' CTAs stored before
// theirs; the barrier after it hands both to the CTA's other threads. One fence a count, in one thread, where a fence
// in every thread before the count and again before the last sum took up to 3 % more (benchmarks/NOTES.md, "Who the
// W12 sums wait for, the counts as acquire-release adds and the row tiles traced: measured").
__device__ __forceinline__ unsigned int atomic_add_acq_rel_gpu(unsigned int* addr, unsigned int v) {
  unsigned int old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(addr), "r"(v) : "memory");
  return old;
}

// red[(e / M) * TOK + e % M] = the sum from 0.f, in tile order, of value e of the n_tiles [64 rows][M tokens] tiles
// tile(q) (pointers into global memory, read through the L2), for e < 64 M, by THREADS threads (thread e_tid): each
// thread loads all its values of four tiles before adding any, so that a row block's last sum (the split-K kernels'
// last CTA, the persistent kernel's owed sums) waits for one round trip for every four tiles, not one for every value
// (at 16 tokens a bf16 thread has 7-8 values: benchmarks/NOTES.md, "The last sums' loads at once: measured").
template <int THREADS, int TOK, typename Tile>
__device__ __forceinline__ void sum_partial_tiles(float* red, int M, int n_tiles, int e_tid, Tile tile) {
  constexpr int kPer = (kStreamRows * TOK + THREADS - 1) / THREADS;  // a thread's values of a tile, at most
  constexpr int kTiles = 4;
  const int tile_values = kStreamRows * M;
  float s[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) s[j] = 0.f;
  for (int q0 = 0; q0 < n_tiles; q0 += kTiles) {
    float v[kPer][kTiles];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = e_tid + j * THREADS;
#pragma unroll
      for (int q = 0; q < kTiles; ++q) v[j][q] = e < tile_values && q0 + q < n_tiles ? __ldcg(tile(q0 + q) + e) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j)
#pragma unroll
      for (int q = 0; q < kTiles; ++q)
        if (q0 + q < n_tiles) s[j] += v[j][q];
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int e = e_tid + j * THREADS;
    if (e < tile_values) red[(e / M) * TOK + e % M] = s[j];
  }
}

// After the K loop of a split-K kernel (THREADS threads, all of them here): red holds the CTA's partial
// [64 rows][8 tokens] and band_ptr the band's escape offsets, both visible to every thread. With k_splits > 1 the
// CTA writes its partial tile [64 rows][M tokens] to `partials` at (row block, split), then bumps the row block's
// counter; the CTA that arrives last sums the partials in split order 0..k_splits-1 (the same bits whatever the
// arrival order), applies the escapes, stores bf16 and sets the counter back to 0 for the next launch. The others
// return at once. Counters must be 0 when the launch starts; partials need no initial value.
template <int THREADS, bool ESCAPES = true, int TOK = kMaxTokens>
__device__ __forceinline__ void finish_split_row_block(const Params& p, float* red, const int* band_ptr, float* partials,
                                                       unsigned int* counters, int split) {
  __shared__ int arrived_last;
  const int M = p.M;
  const int tid = threadIdx.x;
  const int row_block = blockIdx.x * kStreamRows;
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  const int tile_values = kStreamRows * M;  // [64 rows][M tokens], row-major
  if (p.k_splits > 1) {
    float* tiles = partials + static_cast<size_t>(blockIdx.x) * p.k_splits * tile_values;
    float* own = tiles + static_cast<size_t>(split) * tile_values;
    for (int e = tid; e < tile_values; e += THREADS) own[e] = red[(e / M) * TOK + e % M];
    __syncthreads();
    if (tid == 0) {  // the barrier orders every thread's partial before this release (cumulativity)
      const unsigned int before = atomic_add_acq_rel_gpu(counters + blockIdx.x, 1u);
      arrived_last = before == static_cast<unsigned int>(p.k_splits - 1);
      if (arrived_last) counters[blockIdx.x] = 0u;  // every split has arrived: ready for the next launch
    }
    __syncthreads();
    if (!arrived_last) return;
    // Sum in split order from 0.f (L2, past L1).
    sum_partial_tiles<THREADS, TOK>(red, M, p.k_splits, tid, [&](int q) { return tiles + static_cast<size_t>(q) * tile_values; });
    __syncthreads();
  }

  // Thread r < 64 finishes row r of the block: its sum (0.f + the splits' partials), then its escapes in stored
  // order, then bf16.
  const bool has_row = tid < kStreamRows;
  const int row = row_block + tid;
  float out[TOK];
#pragma unroll
  for (int m = 0; m < TOK; ++m) out[m] = 0.f;
  if (has_row) {
#pragma unroll
    for (int m = 0; m < TOK; ++m)
      if (m < M) out[m] += red[tid * TOK + m];
  }
  if constexpr (ESCAPES)
    add_band_escapes<THREADS, TOK>(p, band_ptr, col_tiles, row_block % kEscapeTile, kStreamRows, has_row, tid, M,
                                   red + kStreamRows * TOK, out);
  if (has_row && row < p.N) store_bf16_row<TOK>(p, row, M, out);
}

// The W12 kernel with K split over independent CTAs (README.md, "W12 with K split over independent CTAs"): the
// prologue and K loop of w12_stream_kernel, no clusters, then finish_split_row_block (the last CTA of a row
// block reduces the partials in split order).
template <bool VEC16>
__global__ void __launch_bounds__(kStreamThreads, kStreamCtasPerSm)
    w12_split_kernel(const Params p, float* partials, unsigned int* counters) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int split = blockIdx.y;
  const int c_lo = static_cast<int>((static_cast<long long>(split) * p.n_chunks) / p.k_splits);
  const int c_hi = static_cast<int>((static_cast<long long>(split + 1) * p.n_chunks) / p.k_splits);
  const int row_block = blockIdx.x * kStreamRows;
  float* red = stream_partials(smem, p);
  int* band_ptr = stream_band_ptr(red);
  float acc[4];
  stream_k_slice<VEC16>(p, c_lo, c_hi, row_block, smem, band_ptr, acc);

  // acc: rows (g, g + 8) of the warp's tile, tokens (2t, 2t + 1) -> red[row][token].
  float* mine = red + warp * 16 * 8;
  mine[g * 8 + 2 * t] = acc[0];
  mine[g * 8 + 2 * t + 1] = acc[1];
  mine[(g + 8) * 8 + 2 * t] = acc[2];
  mine[(g + 8) * 8 + 2 * t + 1] = acc[3];
  __syncthreads();

  finish_split_row_block<kStreamThreads>(p, red, band_ptr, partials, counters, split);
}

// The W12 kernel fed by bulk copies (README.md, "W12 through a bulk-copy pipeline"): 64-row CTAs of 4 consumer
// warps (one 16-row tile each) and one producer warp. K goes in stages of kBulkStageK weights; a stage in
// shared memory holds, for the CTA's 64 rows, the ae bytes [64][kBulkStageK] and nib bytes [64][kBulkStageK / 2]
// of those k, and x [M][kBulkStageK] (token rows padded by 16 bytes: conflict-free 16-byte loads). The producer
// fills a ring of kBulkStages stages with cp.async.bulk (one copy per plane and row, one per token row; rows
// past N copy row N - 1, never stored), each stage guarded by a full barrier (the producer's arrive with the
// stage's byte count, completed by the copies) and an empty barrier (one arrive per consumer warp once it has
// read the stage). Consumers wait on mbarriers only: no CTA barrier in the loop. K is split over independent
// CTAs as in w12_split_kernel, and the same finish_split_row_block reduces, applies the escapes and stores.
// Needs K % 32 == 0 (every nib row starts 16-byte aligned); the entry point runs w12_split_kernel otherwise.
// PRODUCER_WARPS: 1 (one producer warp issues all of a stage's copies) or kBulkConsumerWarps (producer warp q
// issues the copies of rows 16 q .. 16 q + 15 of both planes and of token rows q and q + 4 of x). A bulk copy
// takes its operands from uniform registers, so the copies of one warp's lanes issue one after another; more
// producer warps issue on more schedulers at once.
constexpr int kBulkStageK = 128;  // weights per row per stage: 2 chunks
constexpr int kBulkStages = 6;
constexpr int kBulkConsumerWarps = kStreamWarps;
__host__ __device__ constexpr int bulk_threads(int producer_warps) { return (kBulkConsumerWarps + producer_warps) * 32; }
constexpr int kBulkXRowBytes = kBulkStageK * 2 + 16;
constexpr int kBulkCtasPerSm = 2;
constexpr int kBulkMinStagesPerCta = 2;
constexpr double kBulkPartialShare = 0.10;
// After the ring: partials [64 rows][8 tokens] fp32, the escape round of bulk_threads(producer_warps) threads, then
// the band's escape offsets.
__host__ __device__ constexpr int bulk_smem_fixed(int producer_warps, int tokens = kMaxTokens) {
  return kStreamRows * tokens * 4 + bulk_threads(producer_warps) * 9 + (bulk_threads(producer_warps) / 32) * 4;
}

__host__ __device__ constexpr int bulk_stage_bytes(int M) {
  return kStreamRows * kBulkStageK + kStreamRows * (kBulkStageK / 2) + M * kBulkXRowBytes;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory; its
// completion counts `bytes` on the barrier. `policy`: an L2 cache policy (createpolicy).
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
// The L2 policy of the weights' loads, which stream through once: evict first (evict-normal measured 1-8 % slower,
// benchmarks/NOTES.md, "The weights' L2 policy and promotion: measured").
__device__ __forceinline__ uint64_t l2_stream_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ uint64_t l2_evict_last() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// A ring's barriers, by one thread: stage s is full after `full_count` arrivals (and their bytes), empty after
// `empty_count`; then made visible to the async proxy (the copies that complete them).
template <int STAGES>
__device__ __forceinline__ void init_ring_barriers(uint64_t* full_bar, uint64_t* empty_bar, uint32_t full_count, uint32_t empty_count) {
  for (int s = 0; s < STAGES; ++s) {
    mbar_init(smem_addr(&full_bar[s]), full_count);
    mbar_init(smem_addr(&empty_bar[s]), empty_count);
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// A build-time switch for timing the wide and row-tile kernels' parts (benchmarks/NOTES.md, "The wide kernels
// without x's box or without their epilogue: measured"): nvcc -DSPECDEC_WIDE_ABLATE=A, bits of what to leave out: 1
// the decode (A is the stage's AE words as loaded: the shared loads stay), 2 the MMAs (the decoded A folded into one
// register, or ptxas drops the decode), 4 x's box (the ring loads the weights only), 8 the epilogue (no partial
// tiles, no last-CTA sum, no output), 16 W12's escape warps (they fold nothing), 32 the escape warps' loads of x
// (they fold 1.0 for x); 64, of the 1-16 token row-tile kernels (tma_rows_kernel), x's box (their ring loads the
// weights only: at 16 tokens x is 8 KB a stage from the L2 against 6 KB of W12 weights); and 128, of the 1-16 token
// tensor-map kernels of 64-row blocks (tma_gemm_kernel, tma_stream_k_kernel), x's box (at 16 tokens 4 KB a stage
// against bf16's 16 KB of weights); 256, of the 64-row tensor-map and row-tile kernels' consumers, the shared-memory
// bank conflicts of their stage loads (the two rows or tokens of a quarter-warp, 256 or 512 bytes apart, share banks:
// each lane's weight, nib and x offsets are moved by a lane-dependent xor within their row, so the loads, their bytes
// and the instructions stay and every quarter-warp's 128 bytes fall in distinct banks); 512, of the 1-16 token
// persistent kernel (tma_stream_k_kernel), its segment epilogues' sums of the halves' tiles and escapes (the loop
// between the two barriers; the barriers stay); 1024, of the 1-16 token row-tile and tensor-map kernels' consumers
// (consume_segment), every stage's loads, decode and MMAs (each consumer warp waits for a full stage and releases it:
// their ring alone, with the producer, the escape warp and the epilogue as they are).
// The products of such a build are wrong by design; specdec_wide_ablation() reports it so that benchmarks time it only.
#ifndef SPECDEC_WIDE_ABLATE
#define SPECDEC_WIDE_ABLATE 0
#endif
// Bit 256's xor of a consumer lane's stage offsets (consume_bf16_stage, consume_stage); false in shipped builds.
constexpr bool kAblateBanks = (SPECDEC_WIDE_ABLATE & 256) != 0;
// Bit 1024: consume_segment's warps wait for and release each stage without reading it; false in shipped builds.
constexpr bool kAblateConsumers = (SPECDEC_WIDE_ABLATE & 1024) != 0;
// One stage (SK / 32 chunks of 32) of one consumer warp over bf16 weights: rows (g, g + 8) of its tile from the stage's
// [ROWS][SK] weights, x of tokens g + 8 j after them (x_off[j]: that token row's byte offset), then MMA. CHECK, TOK,
// ROWS, SK, HALVES and half as in consume_stage.
template <bool CHECK, int TOK = kMaxTokens, int ROWS = kStreamRows, int SK = kBulkStageK, int HALVES = 1>
__device__ __forceinline__ void consume_bf16_stage(const unsigned char* st, int k0, int K, int tile_row, const int (&x_off)[TOK / 8],
                                                   int t, float (&acc)[TOK / 8][4], int half = 0) {
  constexpr int kRowBytes = SK * 2;
  constexpr int NT = TOK / 8;
  constexpr int kMine = SK / 32 / HALVES;  // chunks of each warp a stage
  const unsigned char* x0 = st + ROWS * kRowBytes;
  const int flip = kAblateBanks ? (tile_row & 1) << 6 : 0;  // a quarter-warp's rows and tokens g differ in g & 1
#pragma unroll
  for (int cc = 0; cc < kMine; ++cc) {
    const int c = HALVES > 1 ? cc + half * kMine : cc;
    const bool in = !CHECK || k0 + c * 32 + 8 * t < K;
    if (CHECK && k0 + c * 32 >= K) break;  // uniform: the chunk lies past K
    ChunkRegs<kBf16, true> r;
    uint4 xs[NT][2];
    const int pw = (c * 64 + 16 * t) ^ flip;  // this lane's 8 weights of the chunk (and their 8 x values), in bytes
    r.w[0] = in ? *reinterpret_cast<const uint4*>(st + tile_row * kRowBytes + pw) : make_uint4(0, 0, 0, 0);
    r.w[1] = in ? *reinterpret_cast<const uint4*>(st + (tile_row + 8) * kRowBytes + pw) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int jt = 0; jt < NT; ++jt) {
      xs[jt][0] = in ? *reinterpret_cast<const uint4*>(x0 + x_off[jt] + pw) : make_uint4(0, 0, 0, 0);
      xs[jt][1] = make_uint4(0, 0, 0, 0);
    }
    if constexpr (NT == 1) compute_chunk<kBf16, true>(acc[0], r, xs[0], 0u, 0u);
    else compute_chunk_tiles<kBf16, true, NT>(acc, r, xs, 0u, 0u);
  }
}

// One stage (SK / 64 chunks) of one consumer warp: rows (g, g + 8) of its tile from the stage's planes of ROWS rows and
// SK weights, x of tokens g + 8 j (j < TOK / 8: one MMA n-tile each; x_off[j]: that token row's byte offset in the
// stage's x), decode and MMA. HALVES groups of warps share a stage's chunks: group `half` takes chunks half x SK / 64 /
// HALVES on. CHECK: the stage may end before SK (pieces at or past K read as zero). KIND kW12: the stage holds ae, nib,
// x; kQ: ae, x.
template <bool CHECK, int KIND = kW12, int TOK = kMaxTokens, int HALVES = 1, int ROWS = kStreamRows, int SK = kBulkStageK>
__device__ __forceinline__ void consume_stage(const unsigned char* st, int k0, int K, int tile_row, const int (&x_off)[TOK / 8], int t,
                                              uint32_t X0, uint32_t X1, float (&acc)[TOK / 8][4], int half = 0) {
  constexpr int NT = TOK / 8;
  constexpr int kMine = SK / 64 / HALVES;  // chunks of each warp a stage
  const unsigned char* ae = st;
  const unsigned char* nib = st + ROWS * SK;
  const unsigned char* x0 = KIND == kW12 ? nib + ROWS * (SK / 2) : nib;
  // SPECDEC_WIDE_ABLATE bit 256: ae and x rows of a quarter-warp differ in g & 1, the nib rows of a half-warp (64 or
  // 128 bytes long) in g & 2 or g & 3
  const int a_flip = kAblateBanks ? (tile_row & 1) << 6 : 0;
  const int n_flip = kAblateBanks ? (SK >= 256 ? tile_row & 3 : (tile_row >> 1) & 1) << 5 : 0;
  const int x_flip = kAblateBanks ? (tile_row & 1) << 4 : 0;
#pragma unroll
  for (int cc = 0; cc < kMine; ++cc) {
    const int c = cc + half * kMine;
    const bool in = !CHECK || k0 + c * 64 + 16 * t < K;
    if (CHECK && k0 + c * 64 >= K) break;  // uniform: the chunk lies past K
    ChunkRegs<KIND, true> r;
    uint4 xs[NT][2];
    const int pa = (c * 64 + 16 * t) ^ a_flip, pn = (c * 32 + 8 * t) ^ n_flip, px = c * 128 + 32 * t;
    r.ae[0] = in ? *reinterpret_cast<const uint4*>(ae + tile_row * SK + pa) : make_uint4(0, 0, 0, 0);
    r.ae[1] = in ? *reinterpret_cast<const uint4*>(ae + (tile_row + 8) * SK + pa) : make_uint4(0, 0, 0, 0);
    if constexpr (KIND == kW12) {
      r.nib[0] = in ? *reinterpret_cast<const uint2*>(nib + tile_row * (SK / 2) + pn) : make_uint2(0, 0);
      r.nib[1] = in ? *reinterpret_cast<const uint2*>(nib + (tile_row + 8) * (SK / 2) + pn) : make_uint2(0, 0);
    }
#pragma unroll
    for (int jt = 0; jt < NT; ++jt) {
      xs[jt][0] = in ? *reinterpret_cast<const uint4*>(x0 + x_off[jt] + (px ^ x_flip)) : make_uint4(0, 0, 0, 0);
      xs[jt][1] = in ? *reinterpret_cast<const uint4*>(x0 + x_off[jt] + ((px + 16) ^ x_flip)) : make_uint4(0, 0, 0, 0);
    }
    if constexpr (NT == 1) compute_chunk<KIND, true>(acc[0], r, xs[0], X0, X1);
    else compute_chunk_tiles<KIND, true, NT>(acc, r, xs, X0, X1);
  }
}

#ifndef SPECDEC_LANE_OFFSETS
// The kernels of at most SPECDEC_LANE_OFFSETS tokens (8: the 1-8 token ones) compute once in consume_segment, before
// its loop over full stages, each lane's byte offsets in a stage (its ae, nib and x pieces) and the shared addresses
// of the ring's barriers and of its settling store, and keep them in registers (keep_in_registers); the others derive
// them again a stage from the lane, the warp and M. On an H100 (benchmarks/NOTES.md, "The row tiles' opaque base and
// the lane offsets at 1-8 tokens: measured") 8 made the W12 AR step 2 % faster; 16 (every kernel) made the 16-token
// W12 calls up to 3.4 % slower. -DSPECDEC_LANE_OFFSETS=0 builds the kernels without them.
#define SPECDEC_LANE_OFFSETS 8
#endif
__host__ __device__ constexpr bool lane_offsets_for(int tok) { return tok <= SPECDEC_LANE_OFFSETS; }

// A lane's byte offsets within a stage of consume_stage's layout: `a` of its ae piece of row g (row g + 8 is 8 SK
// on), `n` of its nib piece of row g (W12; row g + 8 is 4 SK on), x[j] of its first x unit of token row g + 8 j, each
// for the first chunk the lane's group takes (chunk cc after it: 64, 32 and 128 bytes on).
template <int NT>
struct LaneOffsets {
  int a, n, x[NT];
};

// An empty asm that claims to rewrite v: the value must be held in a register at this point, so neither nvcc nor ptxas
// can derive it again from what it came from (in a loop, ptxas keeps it across the loop; outside one, nvcc cannot
// fold it into the constant expressions after it).
__device__ __forceinline__ void keep_in_registers(int& v) { asm volatile("" : "+r"(v)); }
__device__ __forceinline__ void keep_in_registers(uint32_t& v) { asm volatile("" : "+r"(v)); }

// consume_bf16_stage<false> of one full stage at `st` with the lane's offsets `off` given (`a` of its weights of row g,
// x[j] of its x of token row g + 8 j, for the first chunk its group takes; chunk cc after it 64 bytes on; `n` unused).
template <int TOK, int HALVES, int ROWS, int SK>
__device__ __forceinline__ void consume_bf16_stage_at(const unsigned char* st, const LaneOffsets<TOK / 8>& off, float (&acc)[TOK / 8][4]) {
  constexpr int NT = TOK / 8;
  constexpr int kMine = SK / 32 / HALVES;
  const unsigned char* x0 = st + ROWS * SK * 2;
#pragma unroll
  for (int cc = 0; cc < kMine; ++cc) {
    ChunkRegs<kBf16, true> r;
    uint4 xs[NT][2];
    r.w[0] = *reinterpret_cast<const uint4*>(st + off.a + cc * 64);
    r.w[1] = *reinterpret_cast<const uint4*>(st + off.a + 8 * SK * 2 + cc * 64);
#pragma unroll
    for (int jt = 0; jt < NT; ++jt) {
      xs[jt][0] = *reinterpret_cast<const uint4*>(x0 + off.x[jt] + cc * 64);
      xs[jt][1] = make_uint4(0, 0, 0, 0);
    }
    if constexpr (NT == 1) compute_chunk<kBf16, true>(acc[0], r, xs[0], 0u, 0u);
    else compute_chunk_tiles<kBf16, true, NT>(acc, r, xs, 0u, 0u);
  }
}

// consume_stage<false> of one full stage at `st` with the lane's offsets `off` (LaneOffsets) given.
template <int KIND, int TOK, int HALVES, int ROWS, int SK>
__device__ __forceinline__ void consume_stage_at(const unsigned char* st, const LaneOffsets<TOK / 8>& off, uint32_t X0, uint32_t X1,
                                                 float (&acc)[TOK / 8][4]) {
  constexpr int NT = TOK / 8;
  constexpr int kMine = SK / 64 / HALVES;
  const unsigned char* nib = st + ROWS * SK;
  const unsigned char* x0 = KIND == kW12 ? nib + ROWS * (SK / 2) : nib;
#pragma unroll
  for (int cc = 0; cc < kMine; ++cc) {
    ChunkRegs<KIND, true> r;
    uint4 xs[NT][2];
    r.ae[0] = *reinterpret_cast<const uint4*>(st + off.a + cc * 64);
    r.ae[1] = *reinterpret_cast<const uint4*>(st + off.a + 8 * SK + cc * 64);
    if constexpr (KIND == kW12) {
      r.nib[0] = *reinterpret_cast<const uint2*>(nib + off.n + cc * 32);
      r.nib[1] = *reinterpret_cast<const uint2*>(nib + off.n + 8 * (SK / 2) + cc * 32);
    }
#pragma unroll
    for (int jt = 0; jt < NT; ++jt) {
      xs[jt][0] = *reinterpret_cast<const uint4*>(x0 + off.x[jt] + cc * 128);
      xs[jt][1] = *reinterpret_cast<const uint4*>(x0 + off.x[jt] + cc * 128 + 16);
    }
    if constexpr (NT == 1) compute_chunk<KIND, true>(acc[0], r, xs[0], X0, X1);
    else compute_chunk_tiles<KIND, true, NT>(acc, r, xs, X0, X1);
  }
}

// The consumer side of a bulk-copy ring (kBulkStages stages of `stage_bytes` at `ring`, full / empty barriers):
// consumer warp `warp` owns rows 16 w .. 16 w + 15 of the ROWS-row block (w = warp % (ROWS / 16)) and the chunks of
// group warp / (ROWS / 16) of every stage of SK weights (HALVES groups), consumes stages s_lo .. s_hi - 1 of the block
// in k order from ring slot `s` of round `round` on (both advanced past them on return), releases each stage with one
// arrive per warp, then writes its sums to its group's tile red[group][row][token] (rows of TOK tokens). X_ROW_BYTES:
// the stride of x's token rows in a stage; KIND: kW12, kQ or kBf16 (consume_stage); STAGES: the ring's stages; TOK: 8,
// or 16 for tokens 8..15 in a second MMA n-tile. STRIDE > 1: the warp takes only every STRIDE-th stage of the segment
// from its `first` on (s and round then start at that stage's slot), other warps the others (tma_rows_kernel's stage
// groups); each stage is still released by the HALVES x ROWS / 16 warps that consume it.
template <int X_ROW_BYTES, int KIND = kW12, int STAGES = kBulkStages, int TOK = kMaxTokens, int HALVES = 1, int ROWS = kStreamRows,
          int SK = kBulkStageK, int STRIDE = 1>
__device__ __forceinline__ void consume_segment(const Params& p, unsigned char* ring, int stage_bytes, uint64_t* full_bar,
                                                uint64_t* empty_bar, int s_lo, int s_hi, int row_block, int warp, int lane,
                                                float* red, int& s, uint32_t& round, int first = 0) {
  static_assert(SK % ((KIND == kBf16 ? 32 : 64) * HALVES) == 0, "every group of warps takes whole chunks of a stage");
  static_assert(STAGES % STRIDE == 0, "a stage group keeps to its own ring slots");
  constexpr int kTileWarps = ROWS / 16;
  const int M = p.M;
  const int n_mine = s_hi - s_lo;
  const int g = lane >> 2, t = lane & 3;
  constexpr int NT = TOK / 8;
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  const int half = warp / kTileWarps;  // HALVES = 2 on 64 rows: warps 4..7 take the second chunk of every stage
  warp -= half * kTileWarps;
  red += half * ROWS * TOK;  // and their sums go to a second [ROWS][TOK] tile
  const int tile_row = warp * 16 + g;
  const uint32_t mid = KIND == kQ ? 8u : 0u;  // the Q view's nibble: the midpoint
  // the rows' bases (bf16 weights have none)
  const uint32_t X0 = KIND == kBf16 ? 0u : (static_cast<uint32_t>(p.base[min(row_block + tile_row, p.N - 1)]) << 7) | mid;
  const uint32_t X1 = KIND == kBf16 ? 0u : (static_cast<uint32_t>(p.base[min(row_block + tile_row + 8, p.N - 1)]) << 7) | mid;
  int x_off[NT];  // token g + 8 j's row in a stage's x; tokens >= M read token M - 1, whose outputs are never stored
#pragma unroll
  for (int j = 0; j < NT; ++j) x_off[j] = min(g + 8 * j, M - 1) * X_ROW_BYTES;
  const int n_full = min(s_hi, p.K / SK) - s_lo;  // stages entirely inside K
  float* mine = red + warp * 16 * TOK;  // this warp's [16][TOK] tile of red, written after the loop
  auto release = [&]() {
    // Every shared-memory load of the stage must have landed before the stage is released: the producer's next copy
    // into it is ordered after the arrive, not after loads still in flight, and ptxas issues the arrive without
    // waiting for loads whose registers only later MMAs read (bf16 stages, where no decode consumes them first; on the
    // H200 that let a copy overwrite x and weights before they were read). acc depends on every value the stage
    // loaded, so a store of it (to the warp's own tile, rewritten after the loop) cannot issue before they have
    // all landed, and the arrive follows the store. sass_report.loads_in_flight_at_release checks the binary.
    float settled = acc[0][0];
#pragma unroll
    for (int j = 1; j < NT; ++j) settled += acc[j][0];
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(smem_addr(mine + lane)), "f"(settled) : "memory");
    __syncwarp();
    if (lane == 0) mbar_arrive(smem_addr(&empty_bar[s]));
    if constexpr (STRIDE == 1) {
      if (++s == STAGES) s = 0, ++round;
    } else {
      s += STRIDE;
      if (s >= STAGES) s -= STAGES, ++round;
    }
  };
  int it = first;
  if constexpr (lane_offsets_for(TOK) && !kAblateBanks && !kAblateConsumers) {
    LaneOffsets<NT> off;
    if constexpr (KIND == kBf16) {
      constexpr int kMine = SK / 32 / HALVES;  // chunks of 32 weights, 64 bytes a row
      off.a = tile_row * SK * 2 + half * kMine * 64 + 16 * t;
      off.n = 0;
#pragma unroll
      for (int j = 0; j < NT; ++j) off.x[j] = x_off[j] + half * kMine * 64 + 16 * t;
    } else {
      constexpr int kMine = SK / 64 / HALVES;
      off.a = tile_row * SK + half * kMine * 64 + 16 * t;
      off.n = tile_row * (SK / 2) + half * kMine * 32 + 8 * t;
#pragma unroll
      for (int j = 0; j < NT; ++j) off.x[j] = x_off[j] + half * kMine * 128 + 32 * t;
    }
    uint32_t full0 = smem_addr(full_bar), empty0 = smem_addr(empty_bar), settle = smem_addr(mine + lane);
    for (; it < n_full; it += STRIDE) {
      keep_in_registers(off.a);
      if constexpr (KIND != kBf16) keep_in_registers(off.n);
#pragma unroll
      for (int j = 0; j < NT; ++j) keep_in_registers(off.x[j]);
      keep_in_registers(full0);
      keep_in_registers(empty0);
      keep_in_registers(settle);
      mbar_wait(full0 + 8 * s, round & 1);
      if constexpr (KIND == kBf16)
        consume_bf16_stage_at<TOK, HALVES, ROWS, SK>(ring + static_cast<size_t>(s) * stage_bytes, off, acc);
      else
        consume_stage_at<KIND, TOK, HALVES, ROWS, SK>(ring + static_cast<size_t>(s) * stage_bytes, off, X0, X1, acc);
      // release() through the addresses held in registers, written out: a helper shared with release() that takes
      // the addresses compiles 12 of the ring kernels (the 1-8 token row-tile, tensor-map and persistent ones, a
      // 16-token tensor-map one, a bulk one) to other, untimed SASS
      float settled = acc[0][0];
#pragma unroll
      for (int j = 1; j < NT; ++j) settled += acc[j][0];
      asm volatile("st.shared.f32 [%0], %1;" ::"r"(settle), "f"(settled) : "memory");
      __syncwarp();
      if (lane == 0) mbar_arrive(empty0 + 8 * s);
      if constexpr (STRIDE == 1) {
        if (++s == STAGES) s = 0, ++round;
      } else {
        s += STRIDE;
        if (s >= STAGES) s -= STAGES, ++round;
      }
    }
  }
  for (; it < n_full; it += STRIDE) {
    mbar_wait(smem_addr(&full_bar[s]), round & 1);
    if constexpr (kAblateConsumers) {
    } else if constexpr (KIND == kBf16)
      consume_bf16_stage<false, TOK, ROWS, SK, HALVES>(ring + static_cast<size_t>(s) * stage_bytes, 0, p.K, tile_row, x_off, t, acc, half);
    else
      consume_stage<false, KIND, TOK, HALVES, ROWS, SK>(ring + static_cast<size_t>(s) * stage_bytes, 0, p.K, tile_row, x_off, t, X0, X1,
                                                        acc, half);
    release();
  }
  for (; it < n_mine; it += STRIDE) {  // the stage that ends at K
    mbar_wait(smem_addr(&full_bar[s]), round & 1);
    if constexpr (kAblateConsumers) {
    } else if constexpr (KIND == kBf16)
      consume_bf16_stage<true, TOK, ROWS, SK, HALVES>(ring + static_cast<size_t>(s) * stage_bytes, (s_lo + it) * SK, p.K, tile_row, x_off,
                                                      t, acc, half);
    else
      consume_stage<true, KIND, TOK, HALVES, ROWS, SK>(ring + static_cast<size_t>(s) * stage_bytes, (s_lo + it) * SK, p.K, tile_row,
                                                       x_off, t, X0, X1, acc, half);
    release();
  }
  // acc[j]: rows (g, g + 8) of the warp's tile, tokens (8 j + 2t, 8 j + 2t + 1) -> red[row][token].
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    mine[g * TOK + 8 * j + 2 * t] = acc[j][0];
    mine[g * TOK + 8 * j + 2 * t + 1] = acc[j][1];
    mine[(g + 8) * TOK + 8 * j + 2 * t] = acc[j][2];
    mine[(g + 8) * TOK + 8 * j + 2 * t + 1] = acc[j][3];
  }
}

// consume_segment over the CTA's only segment, from the ring's first slot (STRIDE > 1: from stage `first`, in its slot).
template <int X_ROW_BYTES, int KIND = kW12, int STAGES = kBulkStages, int TOK = kMaxTokens, int HALVES = 1, int ROWS = kStreamRows,
          int SK = kBulkStageK, int STRIDE = 1>
__device__ __forceinline__ void consume_ring(const Params& p, unsigned char* ring, int stage_bytes, uint64_t* full_bar,
                                             uint64_t* empty_bar, int s_lo, int s_hi, int row_block, int warp, int lane,
                                             float* red, int first = 0) {
  int s = first;
  uint32_t round = 0;
  consume_segment<X_ROW_BYTES, KIND, STAGES, TOK, HALVES, ROWS, SK, STRIDE>(p, ring, stage_bytes, full_bar, empty_bar, s_lo, s_hi,
                                                                            row_block, warp, lane, red, s, round, first);
}

template <int PRODUCER_WARPS>
__global__ void __launch_bounds__(bulk_threads(PRODUCER_WARPS), kBulkCtasPerSm)
    w12_bulk_kernel(const Params p, float* partials, unsigned int* counters) {
  constexpr int kBulkThreads = bulk_threads(PRODUCER_WARPS);
  constexpr int kBulkSmemFixed = bulk_smem_fixed(PRODUCER_WARPS);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(8) uint64_t full_bar[kBulkStages];
  __shared__ __align__(8) uint64_t empty_bar[kBulkStages];
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.y;
  const int n_stages = (p.K + kBulkStageK - 1) / kBulkStageK;
  const int s_lo = static_cast<int>((static_cast<long long>(split) * n_stages) / p.k_splits);
  const int s_hi = static_cast<int>((static_cast<long long>(split + 1) * n_stages) / p.k_splits);
  const int n_mine = s_hi - s_lo;
  const int row_block = blockIdx.x * kStreamRows;
  const int stage_bytes = bulk_stage_bytes(M);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kBulkStages) * stage_bytes);
  int* band_ptr = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(red) + kBulkSmemFixed);
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  const int tile0 = (row_block / kEscapeTile) * col_tiles;

  if (tid == 0) init_ring_barriers<kBulkStages>(full_bar, empty_bar, PRODUCER_WARPS, kBulkConsumerWarps);
  // The band's escape offsets, waited for after the loop.
  for (int i = tid; i <= col_tiles; i += kBulkThreads) cp_async4(band_ptr + i, p.esc_ptr + tile0 + i);
  cp_async_commit();
  __syncthreads();

  if (PRODUCER_WARPS > 1 && warp >= kBulkConsumerWarps) {
    // Producer warp q: lanes l < 16 copy the ae row 16 q + l, lanes l >= 16 the nib row 16 q + l - 16; lanes 0 and
    // 1 also token rows q and q + 4 of x where < M. Race-free with the full barrier initialised to PRODUCER_WARPS
    // arrivals: each warp's lane 0 arrives with expect_tx of that warp's bytes, and __syncwarp orders it before
    // any lane's copy of the warp is issued, so every warp's bytes are counted before any of them can complete;
    // the phase completes only once all PRODUCER_WARPS warps have arrived and all their bytes have landed. A
    // warp arrives for the next round of a stage only after its empty barrier, i.e. after that phase completed.
    const int q = warp - kBulkConsumerWarps;
    const uint64_t stream = l2_stream_policy();
    const uint64_t keep = l2_evict_last();
    const size_t K = p.K;
    const bool is_ae = lane < 16;
    const int r = 16 * q + (lane & 15);
    const int row = min(row_block + r, p.N - 1);
    const int x_row = q + 4 * lane;  // lanes 0 and 1
    const bool copies_x = lane < 2 && x_row < M;
    const int x_rows = (q < M) + (q + 4 < M);
    int s = 0;
    uint32_t round = 0;
    for (int it = 0; it < n_mine; ++it) {
      if (round > 0) mbar_wait(smem_addr(&empty_bar[s]), (round - 1) & 1);
      const int k0 = (s_lo + it) * kBulkStageK;
      const int k_len = min(kBulkStageK, p.K - k0);  // a multiple of 32
      const uint32_t full = smem_addr(&full_bar[s]);
      if (lane == 0) mbar_arrive_expect_tx(full, static_cast<uint32_t>(16 * (k_len + k_len / 2) + x_rows * k_len * 2));
      __syncwarp();
      unsigned char* st = smem + static_cast<size_t>(s) * stage_bytes;
      const uint32_t ae_dst = smem_addr(st), nib_dst = smem_addr(st + kStreamRows * kBulkStageK);
      if (is_ae)
        bulk_copy(ae_dst + r * kBulkStageK, p.w + row * K + k0, k_len, full, stream);
      else
        bulk_copy(nib_dst + r * (kBulkStageK / 2), p.nib + row * (K / 2) + k0 / 2, k_len / 2, full, stream);
      if (copies_x)
        bulk_copy(nib_dst + kStreamRows * (kBulkStageK / 2) + x_row * kBulkXRowBytes, p.x + static_cast<size_t>(x_row) * K + k0,
                  k_len * 2, full, keep);
      if (++s == kBulkStages) s = 0, ++round;
    }
  } else if (PRODUCER_WARPS == 1 && warp == kBulkConsumerWarps) {
    // Producer: lane l copies rows l and l + 32 of both planes, lanes < M token row l of x.
    const uint64_t stream = l2_stream_policy();
    const uint64_t keep = l2_evict_last();
    const size_t K = p.K;
    const int rows[2] = {min(row_block + lane, p.N - 1), min(row_block + lane + 32, p.N - 1)};
    int s = 0;
    uint32_t round = 0;
    for (int it = 0; it < n_mine; ++it) {
      if (round > 0) mbar_wait(smem_addr(&empty_bar[s]), (round - 1) & 1);
      const int k0 = (s_lo + it) * kBulkStageK;
      const int k_len = min(kBulkStageK, p.K - k0);  // a multiple of 32
      const uint32_t full = smem_addr(&full_bar[s]);
      if (lane == 0) mbar_arrive_expect_tx(full, static_cast<uint32_t>(kStreamRows * (k_len + k_len / 2) + M * k_len * 2));
      __syncwarp();
      unsigned char* st = smem + static_cast<size_t>(s) * stage_bytes;
      const uint32_t ae_dst = smem_addr(st), nib_dst = smem_addr(st + kStreamRows * kBulkStageK);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = lane + 32 * i;
        bulk_copy(ae_dst + r * kBulkStageK, p.w + rows[i] * K + k0, k_len, full, stream);
        bulk_copy(nib_dst + r * (kBulkStageK / 2), p.nib + rows[i] * (K / 2) + k0 / 2, k_len / 2, full, stream);
      }
      if (lane < M)
        bulk_copy(nib_dst + kStreamRows * (kBulkStageK / 2) + lane * kBulkXRowBytes, p.x + static_cast<size_t>(lane) * K + k0,
                  k_len * 2, full, keep);
      if (++s == kBulkStages) s = 0, ++round;
    }
  } else {
    consume_ring<kBulkXRowBytes>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block, warp, lane, red);
  }
  cp_async_wait_all();
  __syncthreads();
  finish_split_row_block<kBulkThreads>(p, red, band_ptr, partials, counters, split);
}

// The W12 and Q kernels fed by tensor-map copies (README.md, "W12 through tensor-map copies"): w12_bulk_kernel's
// ring, consumers and split-K epilogue, with one producer thread issuing 2-D TMA copies per stage (a box of
// [64 rows][kBulkStageK] ae bytes, for W12 one of [64][kBulkStageK / 2] nib bytes, one of [M tokens][kBulkStageK] x
// values) instead of one bulk copy per row and plane. Boxes are described by tensor maps built on the host; the
// parts of a box past N rows or past K read as zeros and count their bytes, so every stage completes
// tma_stage_bytes(KIND, M) bytes. x lands with rows of kTmaXRowBytes (unpadded: the x loads of the two token rows of
// a quarter-warp share banks). KIND kW12: exact, escapes added by the escape warp; kQ: the Q view (ae and bases only,
// no escapes); kBf16: plain bf16 weights, one box of [64 rows][kBulkStageK] bf16 (twice the W12 bytes a stage, so
// the ring keeps tma_stages(kBf16) = 5 stages to leave room for two CTAs per SM). Needs K % 32 == 0 (16-byte nib
// row strides; for bf16 whole 32-weight chunks) and 16-byte aligned planes and x.
constexpr int kTmaXRowBytes = kBulkStageK * 2;
constexpr int kTmaAlign = 128;  // shared-memory alignment of a tensor-map destination
__host__ __device__ constexpr int tma_stage_bytes(int kind, int M) {
  return kStreamRows * kBulkStageK * (kind == kBf16 ? 2 : 1) + (kind == kW12 ? kStreamRows * (kBulkStageK / 2) : 0) +
         M * kTmaXRowBytes;
}
__host__ __device__ constexpr int tma_stages(int kind) { return kind == kBf16 ? 5 : kBulkStages; }
// Build-time switches for measuring the W12 kernel's parts (benchmarks/NOTES.md, "W12 at 16 tokens"): nvcc
// -DSPECDEC_W12_HALVES=1 runs one half of consumer warps; -DSPECDEC_W12_ESCAPE_WARP_TOKENS=T keeps the escape warp in
// the kernels of at most T tokens (8 or 16; 0: none) and adds the escapes in the epilogue in the others.
#ifndef SPECDEC_W12_HALVES
#define SPECDEC_W12_HALVES 2
#endif
#ifndef SPECDEC_W12_ESCAPE_WARP_TOKENS
#define SPECDEC_W12_ESCAPE_WARP_TOKENS 16
#endif
// W12 CTAs run two halves of consumer warps (warps 0-3 the first 64-weight chunk of every stage, warps 4-7 the
// second: 3-10 % faster than one half on the H200, benchmarks/NOTES.md); Q and bf16 CTAs one.
__host__ __device__ constexpr int tma_halves(int kind) { return kind == kW12 ? SPECDEC_W12_HALVES : 1; }
// W12 CTAs of `tok` tokens have one more warp after the producer: the escape warp (fold_escapes), which sums the
// escapes of the CTA's K slice while the consumers stream, so that no escape pass follows the K loop. Without it the
// escapes are added after the K loop by the row block's last CTA (finish_split_row_block, add_band_escapes).
__host__ __device__ constexpr int tma_escape_warps(int kind, int tok) {
  return kind == kW12 && tok <= SPECDEC_W12_ESCAPE_WARP_TOKENS ? 1 : 0;
}
__host__ __device__ constexpr bool tma_epilogue_escapes(int kind, int tok) { return kind == kW12 && tma_escape_warps(kind, tok) == 0; }
__host__ __device__ constexpr int tma_threads(int kind, int tok) {
  return (tma_halves(kind) * kBulkConsumerWarps + 1 + tma_escape_warps(kind, tok)) * 32;
}
// The escape warp's shared memory (tma_escape_bytes, fold_escapes): the sums [rows][TOK] fp32, then a round's escapes: x at
// their columns [32][TOK + 1] fp32 (padded: lane l writes row l, lane m reads column m, both without bank conflicts),
// their values [32] fp32 and block rows [32] int.
__host__ __device__ constexpr int tma_escape_bytes(int tok, int rows = kStreamRows) { return (rows * tok + 32 * (tok + 1) + 64) * 4; }

// Shared memory after the stages: a [64 rows][tokens] fp32 tile a half; then where the epilogue adds the escapes, the
// room add_band_escapes takes after the first tile (a round of one escape a thread: int2 + row byte, warp counts), and
// where the escape warp runs, its sums and round (tma_escape_bytes, after the tiles).
__host__ __device__ constexpr int tma_smem_fixed(int kind, int tokens) {
  return tma_halves(kind) * kStreamRows * tokens * 4 + (tma_epilogue_escapes(kind, tokens) ? tma_threads(kind, tokens) * 9 + 64 : 0) +
         (tma_escape_warps(kind, tokens) == 1 ? tma_escape_bytes(tokens) : 0);
}

// Programmatic dependent launch (a kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization): wait
// until the kernels this one depends on have finished and their writes are visible; let the kernels that depend on
// this one start. Both do nothing in a kernel launched without the attribute.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int inner, int row, uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], "
      "%5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(row), "r"(bar), "l"(policy)
      : "memory");
}

// The order a ring's producer thread issues n stages in, over slots 0, 1, ..., STAGES - 1, 0, ...: the first STAGES
// stages' weights (weights(it, slot, full)) before griddep_wait, since they do not depend on the kernel before this
// one, then their x (x_of(it, slot, full)); every later stage's weights and x together, once the consumers have
// released its slot. tx: the bytes a stage's copies bring (its full barrier's transaction count).
template <int STAGES, typename Weights, typename X>
__device__ __forceinline__ void issue_ring(int n, uint32_t tx, uint64_t* full_bar, uint64_t* empty_bar, Weights weights, X x_of) {
  const int first = min(n, STAGES);
  for (int it = 0; it < first; ++it) {
    mbar_arrive_expect_tx(smem_addr(&full_bar[it]), tx);
    weights(it, it, smem_addr(&full_bar[it]));
  }
  griddep_wait();
  for (int it = 0; it < first; ++it) x_of(it, it, smem_addr(&full_bar[it]));
  int s = first % STAGES;
  uint32_t round = first == STAGES ? 1u : 0u;
  for (int it = first; it < n; ++it) {
    mbar_wait(smem_addr(&empty_bar[s]), (round - 1) & 1);
    const uint32_t full = smem_addr(&full_bar[s]);
    mbar_arrive_expect_tx(full, tx);
    weights(it, s, full);
    x_of(it, s, full);
    if (++s == STAGES) s = 0, ++round;
  }
}

// The producer of a tensor-map ring, one thread: stages s_lo .. s_lo + n - 1 (SK weights each) of the ROWS-row block at
// row_block in issue_ring's order: a box of [ROWS][SK] weights (the ae plane, or bf16), for W12 one of [ROWS][SK / 2]
// nib bytes, and x's [M][SK] at x_offset in the stage.
template <int KIND, int STAGES, int ROWS, int SK>
__device__ __forceinline__ void produce_tma_ring(unsigned char* smem, int stage_bytes, int x_offset, uint64_t* full_bar,
                                                 uint64_t* empty_bar, int s_lo, int n, int row_block, const CUtensorMap* ae_map,
                                                 const CUtensorMap* nib_map, const CUtensorMap* x_map, bool with_x = true) {
  const uint64_t stream = l2_stream_policy();
  const uint64_t keep = l2_evict_last();
  // whole boxes, zeros past N and K included (without x, for SPECDEC_WIDE_ABLATE's timing builds: the weights' boxes)
  const uint32_t tx = static_cast<uint32_t>(with_x ? stage_bytes : x_offset);
  auto weights = [&](int it, int, uint32_t full) {
    const int k0 = (s_lo + it) * SK;
    const uint32_t st = smem_addr(smem + static_cast<size_t>(it % STAGES) * stage_bytes);
    tma_load_2d(st, ae_map, k0, row_block, full, stream);  // bf16: the weights
    if constexpr (KIND == kW12) tma_load_2d(st + ROWS * SK, nib_map, k0 / 2, row_block, full, stream);
  };
  auto x_of = [&](int it, int, uint32_t full) {
    const uint32_t st = smem_addr(smem + static_cast<size_t>(it % STAGES) * stage_bytes);
    if (with_x) tma_load_2d(st + x_offset, x_map, (s_lo + it) * SK, 0, full, keep);
  };
  issue_ring<STAGES>(n, tx, full_bar, empty_bar, weights, x_of);
}

// The escape warp of a W12 tensor-map CTA: the escapes of rows row_block .. row_block + ROWS - 1 whose columns lie in
// the CTA's K slice [k_lo, k_hi), each row's in stored order, summed in fp32 from 0.f into acc[row][m] (shared memory,
// tma_escape_bytes). A 256-row band's escapes are stored tile after tile (kEscapeTile columns a tile), so the slice's
// tiles t_lo .. t_hi hold one contiguous run of them. Rounds of up to 31 tiles: lane l reads the offset of tile t + l.
// Then 32 escapes at a time, one a lane: each lane loads its escape's position and value, finds its tile among the
// offsets, and if the escape is in the slice and the block, loads x at its column for every token (the loads of the
// 32 lanes in flight together) and writes them, the value and the row to shared memory. Last, the kept escapes in
// stored order, lane m doing token m: acc[row][m] = fma(x[m, col], value, acc[row][m]). One step an escape for all
// tokens at once, so a crowded tile costs escapes x ~40 cycles, not escapes x tokens x a shuffle chain. Every escape of
// the band lies in exactly one CTA's slice.
// STRIDE / TOK_STEP: acc's row and token strides (TOK / 1 for a row-major tile, padded rows too; 1 / the padded row
// count for a token-major one); `round`: where a round's x, values and rows go (nullptr: after acc); tok0: the first
// token (x row) of this call, so that warps can split a wide CTA's tokens (acc then points at token tok0's sums).
// LOAD_X false (SPECDEC_WIDE_ABLATE's timing builds only) folds 1.0 for every x.
template <int TOK, int ROWS = kStreamRows, int STRIDE = TOK, int TOK_STEP = 1, bool LOAD_X = true>
__device__ __forceinline__ void fold_escapes(const Params& p, int row_block, int k_lo, int k_hi, int lane, float* scratch,
                                             float* round = nullptr, int tok0 = 0) {
  constexpr unsigned kAll = 0xFFFFFFFFu;
  constexpr int kXStride = TOK + 1;
  constexpr int kTile = TOK_STEP == 1 ? ROWS * STRIDE : TOK * TOK_STEP;  // row-major [ROWS][STRIDE] or token-major
  float* acc = scratch;                                  // row r, token m at r * STRIDE + m * TOK_STEP
  float* xbuf = round != nullptr ? round : acc + kTile;  // [32][TOK + 1]
  float* vals = xbuf + 32 * kXStride;                    // [32]
  int* rows = reinterpret_cast<int*>(vals + 32);         // [32]
  for (int e = lane; e < kTile; e += 32) acc[e] = 0.f;
  griddep_wait();  // x comes from the kernel before this one
  const int M = p.M - tok0;  // this call's tokens: x rows tok0 .. tok0 + min(TOK, M) - 1
  if (k_lo >= k_hi || M <= 0) return;
  const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
  const int tile0 = (row_block / kEscapeTile) * col_tiles;
  const int band_row = row_block % kEscapeTile;
  const int t_hi = (k_hi - 1) / kEscapeTile;
  for (int t = k_lo / kEscapeTile; t <= t_hi;) {
    const int nt = min(31, t_hi - t + 1);  // tiles this round; lane nt reads the end of the last one
    const int start = lane <= nt ? p.esc_ptr[tile0 + t + lane] : 0;
    const int e_lo = __shfl_sync(kAll, start, 0), e_hi = __shfl_sync(kAll, start, nt);
    for (int e0 = e_lo; e0 < e_hi; e0 += 32) {
      const int e = e0 + lane;
      uint32_t pos = 0, bits = 0;
      if (e < e_hi) {
        pos = p.esc_pos[e];
        bits = p.esc_bits[e];
      }
      int tile = t;
      for (int l = 1; l < nt; ++l) tile += __shfl_sync(kAll, start, l) <= e ? 1 : 0;
      const int col = tile * kEscapeTile + static_cast<int>(pos & 0xFFu);
      const int r = static_cast<int>(pos >> 8) - band_row;
      const bool kept = e < e_hi && col >= k_lo && col < k_hi && r >= 0 && r < ROWS;
      const unsigned kept_mask = __ballot_sync(kAll, kept);
      if (kept) {
#pragma unroll
        for (int m = 0; m < TOK; ++m)
          if (m < M)
            xbuf[lane * kXStride + m] =
                LOAD_X ? __uint_as_float(static_cast<uint32_t>(p.x[static_cast<size_t>(tok0 + m) * p.K + col]) << 16) : 1.f;
        vals[lane] = __uint_as_float(bits << 16);
        rows[lane] = r;
      }
      __syncwarp();
      if constexpr (TOK <= 32) {
        if (lane < M) {
          for (unsigned left = kept_mask; left != 0u; left &= left - 1u) {
            const int j = __ffs(left) - 1;
            float* a = acc + rows[j] * STRIDE + lane * TOK_STEP;
            *a = fmaf(xbuf[j * kXStride + lane], vals[j], *a);
          }
        }
      } else {  // lane m does tokens m, m + 32, ...
        for (int m = lane; m < M; m += 32) {
          for (unsigned left = kept_mask; left != 0u; left &= left - 1u) {
            const int j = __ffs(left) - 1;
            float* a = acc + rows[j] * STRIDE + m * TOK_STEP;
            *a = fmaf(xbuf[j * kXStride + m], vals[j], *a);
          }
        }
      }
      __syncwarp();  // the next round overwrites xbuf, vals and rows
    }
    t += nt;
  }
}

template <int KIND, int TOK = kMaxTokens>
__global__ void __launch_bounds__(tma_threads(KIND, TOK), kBulkCtasPerSm)
    tma_gemm_kernel(const Params p, float* partials, unsigned int* counters, const __grid_constant__ CUtensorMap ae_map,
                   const __grid_constant__ CUtensorMap nib_map, const __grid_constant__ CUtensorMap x_map) {
  constexpr int kTmaThreads = tma_threads(KIND, TOK);
  constexpr int kHalves = tma_halves(KIND);
  constexpr int kConsumers = kHalves * kBulkConsumerWarps;
  constexpr int kStages = tma_stages(KIND);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  unsigned char* smem = smem_raw + ((kTmaAlign - (smem_addr(smem_raw) & (kTmaAlign - 1))) & (kTmaAlign - 1));
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.y;
  const int n_stages = (p.K + kBulkStageK - 1) / kBulkStageK;
  const int s_lo = static_cast<int>((static_cast<long long>(split) * n_stages) / p.k_splits);
  const int s_hi = static_cast<int>((static_cast<long long>(split + 1) * n_stages) / p.k_splits);
  const int row_block = blockIdx.x * kStreamRows;
  const int stage_bytes = tma_stage_bytes(KIND, M);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kStages) * stage_bytes);
  float* esc = red + kHalves * kStreamRows * TOK;  // the escape warp's shared memory (fold_escapes)

  if (tid == 0) init_ring_barriers<kStages>(full_bar, empty_bar, 1, kConsumers);
  __syncthreads();

  if (warp == kConsumers) {
    if (lane == 0)
      produce_tma_ring<KIND, kStages, kStreamRows, kBulkStageK>(smem, stage_bytes, tma_stage_bytes(KIND, 0), full_bar, empty_bar, s_lo,
                                                                s_hi - s_lo, row_block, &ae_map, &nib_map, &x_map,
                                                                (SPECDEC_WIDE_ABLATE & 128) == 0);
  } else if (tma_escape_warps(KIND, TOK) == 1 && warp == kConsumers + 1) {
    fold_escapes<TOK>(p, row_block, s_lo * kBulkStageK, min(s_hi * kBulkStageK, p.K), lane, esc);
  } else {
    consume_ring<kTmaXRowBytes, KIND, kStages, TOK, kHalves>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block, warp, lane,
                                                             red);
  }
  __syncthreads();
  griddep_launch_dependents();  // this CTA reads no more weights: a kernel launched after it may start its own
  griddep_wait();               // the epilogue writes the workspace and y: after the kernel before has finished
  if constexpr (kHalves == 2) {  // the first chunks' sums plus the second chunks', in that order
    for (int e = tid; e < kStreamRows * TOK; e += kTmaThreads) red[e] += red[kStreamRows * TOK + e];
    __syncthreads();
  }
  if constexpr (tma_escape_warps(KIND, TOK) == 1) {  // then this slice's escapes
    for (int e = tid; e < kStreamRows * TOK; e += kTmaThreads)
      if (e % TOK < M) red[e] += esc[e];
    __syncthreads();
  }
  if constexpr (tma_epilogue_escapes(KIND, TOK)) {  // the band's escape offsets straight from global memory
    const int col_tiles = (p.K + kEscapeTile - 1) / kEscapeTile;
    finish_split_row_block<kTmaThreads, true, TOK>(p, red, p.esc_ptr + (row_block / kEscapeTile) * col_tiles, partials, counters,
                                                   split);
  } else {
    finish_split_row_block<kTmaThreads, false, TOK>(p, red, nullptr, partials, counters, split);
  }
}

// A build-time switch for timing the wide kernels', the 1-16 token persistent kernel's and the row tiles' phases on the
// GPU's global clock (benchmarks/kernels/wide_trace.py): nvcc -DSPECDEC_WIDE_TRACE=1 makes one thread of each of the
// first kWideTraceCtas CTAs (blockIdx.y * gridDim.x + blockIdx.x) write g_wide_trace[cta][field] at each point (ns;
// the WideTrace fields below); specdec_wide_trace_read copies them out. The products are the untraced build's; the
// records add a store a point and a barrier before the exit.
#ifndef SPECDEC_WIDE_TRACE
#define SPECDEC_WIDE_TRACE 0
#endif
// kTraceStart: after the ring's barriers are set up; kTraceConsumed: warp 0 (group 0) out of its K loop; kTraceRingDone:
// every warp past the K loop; kTraceSummed: the sums' tile complete (escapes and every group's MMAs); kTracePartial: the
// partial tile stored and ordered; kTraceCounted: the row block's counter read; kTraceReduced: the last CTA's sum of
// the splits done; kTraceEnd: the output stored; kTraceMeta: the SM (bits 0-15), the split (16-31), 1 << 32 for the
// last CTA of its row block, k_splits << 40; kTraceEscapes / kTraceGroup1 / kTraceProducer: the escape warp, warp 0
// of the second stage group and the producer out of their loops. The persistent kernels (tma_wide_stream_k_kernel,
// tma_stream_k_kernel) record kTraceStart, kTraceMeta (split 0, k_splits 1), kTraceRingDone (its last segment done),
// kTraceEnd (its owed sums done) and, summed over its run's segments, ns of warp 0's K loops (kTraceSegLoop), of its
// waits there for the CTA's other warps (kTraceSegWait) and of the segments' epilogues (kTraceSegEpilogue: the sums,
// the rows or the partial tile stored, the count); kTraceSegments: the segments (bits 0-15) and how many were partial
// (16-31); tma_stream_k_kernel also kTraceProducer, when its producer has issued the run's last copy, and, summed over
// its segments, ns of its epilogues' sums of the halves' tiles and escapes (kTraceSummed) and of its partial tiles'
// stores with the barrier after them (kTracePartial); of warp 0's griddep_wait before the sums (kTraceCounted); and of
// the sums' loop up to the barrier after it, by the lane 0 of warp 0 (kTraceReduced), of the second half's first warp
// (kTraceGroup1) and of the escape warp (kTraceEscapes): durations there, not clock readings. The row tiles
// (tma_rows_kernel, one CTA a 16-row tile over the whole of K, no split) record kTraceStart, kTraceMeta (split 0,
// last, k_splits 1), kTraceConsumed, kTraceGroup1 (the second stage group's first warp), kTraceEscapes and
// kTraceProducer out of their loops, kTraceRingDone (every warp past the loop), kTraceSummed (row 0's sums done) and
// kTraceEnd (every row stored).
enum WideTrace {
  kTraceStart,
  kTraceConsumed,
  kTraceRingDone,
  kTraceSummed,
  kTracePartial,
  kTraceCounted,
  kTraceReduced,
  kTraceEnd,
  kTraceMeta,
  kTraceEscapes,
  kTraceGroup1,
  kTraceProducer,
  kTraceSegLoop,
  kTraceSegWait,
  kTraceSegEpilogue,
  kTraceSegments,
  kWideTraceFields = 16
};
static_assert(kTraceSegments < kWideTraceFields, "a CTA's trace holds every field");
constexpr int kWideTraceCtas = 4096;
#if SPECDEC_WIDE_TRACE
__device__ unsigned long long g_wide_trace[kWideTraceCtas * kWideTraceFields];
#endif
// Records `value` as this CTA's `field` (traced builds; nothing otherwise).
__device__ __forceinline__ void wide_trace_value(int field, unsigned long long value) {
#if SPECDEC_WIDE_TRACE
  const int cta = blockIdx.y * gridDim.x + blockIdx.x;
  if (cta < kWideTraceCtas) g_wide_trace[cta * kWideTraceFields + field] = value;
#endif
}
// The global clock (ns) in traced builds, 0 otherwise.
__device__ __forceinline__ unsigned long long wide_clock() {
  unsigned long long now = 0;
#if SPECDEC_WIDE_TRACE
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
#endif
  return now;
}
// Records the global clock (ns) as this CTA's `field`.
__device__ __forceinline__ void wide_trace(int field) {
#if SPECDEC_WIDE_TRACE
  wide_trace_value(field, wide_clock());
#endif
}
// kTraceMeta's value: the SM, the split, whether the CTA sums its row block, the row block's K splits.
__device__ __forceinline__ unsigned long long wide_trace_meta(int split, bool last, int k_splits) {
  unsigned int sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  return sm | static_cast<unsigned long long>(split) << 16 | static_cast<unsigned long long>(last) << 32 |
         static_cast<unsigned long long>(k_splits) << 40;
}
// Persistent CTAs over a stream of stages (README.md, "Persistent CTAs over a stream of stages"): the work of a call
// is units = row blocks x stages (a unit: one 64-row block's kBulkStageK columns), cut into gridDim.x contiguous runs
// of equal length, one a CTA (stream_k_unit_lo). A CTA's run crosses row blocks: its producer issues every unit of it
// in order into one ring, so the ring does not drain where a row block ends; its consumers take the run a segment
// (the units of one row block) at a time and finish each segment while the producer already fills the next one's
// stages. A row block covered by one segment is stored at once; one cut into pieces by CTA boundaries gets each
// piece's partial in the workspace, and the piece that arrives last sums them in piece order (k order), so the result
// does not depend on timing. A CTA counts its pieces in as it goes and does the sums it turns out to owe after its run,
// so no reduction holds its consumers mid-run. Piece j of a row block is CTA (first CTA of the block) + j; its partial
// goes to slot 2 CTA (the CTA's first segment) or 2 CTA + 1 (its last), so the partials take 2 x gridDim.x tiles.
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

__device__ __forceinline__ void epilogue_barrier(int threads) { asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory"); }

// Shared memory of a persistent CTA's epilogue (static): the pieces' slots of the block being summed and a flag.
struct StreamKShared {
  int slot[kStreamKMaxPieces];
  int arrived_last;
};

// y rows of `block` from red (thread e_tid < 64: row e_tid), as tma_gemm_kernel's epilogue stores them.
template <int TOK>
__device__ __forceinline__ void store_block_rows(const Params& p, const float* red, int block, int e_tid) {
  const int row = block * kStreamRows + e_tid;
  if (e_tid < kStreamRows && row < p.N) {
    float out[TOK];
#pragma unroll
    for (int m = 0; m < TOK; ++m) out[m] = 0.f;
#pragma unroll
    for (int m = 0; m < TOK; ++m)
      if (m < p.M) out[m] += red[e_tid * TOK + m];
    store_bf16_row<TOK>(p, row, p.M, out);
  }
}

// The sums a CTA owes after its run, by the EPI epilogue threads: for each block it counted a piece of (ticket: the
// counter's value before its count, held by e_tid 0), if its piece came last, sum every piece's partial in piece order
// from 0.f (sum_partial_tiles) and store the rows.
template <int EPI, int TOK>
__device__ __forceinline__ void finish_stream_k_owed(const Params& p, float* red, const float* partials, unsigned int* counters,
                                                     int owed0, unsigned int ticket0, int owed1, unsigned int ticket1, int n_owed,
                                                     int stages, long long units, int e_tid, StreamKShared& sh) {
  const int M = p.M;
  const long long ctas = gridDim.x;
  const int tile_values = kStreamRows * M;
  for (int i = 0; i < n_owed; ++i) {
    const int block = i == 0 ? owed0 : owed1;
    const unsigned int ticket = i == 0 ? ticket0 : ticket1;
    const long long block_lo = static_cast<long long>(block) * stages;
    const int first = stream_k_cta_of<long long>(block_lo, units, ctas);
    const int n_pieces = stream_k_cta_of<long long>(block_lo + stages - 1, units, ctas) - first + 1;
    if (e_tid == 0) {
      sh.arrived_last = ticket == static_cast<unsigned int>(n_pieces - 1);
      if (sh.arrived_last) counters[block] = 0u;  // every piece has arrived: ready for the next launch
    }
    if (e_tid < n_pieces) sh.slot[e_tid] = stream_k_slot<long long>(first + e_tid, block_lo, units, ctas);
    epilogue_barrier(EPI);
    if (sh.arrived_last) {
      // the other pieces' partials: visible through the count's acquire, ordered by the barrier above
      sum_partial_tiles<EPI, TOK>(red, M, n_pieces, e_tid,
                                  [&](int q) { return partials + static_cast<size_t>(sh.slot[q]) * tile_values; });
      epilogue_barrier(EPI);
      store_block_rows<TOK>(p, red, block, e_tid);
    }
    epilogue_barrier(EPI);  // red, slot and arrived_last are read before the next block writes them
  }
}

// tma_gemm_kernel's stages, consumers and escape warp in persistent CTAs (above): gridDim.x CTAs, each a run of
// units. Where the escape warp would not run (tma_epilogue_escapes), the entry point launches tma_gemm_kernel.
template <int KIND, int TOK = kMaxTokens>
__global__ void __launch_bounds__(tma_threads(KIND, TOK), kBulkCtasPerSm)
    tma_stream_k_kernel(const Params p, float* partials, unsigned int* counters, const __grid_constant__ CUtensorMap ae_map,
                        const __grid_constant__ CUtensorMap nib_map, const __grid_constant__ CUtensorMap x_map) {
  constexpr int kTmaThreads = tma_threads(KIND, TOK);
  constexpr int kHalves = tma_halves(KIND);
  constexpr int kConsumers = kHalves * kBulkConsumerWarps;
  constexpr bool kEscapeWarp = tma_escape_warps(KIND, TOK) == 1;
  constexpr int kEpilogue = kTmaThreads - 32;  // every warp but the producer's
  constexpr int kStages = tma_stages(KIND);
  static_assert(!tma_epilogue_escapes(KIND, TOK), "the persistent kernel adds W12 escapes through the escape warp only");
  static_assert(kEpilogue >= kStreamKMaxPieces, "one epilogue thread a piece's slot");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  __shared__ StreamKShared sh;
  unsigned char* smem = smem_raw + ((kTmaAlign - (smem_addr(smem_raw) & (kTmaAlign - 1))) & (kTmaAlign - 1));
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int stages = (p.K + kBulkStageK - 1) / kBulkStageK;
  const long long units = static_cast<long long>((p.N + kStreamRows - 1) / kStreamRows) * stages;
  const long long u_lo = stream_k_unit_lo<long long>(blockIdx.x, units, gridDim.x);
  const long long u_hi = stream_k_unit_lo<long long>(blockIdx.x + 1, units, gridDim.x);
  const int stage_bytes = tma_stage_bytes(KIND, p.M);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kStages) * stage_bytes);
  float* esc = red + kHalves * kStreamRows * TOK;

  if (tid == 0) init_ring_barriers<kStages>(full_bar, empty_bar, 1, kConsumers);
  __syncthreads();
#if SPECDEC_WIDE_TRACE
  if (tid == 0) {
    wide_trace(kTraceStart);
    wide_trace_value(kTraceMeta, wide_trace_meta(0, false, 1));
  }
#endif

  if (warp == kConsumers) {
    if (lane == 0) {
      // As tma_gemm_kernel's producer, over the run's units (row block `row`, stage `k0` kept as counters): the first
      // kStages units' weights before griddep_wait, their x after it.
      const uint64_t stream = l2_stream_policy();
      const uint64_t keep = l2_evict_last();
      constexpr bool kWithX = (SPECDEC_WIDE_ABLATE & 128) == 0;
      const uint32_t tx = static_cast<uint32_t>(kWithX ? stage_bytes : tma_stage_bytes(KIND, 0));
      const int n = static_cast<int>(u_hi - u_lo);
      const int first = min(n, kStages);
      const int k_end = stages * kBulkStageK;
      int row = static_cast<int>(u_lo / stages) * kStreamRows, k0 = static_cast<int>(u_lo % stages) * kBulkStageK;
      int x_k0 = k0;
      auto next = [&](int& r, int& k) {
        k += kBulkStageK;
        if (k == k_end) k = 0, r += kStreamRows;
      };
      for (int it = 0; it < first; ++it) {
        const uint32_t full = smem_addr(&full_bar[it]);
        const uint32_t st = smem_addr(smem + static_cast<size_t>(it) * stage_bytes);
        mbar_arrive_expect_tx(full, tx);
        tma_load_2d(st, &ae_map, k0, row, full, stream);
        if constexpr (KIND == kW12) tma_load_2d(st + kStreamRows * kBulkStageK, &nib_map, k0 / 2, row, full, stream);
        next(row, k0);
      }
      griddep_wait();
      int x_row = 0;
      for (int it = 0; it < first; ++it) {
        const uint32_t st = smem_addr(smem + static_cast<size_t>(it) * stage_bytes);
        if constexpr (kWithX) tma_load_2d(st + tma_stage_bytes(KIND, 0), &x_map, x_k0, 0, smem_addr(&full_bar[it]), keep);
        next(x_row, x_k0);
      }
      int s = first % kStages;
      uint32_t round = first == kStages ? 1u : 0u;
      for (int it = first; it < n; ++it) {
        mbar_wait(smem_addr(&empty_bar[s]), (round - 1) & 1);
        const uint32_t full = smem_addr(&full_bar[s]);
        const uint32_t st = smem_addr(smem + static_cast<size_t>(s) * stage_bytes);
        mbar_arrive_expect_tx(full, tx);
        tma_load_2d(st, &ae_map, k0, row, full, stream);
        if constexpr (KIND == kW12) tma_load_2d(st + kStreamRows * kBulkStageK, &nib_map, k0 / 2, row, full, stream);
        if constexpr (kWithX) tma_load_2d(st + tma_stage_bytes(KIND, 0), &x_map, k0, 0, full, keep);
        next(row, k0);
        if (++s == kStages) s = 0, ++round;
      }
      wide_trace(kTraceProducer);
    }
    griddep_launch_dependents();
    return;
  }
  const int M = p.M;
  const long long ctas = gridDim.x;
  const int e_tid = warp < kConsumers ? tid : tid - 32;
  int owed0 = 0, owed1 = 0;  // the blocks this run has pieces of (at most two: its first segment and its last)
  unsigned int ticket0 = 0u, ticket1 = 0u;
  int n_owed = 0;
  int slot = 0;
  uint32_t round = 0;
  unsigned long long seg_loop = 0, seg_wait = 0, seg_epilogue = 0, seg_mark = 0;  // traced builds' sums (tid 0)
  unsigned long long epi_sums = 0, epi_store = 0, epi_mark = 0;  // the epilogues' parts
  unsigned long long own_sums = 0, own_mark = 0, acquire = 0;     // each warp's lane 0: its own part of the sums
  unsigned int segments = 0, partial_segments = 0;
  for (long long u = u_lo; u < u_hi;) {
    const int block = static_cast<int>(u / stages);
    const long long block_lo = static_cast<long long>(block) * stages;
    const long long end = min(u_hi, block_lo + stages);
    const int s_lo = static_cast<int>(u - block_lo), s_hi = static_cast<int>(end - block_lo);
    if (SPECDEC_WIDE_TRACE && tid == 0) seg_mark = wide_clock();
    if (kEscapeWarp && warp == kConsumers + 1)
      fold_escapes<TOK>(p, block * kStreamRows, s_lo * kBulkStageK, min(s_hi * kBulkStageK, p.K), lane, esc);
    else
      consume_segment<kTmaXRowBytes, KIND, kStages, TOK, kHalves>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi,
                                                                  block * kStreamRows, warp, lane, red, slot, round);
    if (end == u_hi) griddep_launch_dependents();  // this CTA reads no more weights
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      const unsigned long long now = wide_clock();
      seg_loop += now - seg_mark;
      seg_mark = now;
    }
    epilogue_barrier(kEpilogue);
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      const unsigned long long now = wide_clock();
      seg_wait += now - seg_mark;
      seg_mark = now;
    }
    if (SPECDEC_WIDE_TRACE && lane == 0) own_mark = wide_clock();
    griddep_wait();  // the epilogue writes the workspace and y: after the kernel before has finished
    if (SPECDEC_WIDE_TRACE && tid == 0) acquire += wide_clock() - own_mark;
    if constexpr (kHalves == 2 || kEscapeWarp) {  // the halves' tiles, then this segment's escapes, as tma_gemm_kernel
      for (int e = e_tid; e < ((SPECDEC_WIDE_ABLATE & 512) == 0 ? kStreamRows * TOK : 0); e += kEpilogue) {
        float v = red[e];
        if constexpr (kHalves == 2) v += red[kStreamRows * TOK + e];
        if constexpr (kEscapeWarp) {
          if (e % TOK < M) v += esc[e];
        }
        red[e] = v;
      }
      if (SPECDEC_WIDE_TRACE && lane == 0) own_sums += wide_clock() - own_mark;
      epilogue_barrier(kEpilogue);
    }
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      epi_mark = wide_clock();
      epi_sums += epi_mark - seg_mark;
    }
    const bool whole = s_lo == 0 && s_hi == stages;  // the block lies in this run: no other piece
    if (whole) {
      store_block_rows<TOK>(p, red, block, e_tid);
    } else {
      const int tile_values = kStreamRows * M;
      float* own = partials + static_cast<size_t>(stream_k_slot<long long>(blockIdx.x, block_lo, units, ctas)) * tile_values;
      for (int e = e_tid; e < tile_values; e += kEpilogue) own[e] = red[(e / M) * TOK + e % M];
      epilogue_barrier(kEpilogue);
      if (SPECDEC_WIDE_TRACE && tid == 0) {
        const unsigned long long now = wide_clock();
        epi_store += now - epi_mark;
        epi_mark = now;
      }
      if (e_tid == 0) {  // the barrier orders every thread's partial before this release (cumulativity)
        const unsigned int t = atomic_add_acq_rel_gpu(counters + block, 1u);
        if (n_owed == 0) ticket0 = t;
        else ticket1 = t;
      }
      if (n_owed == 0) owed0 = block;
      else owed1 = block;
      ++n_owed;
    }
    epilogue_barrier(kEpilogue);  // red is read before the next segment writes it
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      seg_epilogue += wide_clock() - seg_mark;
      ++segments;
      partial_segments += whole ? 0u : 1u;
    }
    u = end;
  }
#if SPECDEC_WIDE_TRACE
  if (tid == 0) {
    wide_trace(kTraceRingDone);
    wide_trace_value(kTraceSummed, epi_sums);
    wide_trace_value(kTracePartial, epi_store);
    wide_trace_value(kTraceSegLoop, seg_loop);
    wide_trace_value(kTraceSegWait, seg_wait);
    wide_trace_value(kTraceSegEpilogue, seg_epilogue);
    wide_trace_value(kTraceSegments, segments | partial_segments << 16);
    wide_trace_value(kTraceCounted, acquire);
    wide_trace_value(kTraceReduced, own_sums);
  }
  if (kHalves == 2 && tid == kBulkConsumerWarps * 32) wide_trace_value(kTraceGroup1, own_sums);
  if (kEscapeWarp && tid == (kConsumers + 1) * 32) wide_trace_value(kTraceEscapes, own_sums);
#endif
  finish_stream_k_owed<kEpilogue, TOK>(p, red, partials, counters, owed0, ticket0, owed1, ticket1, n_owed, stages, units, e_tid, sh);
#if SPECDEC_WIDE_TRACE
  epilogue_barrier(kEpilogue);  // the end once every thread's sums are stored
  if (tid == 0) wide_trace(kTraceEnd);
#endif
}

// One row tile a CTA over the whole of K (README.md, "Row-tile CTAs over the whole of K"): a CTA owns kRowTile = 16
// weight rows and reads every k of them, so no partial sum leaves the CTA (no workspace, no counters, no reduction
// launch or last-CTA pass) and a one-wave call has 4-6x as many CTAs as 64-row blocks. The ring of tma_gemm_kernel
// with stages of [16 rows][kRowStageK] weights (a box of 256 bytes or bf16 values a row: the largest a tensor map
// copies), rows_stages(TOK) of them; kRowGroups consumer warps each take one 64-weight chunk of every stage (two of
// 32 for bf16) for all 16 rows, and their sums meet in shared memory in group order. W12 CTAs have an escape warp
// (fold_escapes over the CTA's 16 rows and all of K). Needs K % 32 == 0 and 16-byte aligned planes and x.
// STAGE_GROUPS = 2 doubles the consumers: warps 0-3 take the even stages, 4-7 the odd ones (each its own four tiles of
// sums, added after the first four), so two stages are decoded and multiplied at once; for Q-view calls of at most
// kRowStageGroupCtas CTAs an SM, where the row tiles leave an SM few warps (README.md, "Two stage groups").
constexpr int kRowTile = 16;
constexpr int kRowStageK = 256;
constexpr int kRowGroups = kRowStageK / 64;
constexpr int kRowStageGroupCtas = 3;
#ifndef SPECDEC_ROWS_STAGES16
// Stages of the row tiles at 9-16 tokens: 4 keeps 3 W12 or bf16 CTAs an SM, 3 keeps 4 (faster in the 16-row verify
// step with programmatic launch off or for the GEMMs only, slower with every kernel launched programmatically, under
// a launch bound of 4 or 5: benchmarks/NOTES.md, "Three stages at 9-16 tokens under a launch bound of 5: measured").
#define SPECDEC_ROWS_STAGES16 4
#endif
__host__ __device__ constexpr int rows_stages(int tok) { return tok > kMaxTokens ? SPECDEC_ROWS_STAGES16 : 6; }
#ifndef SPECDEC_ROWS_BOUND16
// The launch bound of the row tiles at 9-16 tokens (CTAs an SM the registers allow): 5 (W12 59-64 registers a thread,
// Q and bf16 59-71; no spills, the W12 loop as long as under 4), where 4 let ptxas take 72-79. On an H100 the bound of 5
// made the W12 16-token calls up to 2 % faster cold and the W12 16-row verify step ~0.5 % faster (benchmarks/NOTES.md,
// "Three stages at 9-16 tokens under a launch bound of 5: measured").
#define SPECDEC_ROWS_BOUND16 5
#endif
// CTAs an SM the registers allow (the launch bound): 5 for one MMA n-tile of tokens (<= 68 registers a thread),
// SPECDEC_ROWS_BOUND16 for two, kRowStageGroupCtas with two stage groups (the Q view's: <= 61 registers); shared memory
// allows 2-7 by M and kind.
__host__ __device__ constexpr int rows_ctas_per_sm(int tok, int stage_groups = 1) {
  return stage_groups > 1 ? kRowStageGroupCtas : tok > kMaxTokens ? SPECDEC_ROWS_BOUND16 : 5;
}
__host__ __device__ constexpr int rows_weight_bytes(int kind) {
  return kRowTile * kRowStageK * (kind == kBf16 ? 2 : 1) + (kind == kW12 ? kRowTile * (kRowStageK / 2) : 0);
}
__host__ __device__ constexpr int rows_stage_bytes(int kind, int M) { return rows_weight_bytes(kind) + M * kRowStageK * 2; }
__host__ __device__ constexpr int rows_threads(int kind, int stage_groups = 1) {
  return (kRowGroups * stage_groups + 1 + (kind == kW12 ? 1 : 0)) * 32;
}
// After the stages: a [16 rows][TOK] fp32 tile a consumer warp, then for W12 the escape warp's sums and round.
__host__ __device__ constexpr int rows_smem_fixed(int kind, int tok, int stage_groups = 1) {
  return kRowGroups * stage_groups * kRowTile * tok * 4 + (kind == kW12 ? tma_escape_bytes(tok, kRowTile) : 0);
}

#ifndef SPECDEC_ROWS_OPAQUE_BASE
// 1 passes the row-tile kernel's aligned shared-memory offset through an empty asm, so that nvcc cannot fold it, with
// the constant offsets after it, into expressions of the module's one `smem_raw` symbol. Folded, those expressions
// are shared between kernels: a change to the 1-8 token W12 row tiles (the lane offsets above) then moves the 16-token
// ones' code too, and made the 16-row verify step 1.1 % slower on an H100; opaque, the 16-token kernels' binary does
// not move (benchmarks/NOTES.md, "The row tiles' opaque base and the lane offsets at 1-8 tokens: measured").
// -DSPECDEC_ROWS_OPAQUE_BASE=0 lets nvcc fold it.
#define SPECDEC_ROWS_OPAQUE_BASE 1
#endif

template <int KIND, int TOK = kMaxTokens, int STAGE_GROUPS = 1>
__global__ void __launch_bounds__(rows_threads(KIND, STAGE_GROUPS), rows_ctas_per_sm(TOK, STAGE_GROUPS))
    tma_rows_kernel(const Params p, const __grid_constant__ CUtensorMap ae_map, const __grid_constant__ CUtensorMap nib_map,
                    const __grid_constant__ CUtensorMap x_map) {
  constexpr int kStages = rows_stages(TOK);
  constexpr int kConsumers = kRowGroups * STAGE_GROUPS;
  constexpr int kEscapeWarp = KIND == kW12 ? 1 : 0;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  int smem_pad = (kTmaAlign - (smem_addr(smem_raw) & (kTmaAlign - 1))) & (kTmaAlign - 1);
  if constexpr (SPECDEC_ROWS_OPAQUE_BASE != 0) keep_in_registers(smem_pad);
  unsigned char* smem = smem_raw + smem_pad;
  const int M = p.M;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int n_stages = (p.K + kRowStageK - 1) / kRowStageK;
  const int row_block = blockIdx.x * kRowTile;
  const int stage_bytes = rows_stage_bytes(KIND, M);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kStages) * stage_bytes);
  float* esc = red + kConsumers * kRowTile * TOK;  // the escape warp's shared memory (fold_escapes)

  if (tid == 0) init_ring_barriers<kStages>(full_bar, empty_bar, 1, kRowGroups);
  __syncthreads();
#if SPECDEC_WIDE_TRACE
  if (tid == 0) {
    wide_trace(kTraceStart);
    wide_trace_value(kTraceMeta, wide_trace_meta(0, true, 1));
  }
#endif

  if (warp == kConsumers) {
    if (lane == 0) {
      produce_tma_ring<KIND, kStages, kRowTile, kRowStageK>(smem, stage_bytes, rows_weight_bytes(KIND), full_bar, empty_bar, 0, n_stages,
                                                            row_block, &ae_map, &nib_map, &x_map, (SPECDEC_WIDE_ABLATE & 64) == 0);
      wide_trace(kTraceProducer);
    }
  } else if (kEscapeWarp == 1 && warp == kConsumers + 1) {
    fold_escapes<TOK, kRowTile>(p, row_block, 0, p.K, lane, esc);
    if (lane == 0) wide_trace(kTraceEscapes);
  } else if constexpr (STAGE_GROUPS == 1) {
    consume_ring<kRowStageK * 2, KIND, kStages, TOK, kRowGroups, kRowTile, kRowStageK>(p, smem, stage_bytes, full_bar, empty_bar, 0,
                                                                                       n_stages, row_block, warp, lane, red);
    if (tid == 0) wide_trace(kTraceConsumed);
  } else {
    const int group = warp / kRowGroups;  // its stages: group, group + STAGE_GROUPS, ...; its chunk: warp % kRowGroups
    consume_ring<kRowStageK * 2, KIND, kStages, TOK, kRowGroups, kRowTile, kRowStageK, STAGE_GROUPS>(
        p, smem, stage_bytes, full_bar, empty_bar, 0, n_stages, row_block, warp % kRowGroups, lane,
        red + group * kRowGroups * kRowTile * TOK, group);
    if (tid == 0) wide_trace(kTraceConsumed);
    if (lane == 0 && warp == kRowGroups) wide_trace(kTraceGroup1);
  }
  __syncthreads();
  if (tid == 0) wide_trace(kTraceRingDone);
  griddep_launch_dependents();  // this CTA reads no more weights: a kernel launched after it may start its own
  griddep_wait();               // y is written after the kernel before has finished
  // Thread r < 16 finishes row r: 0.f + the consumer warps' sums in warp order (a fixed order), then the escapes, then bf16.
  const int row = row_block + tid;
  if (tid < kRowTile && row < p.N) {
    float out[TOK];
#pragma unroll
    for (int m = 0; m < TOK; ++m) {
      out[m] = 0.f;
#pragma unroll
      for (int h = 0; h < kConsumers; ++h) out[m] += red[(h * kRowTile + tid) * TOK + m];
      if constexpr (kEscapeWarp == 1) out[m] += esc[tid * TOK + m];
    }
    if (tid == 0) wide_trace(kTraceSummed);
    store_bf16_row<TOK>(p, row, M, out);
  }
#if SPECDEC_WIDE_TRACE
  __syncthreads();  // the end once every row is stored
  if (tid == 0) wide_trace(kTraceEnd);
#endif
}

// Wide calls (README.md, "Wide calls: wgmma from registers"): 17 to kWideMaxTokens tokens, the tree and two-level
// verifiers' passes. The 16-token kernels above multiply with mma.sync, every warp loading its own copy of x's B
// fragments from shared memory; at 32 tokens they ran at 0.25-0.66x cuBLAS bf16 (benchmarks/NOTES.md). Here a CTA owns
// kWideRows = 128 weight rows: two consumer warpgroups of 64 rows, each issuing wgmma.mma_async m64n32k16 with A, the
// decoded weights, from registers and B, x, read by the tensor cores straight from the ring (a [32 * NB tokens][64 k]
// box a stage, 128-byte swizzled by its tensor map). x is read from shared memory once a warpgroup, not once a warp,
// and through the L2 once for 128 rows (2 M / 192 bytes a W12 weight byte). A warp's A fragment is mma.sync's (rows g
// and g + 8, k 2t.. and 2t + 8..) in natural k order, since x lies in the ring as the tensor map copies it: lane t
// needs the pair (2t, 2t + 1) of a step, which is the (k0, k1) pair of an AE word for even t and the (k2, k3) pair for
// odd t; decode_natural writes decode_exact's two formulas as rotations by lane-dependent amounts. A stage is
// [128 rows][64 k]: ae, for W12 nib, then x at a 1024-byte boundary; K splits over independent CTAs as in
// tma_gemm_kernel, the last CTA of a row block summing the partials in split order (finish_wide_row_block). Each
// warpgroup waits for its MMAs before decoding the next stage (wgmma reads A from its registers until its group
// completes, and the next decode rewrites them); the other warpgroup's decode overlaps them. The ae box lands in the
// 64-byte swizzle (chunk c of row r at c ^ (r / 2 % 4)), so the eight rows of a quarter-warp's AE loads fall in eight
// different banks. Needs K % 64 == 0 and 16-byte aligned planes and x.

constexpr int kWideRows = 128;
// threadIdx.x through an asm volatile: a value ptxas cannot hoist. The persistent kernel's store loops take their
// thread index from it in each segment's epilogue: one derived at the kernel's start was kept across the K loop in
// local memory in the W12 kernels (44-64 bytes spilled at 96 registers; none in the unrolled ones read this way).
__device__ __forceinline__ int thread_index_here() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}
constexpr int kWideConsumerWarps = kWideRows / 16;
constexpr int kWideStageK = 64;
constexpr int kWideBlockTokens = 32;  // tokens of one wgmma (n = 32)
constexpr int kWideMaxBlocks = 4;
constexpr int kWideMaxTokens = kWideBlockTokens * kWideMaxBlocks;
constexpr int kWideSwizzleAlign = 1024;  // a 128-byte swizzle repeats every 8 rows of 128 bytes
constexpr int kWideMaxSplits = 8;
// CTAs an SM of the wide kernel, of `asked` (specdec_set_wide_ctas_per_sm): up to 64 tokens a CTA (NB <= 2) with the
// one-set loop, two may share an SM, so that a second CTA's warps fill the waits of the consumers' short chains
// (shared loads, the decode's dependent steps, the MMAs: two warps a scheduler from one CTA). Its sums' tile and ring
// then fit half the SM's shared memory, and its registers 96 a thread. The pipelined loop (more registers) and 65-128
// tokens (a [128][132] fp32 tile) keep one CTA an SM.
__host__ __device__ constexpr int wide_ctas_per_sm(int nb, bool pipe, int asked) { return nb <= 2 && !pipe && asked == 2 ? 2 : 1; }
// The ring takes what the sums and the escape round leave of this (one CTA an SM: most of its 227 KB; two: under half
// of 228 KB less the 1 KB the SM reserves a CTA and the static shared memory).
__host__ __device__ constexpr int wide_smem_target(int ctas_per_sm) { return ctas_per_sm == 1 ? 200 * 1024 : 108 * 1024; }
__host__ __device__ constexpr int wide_blocks(int M) { return (M + kWideBlockTokens - 1) / kWideBlockTokens; }
__host__ __device__ constexpr int wide_weight_bytes(int kind) {
  return kWideRows * kWideStageK + (kind == kW12 ? kWideRows * (kWideStageK / 2) : 0);
}
__host__ __device__ constexpr int wide_stage_bytes(int kind, int nb) { return wide_weight_bytes(kind) + nb * kWideBlockTokens * kWideStageK * 2; }
// W12's escape warps: one a 32-token block (fold_escapes over tokens 32 w .. 32 w + 31), so that each loads x and
// adds for 32 tokens whatever M; the pipelined loop keeps one for all tokens (with 160 registers a consumer, 13 warps
// leave ptxas too few and it serializes the MMAs).
__host__ __device__ constexpr int wide_escape_warps(int kind, int nb, bool pipe) { return kind != kW12 ? 0 : pipe ? 1 : nb; }
// Threads of the wide kernel: `groups` stage groups of consumer warps (two warpgroups each), the producer warp and, for
// W12, the escape warps.
__host__ __device__ constexpr int wide_threads(int kind, int nb, bool pipe, int groups = 1) {
  return (groups * kWideConsumerWarps + 1 + wide_escape_warps(kind, nb, pipe)) * 32;
}
// The sums' tile is token-major: token m's 128 row sums at m * kWideRowStride. The 4 floats of padding put the 32 lanes
// of an MMA fragment's value (rows g, tokens 2t + c) in 32 banks (4 (2t + c) + g), and a token's rows are 16-byte
// aligned runs: the epilogue reads and stores 4 rows at once.
constexpr int kWideRowStride = kWideRows + 4;
// A 32-token escape warp's round (fold_escapes: x [32][33], values and rows [32]); NB of them hold one warp's round
// over 32 NB tokens ([32][32 NB + 1], values, rows).
constexpr int kWideEscapeRoundFloats = 32 * (kWideBlockTokens + 1) + 64;
// After the stages: the sums [32 NB tokens][kWideRowStride] fp32 (the escape warps' first, then the MMAs' added), then
// for W12 the escape warps' rounds.
__host__ __device__ constexpr int wide_fixed_bytes(int kind, int nb) {
  return (nb * kWideBlockTokens * kWideRowStride + (kind == kW12 ? nb * kWideEscapeRoundFloats : 0)) * 4;
}
// Stages of the ring: as many as the CTA's share of the SM holds after the fixed part, 3 to 8.
__host__ __device__ constexpr int wide_stages(int kind, int nb, int ctas_per_sm) {
  return (wide_smem_target(ctas_per_sm) - wide_fixed_bytes(kind, nb)) / wide_stage_bytes(kind, nb) < 3   ? 3
         : (wide_smem_target(ctas_per_sm) - wide_fixed_bytes(kind, nb)) / wide_stage_bytes(kind, nb) > 8 ? 8
                                                                                                         : (wide_smem_target(ctas_per_sm) - wide_fixed_bytes(kind, nb)) / wide_stage_bytes(kind, nb);
}
__host__ __device__ constexpr int wide_smem_bytes(int kind, int nb, int ctas_per_sm) {
  return wide_stages(kind, nb, ctas_per_sm) * wide_stage_bytes(kind, nb) + wide_fixed_bytes(kind, nb) + kWideSwizzleAlign;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
}
// Keeps the compiler from moving reads or writes of the accumulators across the asynchronous MMAs.
template <int NB>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[NB][16]) {
#pragma unroll
  for (int j = 0; j < NB; ++j)
#pragma unroll
    for (int i = 0; i < 16; ++i) asm volatile("" : "+f"(d[j][i])::"memory");
}

// The shared-memory descriptor of a K-major bf16 operand in the 128-byte swizzle: rows of 64 k (128 bytes), 8-row
// groups 1024 bytes apart (stride byte offset), the leading byte offset unused by this layout (1), swizzle mode 1. The
// start address (>> 4) is the low 14 bits: a tile `offset` bytes further (within the 227 KB of shared memory) adds
// offset >> 4 to the low word, so the descriptors of a stage's tiles are one 32-bit add each from wgmma_desc_sw128_lo.
constexpr uint32_t kWgmmaDescHiSw128 = (kWideSwizzleAlign >> 4) | (1u << 30);  // bits 32-63
__device__ __forceinline__ uint32_t wgmma_desc_sw128_lo(uint32_t smem_byte_addr) { return ((smem_byte_addr & 0x3FFFFu) >> 4) | (1u << 16); }
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t lo) { return (static_cast<uint64_t>(kWgmmaDescHiSw128) << 32) | lo; }

// d[64 rows][32 NB tokens] += A[64][16] (this warp's 16 rows: a0..a3 as mma.sync's A fragment) x B[16 k][32 NB tokens]
// at desc, as one wgmma of n = 32 NB: d[j][4 i + e] holds rows (g, g + 8) for e (0, 1) / (2, 3), tokens 32 j + 8 i + 2t +
// (e & 1), the fragment of NB wgmmas of n = 32 at 32 tokens apart. The Q kernel issues one of n = 32 NB a k16 step (A
// read from the registers once for all n-tiles), the W12 kernel NB of n = 32: each form where it measured faster
// (H100, benchmarks/NOTES.md: the Q view 2-15 % faster at 128 rows with one, W12 up to 8 % slower with one).
template <int NB>
__device__ __forceinline__ void wgmma_m64nk16_rs(float (&d)[NB][16], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc) {
  if constexpr (NB == 1) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[0][4]), "+f"(d[0][5]), "+f"(d[0][6]), "+f"(d[0][7]),
          "+f"(d[0][8]), "+f"(d[0][9]), "+f"(d[0][10]), "+f"(d[0][11]), "+f"(d[0][12]), "+f"(d[0][13]), "+f"(d[0][14]), "+f"(d[0][15])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
  } else if constexpr (NB == 2) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[0][4]), "+f"(d[0][5]), "+f"(d[0][6]), "+f"(d[0][7]),
          "+f"(d[0][8]), "+f"(d[0][9]), "+f"(d[0][10]), "+f"(d[0][11]), "+f"(d[0][12]), "+f"(d[0][13]), "+f"(d[0][14]), "+f"(d[0][15]),
          "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[1][4]), "+f"(d[1][5]), "+f"(d[1][6]), "+f"(d[1][7]),
          "+f"(d[1][8]), "+f"(d[1][9]), "+f"(d[1][10]), "+f"(d[1][11]), "+f"(d[1][12]), "+f"(d[1][13]), "+f"(d[1][14]), "+f"(d[1][15])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
  } else if constexpr (NB == 3) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
        "{%48, %49, %50, %51}, %52, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[0][4]), "+f"(d[0][5]), "+f"(d[0][6]), "+f"(d[0][7]),
          "+f"(d[0][8]), "+f"(d[0][9]), "+f"(d[0][10]), "+f"(d[0][11]), "+f"(d[0][12]), "+f"(d[0][13]), "+f"(d[0][14]), "+f"(d[0][15]),
          "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[1][4]), "+f"(d[1][5]), "+f"(d[1][6]), "+f"(d[1][7]),
          "+f"(d[1][8]), "+f"(d[1][9]), "+f"(d[1][10]), "+f"(d[1][11]), "+f"(d[1][12]), "+f"(d[1][13]), "+f"(d[1][14]), "+f"(d[1][15]),
          "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[2][4]), "+f"(d[2][5]), "+f"(d[2][6]), "+f"(d[2][7]),
          "+f"(d[2][8]), "+f"(d[2][9]), "+f"(d[2][10]), "+f"(d[2][11]), "+f"(d[2][12]), "+f"(d[2][13]), "+f"(d[2][14]), "+f"(d[2][15])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
  } else if constexpr (NB == 4) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[0][4]), "+f"(d[0][5]), "+f"(d[0][6]), "+f"(d[0][7]),
          "+f"(d[0][8]), "+f"(d[0][9]), "+f"(d[0][10]), "+f"(d[0][11]), "+f"(d[0][12]), "+f"(d[0][13]), "+f"(d[0][14]), "+f"(d[0][15]),
          "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[1][4]), "+f"(d[1][5]), "+f"(d[1][6]), "+f"(d[1][7]),
          "+f"(d[1][8]), "+f"(d[1][9]), "+f"(d[1][10]), "+f"(d[1][11]), "+f"(d[1][12]), "+f"(d[1][13]), "+f"(d[1][14]), "+f"(d[1][15]),
          "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[2][4]), "+f"(d[2][5]), "+f"(d[2][6]), "+f"(d[2][7]),
          "+f"(d[2][8]), "+f"(d[2][9]), "+f"(d[2][10]), "+f"(d[2][11]), "+f"(d[2][12]), "+f"(d[2][13]), "+f"(d[2][14]), "+f"(d[2][15]),
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[3][4]), "+f"(d[3][5]), "+f"(d[3][6]), "+f"(d[3][7]),
          "+f"(d[3][8]), "+f"(d[3][9]), "+f"(d[3][10]), "+f"(d[3][11]), "+f"(d[3][12]), "+f"(d[3][13]), "+f"(d[3][14]), "+f"(d[3][15])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
  }
}

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

// A consumer warp of tma_wide_kernel (warps 0-3 and 4-7: two warpgroups): warp w decodes rows 16 w + g, 16 w + g + 8
// of every stage s_lo .. s_hi - 1 of the ring into A fragments, one k16 step at a time (a0 / a1: k 2t, 2t + 1 of rows
// g / g + 8; a2 / a3: k 2t + 8, 2t + 9), then its warpgroup multiplies them into acc[j] (tokens 32 j .. 32 j + 31) for
// the stage's four steps. A stage is released by every consumer warp once its warpgroup's MMAs that read the stage's
// x have completed. PIPE = false: the warpgroup waits for a stage's MMAs before it decodes the next (wait_group 0: one
// set of A registers). PIPE = true: two sets of A registers, a0 for even stages and a1 for odd ones; the warpgroup
// decodes stage s + 1 into the other set while stage s's MMAs run, then waits for those (wait_group 1) before it
// releases stage s and rewrites their set. Each set is kept live (an empty asm reading and writing it) until the wait
// that retires its MMAs, so ptxas cannot give the next decode the registers the MMAs in flight read. GROUPS stage
// groups (the one-set loop only): the warps of group `group` take stages s_lo + group, s_lo + group + GROUPS, ...
// UNROLL (the one-set loop; the group then GROUP, a constant): the loop unrolled over one pass of the group's slots
// (STAGES / GROUPS stages), so that each copy's slot is a constant and the stage's MMA descriptors are uniform values
// (uniform-pipe adds on the ring's base) rather than vector adds moved to uniform registers, two moves an MMA.
// pos0: the ring position of stage s_lo, for a CTA whose ring runs on over several row blocks (tma_wide_stream_k_kernel;
// the one-set loops): stage s_lo + i is in slot (pos0 + i) % STAGES on lap (pos0 + i) / STAGES, and with stage groups
// group g takes the stages whose position is g modulo GROUPS (the slots g, g + GROUPS, ...: STAGES % GROUPS == 0).
template <int KIND, int NB, int STAGES, bool PIPE, int GROUPS = 1, bool UNROLL = false, int GROUP = 0>
__device__ __forceinline__ void consume_wide_ring(const Params& p, unsigned char* ring, int stage_bytes, uint64_t* full_bar,
                                                  uint64_t* empty_bar, int s_lo, int s_hi, int row_block, int warp, int lane,
                                                  float (&acc)[NB][16], int group = 0, int pos0 = 0) {
  static_assert(GROUPS == 1 || !PIPE, "stage groups run the one-set loop");
  static_assert(!UNROLL || (!PIPE && GROUP < GROUPS), "the unrolled loop is the one-set loop of a constant group");
  // Each slot's stages must all be one group's: a full barrier is waited on by phase parity, which is right only while
  // the waiter has drained the barrier's phase before. With an odd ring of two groups, slot s holds an even stage then
  // an odd one, and a group a lap ahead of the other would read an unfilled phase's parity as complete.
  static_assert(STAGES % GROUPS == 0, "every slot of the ring belongs to one stage group");
  const int g = lane >> 2, t = lane & 3;
  const int tile_row = warp * 16 + g;
  const uint32_t mid = KIND == kQ ? 8u : 0u;
  const uint32_t X0 = (static_cast<uint32_t>(p.base[min(row_block + tile_row, p.N - 1)]) << 7) | mid;
  const uint32_t X1 = (static_cast<uint32_t>(p.base[min(row_block + tile_row + 8, p.N - 1)]) << 7) | mid;
  const uint32_t rot_em = (t & 1) ? 4u : 28u, sign_mul = (t & 1) ? 1u : 256u, nib_shift = 4 * t;
  const int ae_row = tile_row * kWideStageK + 4 * (t >> 1);  // this lane's first AE word of a step (row g), unswizzled
  const int ae_swizzle = (g >> 1) & 3;  // rows g and g + 8 alike: chunk q of the row lies at chunk q ^ ae_swizzle
  const int nib_lane = kWideRows * kWideStageK + tile_row * (kWideStageK / 2);
#pragma unroll
  for (int j = 0; j < NB; ++j)
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[j][i] = 0.f;
  const int skip = ((group - pos0) % GROUPS + GROUPS) % GROUPS;  // this group's first stage: s_lo + skip
  int s = (pos0 + skip) % STAGES;  // its ring slot
  uint32_t round = static_cast<uint32_t>((pos0 + skip) / STAGES);
  uint32_t sink = 0;  // SPECDEC_WIDE_ABLATE without MMAs: the A fragments folded into one use, or ptxas drops their work
  auto release = [&](int slot) {
    __syncwarp();
    if (lane == 0) mbar_arrive(smem_addr(&empty_bar[slot]));
  };
  // Waits for the stage in slot s and decodes its A fragments into a; returns the stage.
  auto decode_stage = [&](uint32_t (&a)[4][4]) -> const unsigned char* {
    mbar_wait(smem_addr(&full_bar[s]), round & 1);
    const unsigned char* st = ring + static_cast<size_t>(s) * stage_bytes;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const unsigned char* w0 = st + ae_row + 16 * (q ^ ae_swizzle);
      const unsigned char* w1 = w0 + 8 * kWideStageK;
      uint2 n0 = make_uint2(0u, 0u), n1 = make_uint2(0u, 0u);
      if constexpr (KIND == kW12) {
        n0 = *reinterpret_cast<const uint2*>(st + nib_lane + 8 * q);
        n1 = *reinterpret_cast<const uint2*>(st + nib_lane + 8 * (kWideStageK / 2) + 8 * q);
      }
      if constexpr ((SPECDEC_WIDE_ABLATE & 1) != 0) {
        a[q][0] = lds32(w0) ^ n0.x;
        a[q][1] = lds32(w1) ^ n1.x;
        a[q][2] = lds32(w0 + 8) ^ n0.y;
        a[q][3] = lds32(w1 + 8) ^ n1.y;
      } else {
        a[q][0] = decode_natural(lds32(w0), (n0.x >> nib_shift) & 0x000F000Fu, X0, rot_em, sign_mul);
        a[q][1] = decode_natural(lds32(w1), (n1.x >> nib_shift) & 0x000F000Fu, X1, rot_em, sign_mul);
        a[q][2] = decode_natural(lds32(w0 + 8), (n0.y >> nib_shift) & 0x000F000Fu, X0, rot_em, sign_mul);
        a[q][3] = decode_natural(lds32(w1 + 8), (n1.y >> nib_shift) & 0x000F000Fu, X1, rot_em, sign_mul);
      }
    }
    return st;
  };
  // Issues the MMAs of stage st with the A fragments a, as one wgmma group.
  auto issue_stage = [&](const unsigned char* st, uint32_t (&a)[4][4]) {
    const uint32_t x_desc = wgmma_desc_sw128_lo(smem_addr(st + wide_weight_bytes(KIND)));
    keep_live(a);  // written before the fence, not after
    if constexpr ((SPECDEC_WIDE_ABLATE & 2) != 0) {
#pragma unroll
      for (int q = 0; q < 4; ++q) sink ^= a[q][0] ^ a[q][1] ^ a[q][2] ^ a[q][3];
    }
    wgmma_fence_operands<NB>(acc);
    wgmma_fence();
#pragma unroll
    for (int q = 0; q < ((SPECDEC_WIDE_ABLATE & 2) != 0 ? 0 : 4); ++q) {
      if constexpr (KIND == kQ) {
        wgmma_m64nk16_rs<NB>(acc, a[q][0], a[q][1], a[q][2], a[q][3], wgmma_desc_sw128(x_desc + ((q * 32) >> 4)));
      } else {
#pragma unroll
        for (int j = 0; j < NB; ++j) {
          float(&d)[1][16] = *reinterpret_cast<float(*)[1][16]>(&acc[j]);
          wgmma_m64nk16_rs<1>(d, a[q][0], a[q][1], a[q][2], a[q][3],
                              wgmma_desc_sw128(x_desc + ((j * kWideBlockTokens * kWideStageK * 2 + q * 32) >> 4)));
        }
      }
    }
    wgmma_commit();
  };
  auto advance = [&]() {
    s += GROUPS;
    if (s >= STAGES) s -= STAGES, ++round;
  };
  // One stage of the one-set loop: the stage in slot s, decoded, multiplied, retired and released.
  auto one_stage = [&]() {
    uint32_t a[4][4];
    issue_stage(decode_stage(a), a);
    wgmma_wait<0>();  // the MMAs have read this stage's x and their A registers, which the next stage's decode rewrites
    keep_live(a);
    wgmma_fence_operands<NB>(acc);
    release(s);
  };
  if constexpr (UNROLL) {
    constexpr int kPass = STAGES / GROUPS;  // the group's stages in one pass of the ring: slots GROUP, GROUP + GROUPS, ...
    int lo = s_lo;  // the first stage of a lap: slot 0
    if (pos0 % STAGES != 0) {  // the rest of pos0's lap, rolled (slot s from the position), before the unrolled laps
      const int lap_end = min(s_hi, s_lo + STAGES - pos0 % STAGES);
      const int first = ((GROUP - pos0) % GROUPS + GROUPS) % GROUPS;
      s = (pos0 + first) % STAGES;
      round = static_cast<uint32_t>(pos0 / STAGES);
      for (int it = s_lo + first; it < lap_end; it += GROUPS) {
        one_stage();
        advance();
      }
      lo = lap_end;
      round = static_cast<uint32_t>(pos0 / STAGES + 1);
    }
    for (int first = lo + GROUP; first < s_hi; first += STAGES, ++round) {
#pragma unroll
      for (int u = 0; u < kPass; ++u) {
        if (first + GROUPS * u >= s_hi) break;
        s = GROUP + GROUPS * u;
        one_stage();
      }
    }
  } else if constexpr (!PIPE) {
    for (int it = s_lo + skip; it < s_hi; it += GROUPS) {
      one_stage();
      advance();
    }
  } else {
    uint32_t a0[4][4], a1[4][4];
    int it = s_lo;
    int pending = -1;  // the slot whose MMAs are in flight (not yet released)
    // after issuing the stage in slot s: retire the group before it (its A set is then free) and release its slot
    auto retire_previous = [&](uint32_t (&previous)[4][4]) {
      wgmma_wait<1>();
      keep_live(previous);
      if (pending >= 0) release(pending);
      pending = s;
      advance();
    };
    if (it < s_hi) {
      issue_stage(decode_stage(a0), a0);
      pending = s;
      advance();
      ++it;
    }
    for (; it + 1 < s_hi; it += 2) {
      issue_stage(decode_stage(a1), a1);
      retire_previous(a0);
      issue_stage(decode_stage(a0), a0);
      retire_previous(a1);
    }
    if (it < s_hi) {
      issue_stage(decode_stage(a1), a1);
      retire_previous(a0);
    }
    wgmma_wait<0>();
    keep_live(a0);
    keep_live(a1);
    wgmma_fence_operands<NB>(acc);
    if (pending >= 0) release(pending);
  }
  if constexpr ((SPECDEC_WIDE_ABLATE & 2) != 0) acc[0][0] += sink == 0x9E3779B9u ? 1.f : 0.f;
}


// Stores the first M tokens' rows row_block .. row_block + 127 of y from red (token-major, kWideRowStride apart) as
// bf16, threads tid of `threads`: a warp one token's 128 rows, 4 a thread as one 8-byte store where N % 4 == 0; rows
// past N are never stored.
__device__ __forceinline__ void store_wide_rows(const Params& p, const float* red, int row_block, int tid, int threads) {
  constexpr int kRowVecs = kWideRows / 4;  // float4s a token
  const int vecs = p.M * kRowVecs;
  const bool whole = (p.N & 3) == 0;  // then 4 rows of y are 8-byte aligned
  for (int v = tid; v < vecs; v += threads) {
    const int m = v / kRowVecs, r = 4 * (v % kRowVecs);
    const float4 s = reinterpret_cast<const float4*>(red + m * kWideRowStride)[v % kRowVecs];
    uint16_t* y = p.y + static_cast<size_t>(m) * p.N + row_block + r;
    if (whole && row_block + r + 3 < p.N) {
      *reinterpret_cast<uint2*>(y) = make_uint2(bf16_bits_rn(s.x) | static_cast<uint32_t>(bf16_bits_rn(s.y)) << 16,
                                                bf16_bits_rn(s.z) | static_cast<uint32_t>(bf16_bits_rn(s.w)) << 16);
    } else {
      const float vals[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (row_block + r + i < p.N) y[i] = bf16_bits_rn(vals[i]);
    }
  }
}

// A consumer warp's sums into the sums' tile red (token-major, kWideRowStride apart), group by group: acc[j][4 i + e]
// holds rows (g, g + 8) for e (0, 1) / (2, 3) of the warp's 16, tokens 32 j + 8 i + 2t + (e & 1). The first group
// writes its sums (W12: adds them to the escape warps'), a second adds to them.
template <int KIND, int NB>
__device__ __forceinline__ void add_wide_sums(float* red, const float (&acc)[NB][16], int lane, int warp, bool first) {
  const int g = lane >> 2, t = lane & 3, r0 = warp * 16 + g;
#pragma unroll
  for (int j = 0; j < NB; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float* v = red + (32 * j + 8 * i + 2 * t + (e & 1)) * kWideRowStride + r0 + (e >> 1) * 8;
        if (KIND == kW12 || !first) *v += acc[j][4 * i + e];
        else *v = acc[j][4 * i + e];
      }
}

// Sums n partial tiles in order q = 0 .. n - 1 from 0.f into red (token-major [TOK][128] fp32, kWideRowStride apart;
// the first M tokens), threads tid of THREADS: tile q is red's own sums where q == own (-1: none), else the workspace
// tile tile(q) ([TOK][128] fp32 as float4s of 4 rows). The workspace tiles are copied with cp.async into `spare` (the
// spent ring, spare_bytes, at least one tile), as many as it holds at once, each thread the float4s it sums itself,
// so the copies wait for the L2 once a batch (once for up to 64 tokens and 4 tiles on the W12 ring) with no barrier
// between copy and sum; the same bits whatever order the tiles arrived in. The caller orders the tiles' stores before
// the copies (an acquire of their count, then a barrier).
template <int THREADS, int TOK, typename Tile>
__device__ __forceinline__ void sum_wide_tiles(int M, float* red, Tile tile, int n, int own, unsigned char* spare, int spare_bytes,
                                               int tid) {
  constexpr int kRowVecs = kWideRows / 4;  // float4s a token
  constexpr int kTileVec = TOK * kRowVecs;
  constexpr int kVecs = (kTileVec + THREADS - 1) / THREADS;  // float4s a thread sums at most
  const int vecs = M * kRowVecs;  // the float4s of the first M tokens
  auto red_vec = [&](int v) -> float4& { return reinterpret_cast<float4*>(red + (v / kRowVecs) * kWideRowStride)[v % kRowVecs]; };
  float4* slots = reinterpret_cast<float4*>(spare);
  const int capacity = spare_bytes / (kTileVec * 16);
  float4 sum[kVecs];
#pragma unroll
  for (int u = 0; u < kVecs; ++u) sum[u] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int q0 = 0; q0 < n;) {
    int q1 = q0, taken = 0;  // tiles q0 .. q1 - 1: at most `capacity` other than own
    while (q1 < n && (q1 == own || taken < capacity)) taken += q1++ != own;
    for (int q = q0, slot = 0; q < q1; ++q) {
      if (q == own) continue;
      const float4* src = tile(q);
#pragma unroll
      for (int u = 0; u < kVecs; ++u) {
        const int v = u * THREADS + tid;
        if (v < vecs) cp_async16(slots + slot * kTileVec + v, src + v);
      }
      ++slot;
    }
    cp_async_commit();
    cp_async_wait_all();
    for (int q = q0, slot = 0; q < q1; ++q) {
#pragma unroll
      for (int u = 0; u < kVecs; ++u) {
        const int v = u * THREADS + tid;
        if (v >= vecs) continue;
        const float4 x = q == own ? red_vec(v) : slots[slot * kTileVec + v];
        sum[u].x += x.x, sum[u].y += x.y, sum[u].z += x.z, sum[u].w += x.w;
      }
      slot += q != own;
    }
    q0 = q1;
  }
#pragma unroll
  for (int u = 0; u < kVecs; ++u)
    if (u * THREADS + tid < vecs) red_vec(u * THREADS + tid) = sum[u];
}

// After the K loop of tma_wide_kernel (all THREADS threads): red holds the CTA's sums, token-major [TOK = 32 NB][128
// rows] (kWideRowStride apart; tokens past M are zeros), escapes included. Without K splits the CTA stores the first M
// tokens' rows. With k_splits > 1 it writes the first M tokens of its partial tile [TOK][128] fp32 in `partials`
// (float4s of 4 rows), and one barrier then thread 0's acquire-release add on the row block's counter order those
// stores for the last CTA (the release covers what the CTA's threads stored before the barrier). The last CTA sums the
// tiles in split order (sum_wide_tiles: its own tile read back from red, the others through `spare`, the spent ring
// of `spare_bytes`); then it sets the counter back to 0 and stores the rows (store_wide_rows).
template <int THREADS, int TOK>
__device__ __forceinline__ void finish_wide_row_block(const Params& p, float* red, float* partials, unsigned int* counters, int split,
                                                      unsigned char* spare, int spare_bytes) {
  __shared__ int arrived_last;
  constexpr int kRowVecs = kWideRows / 4;  // float4s a token
  constexpr int kTileVec = TOK * kRowVecs;
  const int M = p.M, tid = threadIdx.x;
  const int vecs = M * kRowVecs;  // the float4s of the first M tokens
  const int row_block = blockIdx.x * kWideRows;
  if (p.k_splits > 1) {
    float4* tiles = reinterpret_cast<float4*>(partials) + static_cast<size_t>(blockIdx.x) * p.k_splits * kTileVec;
    for (int v = tid; v < vecs; v += THREADS)
      __stcg(tiles + static_cast<size_t>(split) * kTileVec + v, reinterpret_cast<const float4*>(red + (v / kRowVecs) * kWideRowStride)[v % kRowVecs]);
    __syncthreads();
    if (tid == 0) {
      wide_trace(kTracePartial);
      const unsigned int before = atomic_add_acq_rel_gpu(counters + blockIdx.x, 1u);
      arrived_last = before == static_cast<unsigned int>(p.k_splits - 1);
      if (arrived_last) counters[blockIdx.x] = 0u;
    }
    __syncthreads();
    if (tid == 0) {
      wide_trace(kTraceCounted);
      wide_trace_value(kTraceMeta, wide_trace_meta(split, arrived_last, p.k_splits));
    }
    if (!arrived_last) return;
    sum_wide_tiles<THREADS, TOK>(
        M, red, [&](int q) -> const float4* { return tiles + static_cast<size_t>(q) * kTileVec; }, p.k_splits, split, spare, spare_bytes,
        tid);
    __syncthreads();
    if (tid == 0) wide_trace(kTraceReduced);
  }
  store_wide_rows(p, red, row_block, tid, THREADS);
}

// kWideRows weight rows a CTA, stages s_lo .. s_hi - 1 of K (blockIdx.y of p.k_splits slices), 32 * NB token columns:
// warps 0-7 the consumers (two warpgroups), warp 8 the producer (one thread issuing the tensor-map copies), for W12
// warps 9 .. 8 + NB the escape warps (fold_escapes over the CTA's rows and K slice, warp w for tokens 32 w .. 32 w +
// 31, straight into the sums' tile; the consumers add their sums to it after the K loop: one fp32 addition a value,
// the same bits in either order). GROUPS = 2 (one
// CTA an SM, the one-set loop, up to 64 tokens): warps 0-7 and 8-15 are two stage groups over the same 128 rows, the
// first taking the slice's even stages, the second its odd ones, so that four consumer warps a scheduler, not two,
// cover each other's decode chains and MMA waits; the producer and escape warps follow them. The sums' tile gets the
// escape sums, then the first group's sums, then the second's (the same bits for the same plan and GROUPS).
template <int KIND, int NB, bool PIPE, int CTAS, int GROUPS = 1, bool UNROLL = false>
__global__ void __launch_bounds__(wide_threads(KIND, NB, PIPE, GROUPS), CTAS)
    tma_wide_kernel(const Params p, float* partials, unsigned int* counters, const __grid_constant__ CUtensorMap ae_map,
                    const __grid_constant__ CUtensorMap nib_map, const __grid_constant__ CUtensorMap x_map) {
  // With stage groups, a multiple of GROUPS (consume_wide_ring: each slot one group's); the shared memory the plan
  // asks for holds the undivided ring.
  constexpr int kStages = wide_stages(KIND, NB, CTAS) / GROUPS * GROUPS;
  constexpr int kTok = NB * kWideBlockTokens;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  unsigned char* smem =
      smem_raw + ((kWideSwizzleAlign - (smem_addr(smem_raw) & (kWideSwizzleAlign - 1))) & (kWideSwizzleAlign - 1));
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.y;
  const int n_stages = p.K / kWideStageK;
  const int s_lo = static_cast<int>((static_cast<long long>(split) * n_stages) / p.k_splits);
  const int s_hi = static_cast<int>((static_cast<long long>(split + 1) * n_stages) / p.k_splits);
  const int row_block = blockIdx.x * kWideRows;
  const int stage_bytes = wide_stage_bytes(KIND, NB);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kStages) * stage_bytes);  // [kTok][kWideRowStride]
  float* rounds = red + kTok * kWideRowStride;  // the escape warps' rounds

  static_assert(GROUPS == 1 || (CTAS == 1 && !PIPE && NB <= 2), "stage groups: one CTA an SM, the one-set loop, 64 tokens");
  static_assert(!UNROLL || (CTAS == 1 && !PIPE && GROUPS <= 2), "the unrolled loop: one CTA an SM, the one-set loop");
  constexpr int kConsumers = GROUPS * kWideConsumerWarps;
  if (tid == 0) init_ring_barriers<kStages>(full_bar, empty_bar, 1, kWideConsumerWarps);  // a stage: one group's warps
  __syncthreads();
  if (tid == 0) {
    wide_trace(kTraceStart);
    wide_trace_value(kTraceMeta, wide_trace_meta(split, p.k_splits == 1, p.k_splits));
  }
  float acc[NB][16];
  const bool consumer = warp < kConsumers;
  const int group = warp / kWideConsumerWarps, group_warp = warp % kWideConsumerWarps;
  if (warp == kConsumers) {
    if (lane == 0)
      produce_tma_ring<KIND, kStages, kWideRows, kWideStageK>(smem, stage_bytes, wide_weight_bytes(KIND), full_bar, empty_bar, s_lo,
                                                              s_hi - s_lo, row_block, &ae_map, &nib_map, &x_map,
                                                              (SPECDEC_WIDE_ABLATE & 4) == 0);
    if (lane == 0) wide_trace(kTraceProducer);
  } else if (!consumer) {  // W12 only: the Q kernel has no such warps
    if constexpr ((SPECDEC_WIDE_ABLATE & 16) != 0) {
      // the escape warps fold nothing (a timing build: the sums' tile is left as it was)
    } else if constexpr (KIND == kW12 && wide_escape_warps(KIND, NB, PIPE) == 1) {
      fold_escapes<kTok, kWideRows, 1, kWideRowStride, (SPECDEC_WIDE_ABLATE & 32) == 0>(p, row_block, s_lo * kWideStageK,
                                                                                         s_hi * kWideStageK, lane, red, rounds);
    } else if constexpr (KIND == kW12) {
      const int w = warp - kConsumers - 1;  // tokens 32 w .. 32 w + 31
      fold_escapes<kWideBlockTokens, kWideRows, 1, kWideRowStride, (SPECDEC_WIDE_ABLATE & 32) == 0>(
          p, row_block, s_lo * kWideStageK, s_hi * kWideStageK, lane, red + w * kWideBlockTokens * kWideRowStride,
          rounds + w * kWideEscapeRoundFloats, w * kWideBlockTokens);
    }
    if (lane == 0) wide_trace(kTraceEscapes);
  } else {
    if constexpr (UNROLL && GROUPS == 1) {
      consume_wide_ring<KIND, NB, kStages, PIPE, 1, true, 0>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block, group_warp,
                                                             lane, acc);
    } else if constexpr (UNROLL) {  // a copy of the loop for each group's constant slots
      if (group == 0)
        consume_wide_ring<KIND, NB, kStages, PIPE, GROUPS, true, 0>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block,
                                                                    group_warp, lane, acc);
      else
        consume_wide_ring<KIND, NB, kStages, PIPE, GROUPS, true, 1>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block,
                                                                    group_warp, lane, acc);
    } else {
      consume_wide_ring<KIND, NB, kStages, PIPE, GROUPS>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block, group_warp,
                                                         lane, acc, group);
    }
    if (lane == 0 && group_warp == 0) wide_trace(group == 0 ? kTraceConsumed : kTraceGroup1);
  }
  __syncthreads();  // the ring is done; for W12 the escape sums are in red
  if (tid == 0) wide_trace(kTraceRingDone);
  griddep_launch_dependents();
  auto add_sums = [&](bool first) { add_wide_sums<KIND, NB>(red, acc, lane, group_warp, first); };
  if (consumer && group == 0) add_sums(true);
  if constexpr (GROUPS == 2) {
    __syncthreads();
    if (consumer && group == 1) add_sums(false);
  }
  griddep_wait();
  __syncthreads();
  if (tid == 0) wide_trace(kTraceSummed);
  static_assert(kStages * wide_stage_bytes(KIND, NB) >= kWideRows * kTok * 4, "the spent ring holds at least one partial tile");
  if constexpr ((SPECDEC_WIDE_ABLATE & 8) == 0)
    finish_wide_row_block<wide_threads(KIND, NB, PIPE, GROUPS), kTok>(p, red, partials, counters, split, smem, kStages * stage_bytes);
#if SPECDEC_WIDE_TRACE
  __syncthreads();  // a CTA that is not its row block's last returned above with all its threads
  if (tid == 0) wide_trace(kTraceEnd);
#endif
}

// The producer of tma_wide_stream_k_kernel (one thread): the run's units u_lo .. u_hi - 1 (unit u: row block u / stages,
// stage u % stages) in order into ring slots 0, 1, ..., STAGES - 1, 0, ... across row blocks, so the ring does not
// drain where a row block ends: each unit's weights' boxes and x's [32 NB][kWideStageK] box, in issue_ring's order.
template <int KIND, int STAGES>
__device__ __forceinline__ void produce_wide_run(unsigned char* smem, int stage_bytes, uint64_t* full_bar, uint64_t* empty_bar,
                                                 int u_lo, int u_hi, int stages, const CUtensorMap* ae_map,
                                                 const CUtensorMap* nib_map, const CUtensorMap* x_map) {
  const uint64_t stream = l2_stream_policy();
  const uint64_t keep = l2_evict_last();
  const uint32_t tx = static_cast<uint32_t>(stage_bytes);
  const int k_end = stages * kWideStageK;
  // the unit's row and column kept as counters: a division a stage would hold the one issuing thread up
  int row = (u_lo / stages) * kWideRows, k0 = (u_lo % stages) * kWideStageK;
  int x_k0 = k0;
  auto weights = [&](int, int slot, uint32_t full) {
    const uint32_t st = smem_addr(smem + static_cast<size_t>(slot) * stage_bytes);
    tma_load_2d(st, ae_map, k0, row, full, stream);
    if constexpr (KIND == kW12) tma_load_2d(st + kWideRows * kWideStageK, nib_map, k0 / 2, row, full, stream);
    k0 += kWideStageK;
    if (k0 == k_end) k0 = 0, row += kWideRows;
  };
  auto x_of = [&](int, int slot, uint32_t full) {
    tma_load_2d(smem_addr(smem + static_cast<size_t>(slot) * stage_bytes) + wide_weight_bytes(KIND), x_map, x_k0, 0, full, keep);
    x_k0 += kWideStageK;
    if (x_k0 == k_end) x_k0 = 0;
  };
  issue_ring<STAGES>(u_hi - u_lo, tx, full_bar, empty_bar, weights, x_of);
}

// The row blocks a persistent wide CTA has counted a piece of (at most two: its run's first segment and its last) and
// its tickets (the counters' values before its counts), in shared memory rather than in every thread's registers (the
// W12 kernels at 96 registers spill without room for them).
struct WideOwed {
  int block[2];
  unsigned int ticket[2];
  int n;
};

// The sums a persistent wide CTA owes after its run (tma_wide_stream_k_kernel), by its EPI epilogue threads: for each
// row block it counted a piece of (ticket: the counter's value before its count, taken by e_tid 0 with an
// acquire-release add, so a last piece's e_tid 0 has acquired every other piece's partial tile), if its piece came
// last, sum every piece's partial tile ([M][128] fp32 at the piece's slot, TOK tokens' room a slot) in piece order from
// 0.f (sum_wide_tiles through the spent ring `spare`), store the rows and set the counter back to 0.
template <int EPI, int TOK>
__device__ __forceinline__ void finish_wide_stream_k_owed(const Params& p, float* red, const float* partials, unsigned int* counters,
                                                          const WideOwed& owed, int stages, int units, int e_tid, StreamKShared& sh,
                                                          unsigned char* spare, int spare_bytes) {
  constexpr int kTileVec = TOK * (kWideRows / 4);
  const int ctas = gridDim.x;
  const float4* tiles = reinterpret_cast<const float4*>(partials);
  for (int i = 0; i < owed.n; ++i) {
    const int block = owed.block[i];
    const int block_lo = block * stages;
    const int first = stream_k_cta_of<int>(block_lo, units, ctas);
    const int n_pieces = stream_k_cta_of<int>(block_lo + stages - 1, units, ctas) - first + 1;
    if (e_tid == 0) {
      sh.arrived_last = owed.ticket[i] == static_cast<unsigned int>(n_pieces - 1);
      if (sh.arrived_last) counters[block] = 0u;  // every piece has arrived: ready for the next launch
    }
    if (e_tid < n_pieces) sh.slot[e_tid] = stream_k_slot<int>(first + e_tid, block_lo, units, ctas);
    epilogue_barrier(EPI);
    if (sh.arrived_last) {
      sum_wide_tiles<EPI, TOK>(
          p.M, red, [&](int q) { return tiles + static_cast<size_t>(sh.slot[q]) * kTileVec; }, n_pieces, -1, spare, spare_bytes, e_tid);
      epilogue_barrier(EPI);
      store_wide_rows(p, red, block * kWideRows, e_tid, EPI);
    }
    epilogue_barrier(EPI);  // red, slot and arrived_last are read before the next block writes them
  }
}

// tma_wide_kernel's ring, consumers and escape warps in persistent CTAs (README.md, "Persistent wide CTAs"): the
// work of a call is units = 128-row blocks x stages, cut into gridDim.x contiguous runs of equal length, one a CTA
// (stream_k_unit_lo), so the waves of a multi-wave call do not round up. The producer issues the run's units in order
// into one ring (produce_wide_run); every other warp takes the run a segment (the units of one row block) at a time:
// the consumers' K loop (consume_wide_ring from the segment's ring position), the escape warps' fold of its escapes,
// then the epilogue, while the producer already fills the next segment's stages. A row block inside one run is stored
// at once; one cut by CTA boundaries gets each piece's partial tile in the workspace (slot 2 CTA for the run's first
// segment, 2 CTA + 1 for its last), and the piece counted last sums them in piece order after its run
// (finish_wide_stream_k_owed), so the result does not depend on timing and no reduction holds a run's consumers.
// One CTA an SM, the one-set loop, rolled or UNROLLed as tma_wide_kernel's; GROUPS stage groups as tma_wide_kernel's
// (the groups alternate by ring position). The unit arithmetic is 32-bit: the host launches it only where units x
// (CTAs + 1) fits in an int (wide_stream_k_takes).
template <int KIND, int NB, int GROUPS, bool UNROLL>
__global__ void __launch_bounds__(wide_threads(KIND, NB, false, GROUPS), 1)
    tma_wide_stream_k_kernel(const Params p, float* partials, unsigned int* counters, const __grid_constant__ CUtensorMap ae_map,
                             const __grid_constant__ CUtensorMap nib_map, const __grid_constant__ CUtensorMap x_map) {
  constexpr int kStages = wide_stages(KIND, NB, 1) / GROUPS * GROUPS;
  constexpr int kTok = NB * kWideBlockTokens;
  constexpr int kThreads = wide_threads(KIND, NB, false, GROUPS);
  constexpr int kConsumers = GROUPS * kWideConsumerWarps;
  constexpr int kEpilogue = kThreads - 32;  // every warp but the producer's
  constexpr int kRowVecs = kWideRows / 4;
  constexpr int kTileVec = kTok * kRowVecs;  // float4s of a workspace slot
  static_assert(kEpilogue >= kStreamKMaxPieces, "one epilogue thread a piece's slot");
  static_assert(GROUPS == 1 || NB <= 2, "stage groups up to 64 tokens");
  static_assert(kStages * wide_stage_bytes(KIND, NB) >= kWideRows * kTok * 4, "the spent ring holds at least one partial tile");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  __shared__ StreamKShared sh;
  __shared__ WideOwed owed;
  unsigned char* smem =
      smem_raw + ((kWideSwizzleAlign - (smem_addr(smem_raw) & (kWideSwizzleAlign - 1))) & (kWideSwizzleAlign - 1));
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int stages = p.K / kWideStageK;
  const int units = ((p.N + kWideRows - 1) / kWideRows) * stages;
  const int ctas = gridDim.x;
  const int u_lo = stream_k_unit_lo<int>(blockIdx.x, units, ctas);
  const int u_hi = stream_k_unit_lo<int>(blockIdx.x + 1, units, ctas);
  const int stage_bytes = wide_stage_bytes(KIND, NB);
  float* red = reinterpret_cast<float*>(smem + static_cast<size_t>(kStages) * stage_bytes);  // [kTok][kWideRowStride]
  float* rounds = red + kTok * kWideRowStride;  // the escape warps' rounds

  if (tid == 0) {
    init_ring_barriers<kStages>(full_bar, empty_bar, 1, kWideConsumerWarps);  // a stage: one group's warps
    owed.n = 0;
  }
  __syncthreads();
  if (tid == 0) {
    wide_trace(kTraceStart);
    wide_trace_value(kTraceMeta, wide_trace_meta(0, false, 1));
  }
  if (warp == kConsumers) {
    if (lane == 0) produce_wide_run<KIND, kStages>(smem, stage_bytes, full_bar, empty_bar, u_lo, u_hi, stages, &ae_map, &nib_map, &x_map);
    griddep_launch_dependents();
    return;
  }
  const bool consumer = warp < kConsumers;
  const int e_tid = consumer ? tid : tid - 32;
  const int group = warp / kWideConsumerWarps, group_warp = warp % kWideConsumerWarps;
  float acc[NB][16];
  auto add_sums = [&](bool first) { add_wide_sums<KIND, NB>(red, acc, lane, group_warp, first); };
  unsigned long long seg_loop = 0, seg_wait = 0, seg_epilogue = 0, seg_mark = 0;  // traced builds' sums (tid 0)
  unsigned int segments = 0, partial_segments = 0;
  int block = u_lo / stages;  // then counted up: one division a run
  for (int u = u_lo; u < u_hi; ++block) {
    const int block_lo = block * stages;
    const int end = min(u_hi, block_lo + stages);
    const int s_lo = u - block_lo, s_hi = end - block_lo;
    const int row_block = block * kWideRows;
    if (SPECDEC_WIDE_TRACE && tid == 0) seg_mark = wide_clock();
    if (consumer) {
      if constexpr (UNROLL && GROUPS == 2) {  // a copy of the loop for each group's constant slots
        if (group == 0)
          consume_wide_ring<KIND, NB, kStages, false, GROUPS, true, 0>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block,
                                                                       group_warp, lane, acc, 0, u - u_lo);
        else
          consume_wide_ring<KIND, NB, kStages, false, GROUPS, true, 1>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block,
                                                                       group_warp, lane, acc, 1, u - u_lo);
      } else {
        consume_wide_ring<KIND, NB, kStages, false, GROUPS, UNROLL, 0>(p, smem, stage_bytes, full_bar, empty_bar, s_lo, s_hi, row_block,
                                                                       group_warp, lane, acc, group, u - u_lo);
      }
    } else if constexpr (KIND == kW12 && (SPECDEC_WIDE_ABLATE & 16) == 0) {
      const int w = warp - kConsumers - 1;  // tokens 32 w .. 32 w + 31
      fold_escapes<kWideBlockTokens, kWideRows, 1, kWideRowStride, (SPECDEC_WIDE_ABLATE & 32) == 0>(
          p, row_block, s_lo * kWideStageK, s_hi * kWideStageK, lane, red + w * kWideBlockTokens * kWideRowStride,
          rounds + w * kWideEscapeRoundFloats, w * kWideBlockTokens);
    }
    if (end == u_hi) griddep_launch_dependents();  // this CTA reads no more weights
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      const unsigned long long now = wide_clock();
      seg_loop += now - seg_mark;
      seg_mark = now;
    }
    epilogue_barrier(kEpilogue);  // for W12 the escape sums are in red
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      const unsigned long long now = wide_clock();
      seg_wait += now - seg_mark;
      seg_mark = now;
    }
    if (consumer && group == 0) add_sums(true);
    if constexpr (GROUPS == 2) {
      epilogue_barrier(kEpilogue);
      if (consumer && group == 1) add_sums(false);
    }
    const int tid_here = thread_index_here();
    const int e_tid_here = consumer ? tid_here : tid_here - 32;
    griddep_wait();  // the epilogue writes the workspace and y: after the kernel before has finished
    epilogue_barrier(kEpilogue);
    if (s_lo == 0 && s_hi == stages) {  // the block lies in this run: no other piece
      store_wide_rows(p, red, row_block, e_tid_here, kEpilogue);
    } else {
      float4* own = reinterpret_cast<float4*>(partials) + static_cast<size_t>(stream_k_slot<int>(blockIdx.x, block_lo, units, ctas)) * kTileVec;
      for (int v = e_tid_here; v < p.M * kRowVecs; v += kEpilogue)
        __stcg(own + v, reinterpret_cast<const float4*>(red + (v / kRowVecs) * kWideRowStride)[v % kRowVecs]);
      epilogue_barrier(kEpilogue);
      if (e_tid_here == 0) {  // the release covers every thread's partial stored before the barrier (cumulativity)
        owed.ticket[owed.n] = atomic_add_acq_rel_gpu(counters + block, 1u);
        owed.block[owed.n++] = block;
      }
    }
    epilogue_barrier(kEpilogue);  // red is read before the next segment writes it
    if (SPECDEC_WIDE_TRACE && tid == 0) {
      seg_epilogue += wide_clock() - seg_mark;
      ++segments;
      partial_segments += s_lo != 0 || s_hi != stages;
    }
    u = end;
  }
  if (tid == 0) {
    wide_trace(kTraceRingDone);
    wide_trace_value(kTraceSegLoop, seg_loop);
    wide_trace_value(kTraceSegWait, seg_wait);
    wide_trace_value(kTraceSegEpilogue, seg_epilogue);
    wide_trace_value(kTraceSegments, segments | partial_segments << 16);
  }
  // the ring is spent: every stage the producer issued was waited for and consumed
  finish_wide_stream_k_owed<kEpilogue, kTok>(p, red, partials, counters, owed, stages, units, e_tid, sh, smem, kStages * stage_bytes);
#if SPECDEC_WIDE_TRACE
  epilogue_barrier(kEpilogue);  // the end once every thread's sums are stored
  if (tid == 0) wide_trace(kTraceEnd);
#endif
}

// Launch plan: row tiles per CTA, K splits (cluster size) and the dynamic shared memory. stream_k: a plan of
// tma_stream_k_kernel (grid_x persistent CTAs over row_blocks 64-row blocks; k_splits unused, 1).
// partial_tokens: the tokens of a partial tile (0: M; the wide kernel's 32 NB).
struct Plan {
  int rt_per_cta, k_splits, n_chunks, grid_x, smem_bytes;
  bool stream_k;
  int row_blocks;
  int partial_tokens;
};

int chunk_of(int kind) { return kind == kBf16 ? 32 : 64; }

int x_bytes(int kind, int M, int n_chunks, int splits) {
  const int per_cta = (n_chunks + splits - 1) / splits;
  return per_cta * chunk_of(kind) * M * 2;
}

int band_ptr_bytes(int kind, int K) { return kind == kW12 ? ((K + kEscapeTile - 1) / kEscapeTile + 1) * 4 : 0; }

double bytes_per_weight(int kind) { return kind == kBf16 ? 2.0 : kind == kW12 ? 1.5 : 1.0; }

// Picks (row tiles per CTA, K splits) by a score: how evenly the CTAs spread over the SMs, the loads in
// flight per SM, the per-warp fixed cost against its stream (chunks / (chunks + kUnroll)) and the x staging
// traffic through L2 (x bytes per weight byte = 2 M / (rows per CTA x bytes per weight)). Ties go to more
// rows per CTA and fewer splits.
Plan make_plan(int kind, int M, int N, int K, int sms) {
  Plan pl{};
  pl.n_chunks = (K + chunk_of(kind) - 1) / chunk_of(kind);
  const int tiles = (N + 15) / 16;
  double best = -1.0;
  pl.rt_per_cta = 1;
  pl.k_splits = kMaxClusterSplits;
  for (int rt = 8; rt >= 1; rt /= 2) {
    const int warps_per_tile = kWarps / rt;
    const int blocks = (tiles + rt - 1) / rt;
    for (int ks = 1; ks <= kMaxClusterSplits; ks *= 2) {
      if (x_bytes(kind, M, pl.n_chunks, ks) + kSmemFixed + band_ptr_bytes(kind, K) + 16 > kXBytesHard) continue;
      const double per_warp = static_cast<double>(pl.n_chunks) / (ks * warps_per_tile);
      if (ks > 1 && per_warp < kMinChunksPerWarp) continue;
      const long long ctas = static_cast<long long>(blocks) * ks;
      // One 8-warp CTA keeps ~48 KB of loads in flight, above an SM's share of the bandwidth-latency product
      // (~30 KB), so an idle SM costs in full and an SM with one CTA more than another costs about half.
      const long long per_sm = (ctas + sms - 1) / sms;
      const double balance = static_cast<double>(ctas) / static_cast<double>(per_sm * sms);
      double fill = ctas < sms ? static_cast<double>(ctas) / sms : 0.5 + 0.5 * balance;
      // Loads in flight per SM against ~48 KB (the ~30 KB share with a margin): bf16 / Q CTAs hold 32 KB.
      const double ctas_per_sm = static_cast<double>(ctas < 2LL * sms ? ctas : 2LL * sms) / sms;
      const double in_flight = ctas_per_sm * kUnroll * 16 * chunk_of(kind) * bytes_per_weight(kind) * kWarps;
      fill *= in_flight < 48.0 * 1024 ? in_flight / (48.0 * 1024) : 1.0;
      const double x_traffic = 2.0 * M / (16.0 * rt * bytes_per_weight(kind));
      const double score = fill * per_warp / (per_warp + kUnroll) / (1.0 + 0.4 * x_traffic);
      if (score > best * (1.0 + 1e-9)) {
        best = score;
        pl.rt_per_cta = rt;
        pl.k_splits = ks;
      }
    }
  }
  pl.grid_x = (tiles + pl.rt_per_cta - 1) / pl.rt_per_cta;
  const int xb = (x_bytes(kind, M, pl.n_chunks, pl.k_splits) + 15) / 16 * 16;
  pl.smem_bytes = xb + kSmemFixed + band_ptr_bytes(kind, K);
  return pl;
}

// Launch plan of w12_stream_kernel: 64-row blocks along x, K splits (cluster size) along y. The x slice of a
// CTA must fit kStreamXSliceMax; each CTA keeps >= kStreamMinChunksPerWarp chunks when K is split. Waves are
// counted as CTAs / (SMs x resident CTAs per SM); the plan takes the fewest splits that give >= 2 waves, else
// the most splits allowed (the fullest single wave).
Plan make_stream_plan(int M, int N, int K, int sms, int max_splits) {
  Plan pl{};
  pl.n_chunks = (K + 63) / 64;
  pl.rt_per_cta = kStreamWarps;
  pl.grid_x = (N + kStreamRows - 1) / kStreamRows;
  pl.k_splits = 0;
  for (int ks = 1; ks <= max_splits; ks *= 2) {
    const int per_cta = (pl.n_chunks + ks - 1) / ks;
    if (per_cta * 64 * M * 2 > kStreamXSliceMax) continue;
    if (ks > 1 && pl.n_chunks / ks < kStreamMinChunksPerWarp) break;
    pl.k_splits = ks;
    const int smem = per_cta * 64 * M * 2 + kStreamSmemFixed + band_ptr_bytes(kW12, K);
    int per_sm = (227 * 1024) / (smem + 1024);
    if (per_sm > kStreamCtasPerSm) per_sm = kStreamCtasPerSm;
    if (static_cast<long long>(pl.grid_x) * ks >= 2LL * sms * per_sm) break;
  }
  if (pl.k_splits == 0) pl.k_splits = max_splits;  // too large a slice even at the most splits: launch refuses it
  const int per_cta = (pl.n_chunks + pl.k_splits - 1) / pl.k_splits;
  pl.smem_bytes = per_cta * 64 * M * 2 + kStreamSmemFixed + band_ptr_bytes(kW12, K);
  return pl;
}

// Launch plan of w12_split_kernel: 64-row blocks along x, K splits along y (independent CTAs). The splits: the
// fewest that give >= kSplitWaves waves (CTAs / (SMs x resident CTAs per SM)) within three limits: >=
// kStreamMinChunksPerWarp chunks per CTA, at most kSplitMaxSplits, and the partials' traffic (M N splits x 4
// bytes, written once and read once) <= kSplitPartialShare of the W12 weight bytes (1.5 N K); where no such
// count reaches the waves, the most splits within the limits. Always at least the fewest splits whose x slice
// fits kStreamXSliceMax.
constexpr int kSplitWaves = 2;
constexpr int kSplitMaxSplits = 64;
constexpr double kSplitPartialShare = 0.05;
constexpr int kSplitCounterAlign = 256;  // bytes: a workspace's counters take their bytes rounded up to this

int stream_ctas_per_sm(int smem_bytes) {
  const int per_sm = (227 * 1024) / (smem_bytes + 1024);
  return per_sm < kStreamCtasPerSm ? per_sm : kStreamCtasPerSm;
}

Plan make_split_plan(int M, int N, int K, int sms) {
  Plan pl{};
  pl.n_chunks = (K + 63) / 64;
  pl.rt_per_cta = kStreamWarps;
  pl.grid_x = (N + kStreamRows - 1) / kStreamRows;
  auto smem_of = [&](int ks) { return (pl.n_chunks + ks - 1) / ks * 64 * M * 2 + kStreamSmemFixed + band_ptr_bytes(kW12, K); };
  int fit = 1;  // fewest splits whose x slice fits
  while (fit < pl.n_chunks && (pl.n_chunks + fit - 1) / fit * 64 * M * 2 > kStreamXSliceMax) ++fit;
  int most = pl.n_chunks / kStreamMinChunksPerWarp;
  const double traffic_cap = kSplitPartialShare * 1.5 * static_cast<double>(K) / (8.0 * M);  // splits
  if (most > traffic_cap) most = static_cast<int>(traffic_cap);
  if (most > kSplitMaxSplits) most = kSplitMaxSplits;
  if (most < fit) most = fit;
  pl.k_splits = most;
  for (int ks = fit; ks <= most; ++ks) {
    const long long slots = static_cast<long long>(sms) * stream_ctas_per_sm(smem_of(ks));
    if (static_cast<long long>(pl.grid_x) * ks >= kSplitWaves * slots) {
      pl.k_splits = ks;
      break;
    }
  }
  pl.smem_bytes = smem_of(pl.k_splits);
  return pl;
}

// Launch plan of w12_bulk_kernel: 64-row blocks along x, K splits along y (independent CTAs), stages of
// kBulkStageK weights split evenly. The splits: the fewest that give >= kSplitWaves waves (CTAs / (SMs x
// resident CTAs per SM, 2 by shared memory)) within >= kBulkMinStagesPerCta stages per CTA, at most
// kSplitMaxSplits and partial traffic (M N splits x 8 bytes) <= kBulkPartialShare of the W12 weight bytes; where
// no count reaches the waves, the most splits within the limits. n_chunks holds the stage count. The tensor-map
// pipeline (kTmaPipeline) keeps the limits and picks the splits by the length of the last wave instead (below).
int bulk_ctas_per_sm(int smem_bytes) {
  const int per_sm = (227 * 1024) / (smem_bytes + 1024);
  return per_sm < kBulkCtasPerSm ? per_sm : kBulkCtasPerSm;
}

// A ring's pipeline: the number of producer warps issuing bulk copies (w12_bulk_kernel: 1 or
// kBulkConsumerWarps), or one thread issuing tensor-map copies (tma_gemm_kernel): kTmaPipeline for W12,
// kTmaQPipeline for the Q view, kTmaBf16Pipeline for bf16 weights.
constexpr int kTmaPipeline = 0;
constexpr int kTmaQPipeline = -1;
constexpr int kTmaBf16Pipeline = -2;
constexpr bool is_tma(int pipeline) { return pipeline == kTmaPipeline || pipeline == kTmaQPipeline || pipeline == kTmaBf16Pipeline; }
constexpr int tma_kind(int pipeline) { return pipeline == kTmaQPipeline ? kQ : pipeline == kTmaBf16Pipeline ? kBf16 : kW12; }
// A CTA's time besides its stages (launch, filling the ring, the split reduction), in stages.
constexpr int kTmaFixedStages = 2;

// The token capacity of the tensor-map kernel that runs M tokens: one MMA n-tile of 8, or two.
constexpr int tma_tokens(int M) { return M > kMaxTokens ? kTmaMaxTokens : kMaxTokens; }

int bulk_smem_bytes(int M, int K, int pipeline) {
  const int tokens = tma_tokens(M);
  if (is_tma(pipeline)) {
    const int kind = tma_kind(pipeline);
    return tma_stages(kind) * tma_stage_bytes(kind, M) + tma_smem_fixed(kind, tokens) + kTmaAlign;
  }
  return kBulkStages * bulk_stage_bytes(M) + bulk_smem_fixed(pipeline) + band_ptr_bytes(kW12, K);
}

Plan make_bulk_plan(int M, int N, int K, int sms, int pipeline) {
  Plan pl{};
  pl.n_chunks = (K + kBulkStageK - 1) / kBulkStageK;
  pl.rt_per_cta = kStreamWarps;
  pl.grid_x = (N + kStreamRows - 1) / kStreamRows;
  pl.smem_bytes = bulk_smem_bytes(M, K, pipeline);
  const long long slots = static_cast<long long>(sms) * bulk_ctas_per_sm(pl.smem_bytes);
  int most = pl.n_chunks / kBulkMinStagesPerCta;
  const double weight_bytes = is_tma(pipeline) ? bytes_per_weight(tma_kind(pipeline)) : 1.5;
  const double traffic_cap = kBulkPartialShare * weight_bytes * static_cast<double>(K) / (8.0 * M);  // splits
  if (most > traffic_cap) most = static_cast<int>(traffic_cap);
  if (most > kSplitMaxSplits) most = kSplitMaxSplits;
  if (most < 1) most = 1;
  pl.k_splits = most;
  if (is_tma(pipeline)) {
    // Waves of equal CTAs end together, so a last wave that is partly full costs a whole one: the splits that
    // minimise (waves rounded up) x (stages per CTA + kTmaFixedStages), the fewest on a tie.
    double best = -1.0;
    for (int ks = 1; ks <= most; ++ks) {
      const long long waves = (static_cast<long long>(pl.grid_x) * ks + slots - 1) / slots;
      const double cost = static_cast<double>(waves) * ((pl.n_chunks + ks - 1) / ks + kTmaFixedStages);
      if (best < 0.0 || cost < best) best = cost, pl.k_splits = ks;
    }
    return pl;
  }
  for (int ks = 1; ks <= most; ++ks) {
    if (static_cast<long long>(pl.grid_x) * ks >= kSplitWaves * slots) {
      pl.k_splits = ks;
      break;
    }
  }
  return pl;
}

// Launch plan of tma_stream_k_kernel for `pipeline` (a tensor-map one): as many CTAs as fit at once (two per SM by
// shared memory), at most one per kBulkMinStagesPerCta units, so every CTA has a run of at least that many stages.
// The kernel does not read k_splits (1 here); the plan entry points report stream_k_most_pieces in its place.
Plan make_stream_k_plan(int M, int N, int K, int sms, int pipeline) {
  Plan pl{};
  pl.stream_k = true;
  pl.n_chunks = (K + kBulkStageK - 1) / kBulkStageK;
  pl.rt_per_cta = kStreamWarps;
  pl.row_blocks = (N + kStreamRows - 1) / kStreamRows;
  pl.smem_bytes = bulk_smem_bytes(M, K, pipeline);
  const long long slots = static_cast<long long>(sms) * bulk_ctas_per_sm(pl.smem_bytes);
  const long long units = static_cast<long long>(pl.row_blocks) * pl.n_chunks;
  long long ctas = units / kBulkMinStagesPerCta;
  if (ctas > slots) ctas = slots;
  // a block meets at most ctas / blocks + 2 runs: keep that within kStreamKMaxPieces
  if (ctas > static_cast<long long>(pl.row_blocks) * (kStreamKMaxPieces - 2)) ctas = static_cast<long long>(pl.row_blocks) * (kStreamKMaxPieces - 2);
  if (ctas < 1) ctas = 1;
  pl.grid_x = static_cast<int>(ctas);
  pl.k_splits = 1;
  return pl;
}

// The most pieces a row block of a stream-K plan is cut into (the CTAs whose runs meet it); host reporting only, off
// the launch path (one pass over the row blocks).
int stream_k_most_pieces(const Plan& pl) {
  const long long units = static_cast<long long>(pl.row_blocks) * pl.n_chunks;
  int most = 1;
  for (long long b = 0; b < pl.row_blocks; ++b) {
    const long long lo = b * pl.n_chunks;
    const int pieces = stream_k_cta_of<long long>(lo + pl.n_chunks - 1, units, pl.grid_x) - stream_k_cta_of<long long>(lo, units, pl.grid_x) + 1;
    if (pieces > most) most = pieces;
  }
  return most;
}

// Whether the persistent kernel runs a tensor-map call: where the split-K plan takes more than one wave of CTAs and
// a persistent run covers at most kStreamKMaxBlocksPerRun row blocks. On the H200 the persistent CTAs gained on those
// shapes (8B and 32B gate_up, 32B qkv), lost on one-wave ones (8B o and down, where a CTA whose run crosses a row block
// pays a second epilogue) and on lm_head (runs of ~9 blocks, an epilogue each, against split-K's 9 full waves);
// benchmarks/NOTES.md, "Persistent CTAs".
constexpr int kStreamKMaxBlocksPerRun = 4;
bool stream_k_pays(int M, int N, int K, int sms, int pipeline) {
  const Plan split = make_bulk_plan(M, N, K, sms, pipeline);
  const long long slots = static_cast<long long>(sms) * bulk_ctas_per_sm(split.smem_bytes);
  if (static_cast<long long>(split.grid_x) * split.k_splits <= slots) return false;
  const Plan runs = make_stream_k_plan(M, N, K, sms, pipeline);
  return static_cast<long long>(runs.grid_x) * kStreamKMaxBlocksPerRun >= runs.row_blocks;
}

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

template <int KIND, bool VEC16>
int launch(Params p, cudaStream_t stream) {
  static PerDevice<bool> attr_once;
  bool& attr_set = attr_once.here();  // the first call on a device happens before any graph capture (warm-up)
  if (!attr_set) {
    cudaError_t e = cudaFuncSetAttribute(skinny_gemm_kernel<KIND, VEC16>, cudaFuncAttributeMaxDynamicSharedMemorySize, kXBytesHard);
    if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
    attr_set = true;
  }
  const int sms = sm_count();
  if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  const Plan pl = make_plan(KIND, p.M, p.N, p.K, sms);
  if (int rc = check_smem(pl, p, kXBytesHard)) return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = pl.n_chunks;
  return launch_in_clusters(skinny_gemm_kernel<KIND, VEC16>, pl, kThreads, stream, p);
}

template <bool VEC16>
int launch_stream(Params p, cudaStream_t stream) {
  static PerDevice<int> max_splits_of;
  int& max_splits = max_splits_of.here();  // set on the first call on a device, before any graph capture (warm-up)
  if (max_splits == 0) {
    cudaError_t e = cudaFuncSetAttribute(w12_stream_kernel<VEC16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         kStreamXSliceMax + kStreamSmemFixed + 4096);
    if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
    // Clusters of 16 are non-portable: allowed on sm_90 when asked for.
    max_splits = cudaFuncSetAttribute(w12_stream_kernel<VEC16>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess
                     ? kStreamMaxSplits
                     : kMaxClusterSplits;
    cudaGetLastError();
  }
  const int sms = sm_count();
  if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  const Plan pl = make_stream_plan(p.M, p.N, p.K, sms, max_splits);
  if (int rc = check_smem(pl, p, kStreamXSliceMax + kStreamSmemFixed + 4096)) return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = pl.n_chunks;
  return launch_in_clusters(w12_stream_kernel<VEC16>, pl, kStreamThreads, stream, p);
}

template <bool VEC16>
int launch_split(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  static PerDevice<bool> attr_once;
  bool& attr_set = attr_once.here();  // the first call on a device happens before any graph capture (warm-up)
  if (!attr_set) {
    cudaError_t e = cudaFuncSetAttribute(w12_split_kernel<VEC16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         kStreamXSliceMax + kStreamSmemFixed + 4096);
    if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
    attr_set = true;
  }
  const int sms = sm_count();
  if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  const Plan pl = make_split_plan(p.M, p.N, p.K, sms);
  if (int rc = check_smem(pl, p, kStreamXSliceMax + kStreamSmemFixed + 4096)) return rc;
  float* partials = nullptr;
  unsigned int* counters = nullptr;
  if (int rc = split_buffers(pl, p, workspace, workspace_bytes, &partials, &counters)) return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = pl.n_chunks;
  w12_split_kernel<VEC16><<<dim3(pl.grid_x, pl.k_splits, 1), dim3(kStreamThreads, 1, 1), pl.smem_bytes, stream>>>(p, partials, counters);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail("w12_split_kernel launch", e);
  return 0;
}

// What every ring kernel's launch does first: its shared-memory attributes once per process (the first call comes
// before any graph capture, in the warm-up), the plan of `pipeline`, the shared-memory check and the split-K buffers.
template <typename Kernel>
int prepare_ring_launch(Kernel kernel, bool& attr_set, int pipeline, const Params& p, void* workspace, long long workspace_bytes,
                        Plan* pl, float** partials, unsigned int** counters, int max_tokens = kMaxTokens, bool stream_k = false) {
  const int smem_max = bulk_smem_bytes(max_tokens, 1 << 20, pipeline);
  if (!attr_set) {  // two CTAs of ~60-90 KB per SM need the largest shared-memory carveout
    if (int rc = set_smem_attributes(kernel, smem_max)) return rc;
    attr_set = true;
  }
  const int sms = sm_count();
  if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  *pl = stream_k ? make_stream_k_plan(p.M, p.N, p.K, sms, pipeline) : make_bulk_plan(p.M, p.N, p.K, sms, pipeline);
  if (int rc = check_smem(*pl, p, smem_max)) return rc;
  return split_buffers(*pl, p, workspace, workspace_bytes, partials, counters);
}

template <int PRODUCER_WARPS>
int launch_bulk(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  static PerDevice<bool> attr_once;
  Plan pl{};
  float* partials = nullptr;
  unsigned int* counters = nullptr;
  if (int rc = prepare_ring_launch(w12_bulk_kernel<PRODUCER_WARPS>, attr_once.here(), PRODUCER_WARPS, p, workspace, workspace_bytes, &pl,
                                   &partials, &counters))
    return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = (p.K + 63) / 64;
  w12_bulk_kernel<PRODUCER_WARPS>
      <<<dim3(pl.grid_x, pl.k_splits, 1), dim3(bulk_threads(PRODUCER_WARPS), 1, 1), pl.smem_bytes, stream>>>(p, partials, counters);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail("w12_bulk_kernel launch", e);
  return 0;
}

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

// How the tensor-map kernels this thread launches next launch (README.md, "Programmatic dependent launch"): 0 plainly;
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

// The kernel a tensor-map launch of KIND for TOK tokens runs: tma_stream_k_kernel when STREAM_K and its escapes go
// through the escape warp, else tma_gemm_kernel.
template <int KIND, int TOK, bool STREAM_K>
constexpr bool runs_stream_k() {
  return STREAM_K && !tma_epilogue_escapes(KIND, TOK);
}

// tma_gemm_kernel<KIND, TOK> (STREAM_K: tma_stream_k_kernel<KIND, TOK>, runs_stream_k) on p (M <= TOK).
template <int KIND, int TOK, bool STREAM_K = false>
int launch_tma_tokens(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  static PerDevice<bool> attr_once[2];  // split-K kernel, persistent kernel
  Plan pl{};
  float* partials = nullptr;
  unsigned int* counters = nullptr;
  constexpr int pipeline = KIND == kW12 ? kTmaPipeline : KIND == kQ ? kTmaQPipeline : kTmaBf16Pipeline;
  auto kernel = tma_gemm_kernel<KIND, TOK>;
  bool persistent = false;
  if constexpr (runs_stream_k<KIND, TOK, STREAM_K>()) {
    const int sms = sm_count();
    if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
    persistent = stream_k_pays(p.M, p.N, p.K, sms, pipeline);
    if (persistent) kernel = tma_stream_k_kernel<KIND, TOK>;
  }
  if (int rc = prepare_ring_launch(kernel, attr_once[persistent ? 1 : 0].here(), pipeline, p, workspace, workspace_bytes, &pl, &partials,
                                   &counters, TOK, persistent))
    return rc;
  CUtensorMap ae_map, nib_map, x_map;
  if (int rc = encode_weight_maps<KIND>(p, kStreamRows, kBulkStageK, &ae_map, &nib_map, &x_map)) return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = (p.K + 63) / 64;
  const dim3 grid(pl.grid_x, persistent ? 1 : pl.k_splits, 1);
  const cudaError_t e =
      launch_tma_kernel(kernel, grid, tma_threads(KIND, TOK), pl.smem_bytes, stream, p, partials, counters, ae_map, nib_map, x_map);
  if (e != cudaSuccess) return fail(persistent ? "tma_stream_k_kernel launch" : "tma_gemm_kernel launch", e);
  return 0;
}

// The tensor-map kernel of KIND for p.M tokens: one MMA n-tile for M <= 8, two for 9..16. (Four n-tiles for 17..32
// ran 0.25-0.66x cuBLAS bf16 on the H200, below two 16-token calls: benchmarks/NOTES.md.)
template <int KIND, bool STREAM_K = false>
int launch_tma(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  if (p.M > kMaxTokens) return launch_tma_tokens<KIND, kTmaMaxTokens, STREAM_K>(p, workspace, workspace_bytes, stream);
  return launch_tma_tokens<KIND, kMaxTokens, STREAM_K>(p, workspace, workspace_bytes, stream);
}

// The row-tile kernel's plan: one CTA per 16 rows over the whole of K (no K split, no workspace); n_chunks counts its
// stages of kRowStageK weights, smem_bytes its ring, consumer tiles and escape warp (stage_groups: tma_rows_kernel's).
Plan make_rows_plan(int kind, int M, int N, int K, int stage_groups = 1) {
  Plan pl{};
  const int tok = tma_tokens(M);
  pl.rt_per_cta = 1;
  pl.k_splits = 1;
  pl.n_chunks = (K + kRowStageK - 1) / kRowStageK;
  pl.grid_x = (N + kRowTile - 1) / kRowTile;
  pl.smem_bytes = rows_stages(tok) * rows_stage_bytes(kind, M) + rows_smem_fixed(kind, tok, stage_groups) + kTmaAlign;
  return pl;
}

// Whether the row-tile kernel takes a call of the default entry points (W12 v10, Q v5, bf16 v5), by kind, as the H200
// calls that timed both kernels on the 8B and 32B shapes at 1-16 tokens say (benchmarks/NOTES.md, "Row-tile CTAs" and
// "The row-tile rule by kind"). A wave is as many CTAs as the SMs hold at once (rows_resident).
// - W12: every call with K <= kRowW12MaxK, however many waves: in the lean 8B target's steps the row tiles everywhere
//   (its gate_up and lm_head too) were 0.06-0.07 ms faster at one token and 0.15-0.17 ms at 8-16 rows than the
//   persistent plans for those two, with programmatic launch and without (benchmarks/NOTES.md, "The W12 kernel family
//   in the 16-row verify step: measured" and the section after it), though cold, isolated calls put the 8B gate_up
//   1-4 % behind there (the 32B o 3-7 % ahead, the 32B gate_up and the lm_heads within 1.4 %). Past that K (the 32B
//   down: 400 stages a tile, 320 CTAs on 132 SMs, 4-7 % behind cold at 1-8 tokens) at most kRowW12MaxWaves waves
//   that leave the SMs within 10 % of even over the call (CTAs >= 0.9 x SMs x the CTAs of the fullest SM); over more
//   waves, or on an uneven one, the persistent and split-K plans even out the SMs' bytes.
// - Q view: up to kRowQMaxWaves waves at up to 8 tokens; at 9-16 tokens also only where K <= kRowQMaxK16 (over the
//   48-100 stages of the down projections the split-K plan's extra CTAs an SM won). Lost only on lm_head (18 waves).
// - bf16: at up to 8 tokens (the skinny linears' rows) every call with K <= kRowW12MaxK, as W12: in the lean 8B
//   target's steps with the skinny linears the row tiles everywhere were 0.07 ms faster at one token and 0.06 ms at 8
//   rows than this rule's persistent and split-K plans for the gate_up and lm_head (benchmarks/NOTES.md, "Lossless at
//   the 16-row W12 verify steps, and the bf16 and Q families in the step and pass: measured"); at 9-16 tokens one wave,
//   even or not (every uneven single wave measured ran as fast or faster in row tiles).
constexpr int kRowW12MaxWaves = 2;
constexpr int kRowW12MaxK = 8192;
constexpr int kRowQMaxWaves = 8;
constexpr int kRowQMaxK16 = 8192;
// Row-tile CTAs of a plan one SM holds at once: by shared memory (227 KB, 1 KB reserved a CTA) and the launch bound.
int rows_resident(const Plan& pl, int M, int stage_groups = 1) {
  const int per_sm = (227 * 1024) / (pl.smem_bytes + 1024);
  const int bound = rows_ctas_per_sm(tma_tokens(M), stage_groups);
  return per_sm < bound ? per_sm : bound;
}

bool rows_pay(int kind, int M, int N, int K, int sms) {
  const Plan pl = make_rows_plan(kind, M, N, K);
  const int per_sm = rows_resident(pl, M);
  const long long ctas = pl.grid_x;
  if (sms < 1 || per_sm < 1) return false;
  const long long wave = static_cast<long long>(sms) * per_sm;
  if (kind == kQ) return ctas <= kRowQMaxWaves * wave && (M <= kMaxTokens || K <= kRowQMaxK16);
  if (kind == kBf16) return ctas <= wave || (M <= kMaxTokens && K <= kRowW12MaxK);
  if (K <= kRowW12MaxK) return true;
  if (ctas > kRowW12MaxWaves * wave) return false;
  const long long fullest = (ctas + sms - 1) / sms;
  return ctas * 10 >= fullest * sms * 9;
}

// Consumer stage groups of a row-tile call when this thread asked for up to `wanted` (specdec_set_row_stage_groups): 2
// for a Q-view call of at most kMaxTokens tokens whose CTAs are all resident at once at the two-group kernel's
// kRowStageGroupCtas an SM (so the doubled warps take no residency from it), else 1. The H200 calls that timed both
// (benchmarks/NOTES.md, "Two consumer stage groups in the row tiles: measured") put two groups 1-8 % ahead there (8B
// qkv, o, down; 32B o, down at 1 and 8 tokens), and W12 and bf16 nowhere ahead by more than the spread but 2-12 % behind
// at 16 tokens: the Q view at one MMA n-tile of tokens alone has the two-group kernel.
thread_local int g_row_stage_groups = 2;
int rows_stage_groups(int kind, int M, int N, int K, int sms, int wanted) {
  if (wanted < 2 || sms < 1 || kind != kQ || M > kMaxTokens) return 1;
  const Plan two = make_rows_plan(kind, M, N, K, 2);
  return two.grid_x <= static_cast<long long>(sms) * rows_resident(two, M, 2) ? 2 : 1;
}

// The dynamic shared memory and carveout a row-tile kernel for TOK tokens needs at most.
template <int KIND, int TOK, int STAGE_GROUPS = 1, typename Kernel>
int set_rows_attributes(Kernel kernel) {
  return set_smem_attributes(kernel, make_rows_plan(KIND, TOK, 1, kRowStageK, STAGE_GROUPS).smem_bytes);
}

// tma_rows_kernel<KIND, TOK> on p (M <= TOK, K % 32 == 0), with two consumer stage groups where the call takes them
// (rows_stage_groups; the Q view at one MMA n-tile of tokens, the only kernel compiled with two).
template <int KIND, int TOK>
int launch_rows_tokens(Params p, cudaStream_t stream) {
  constexpr bool kTwoGroups = KIND == kQ && TOK == kMaxTokens;
  static PerDevice<bool> attr_once;
  bool& attr_set = attr_once.here();
  auto one_group = tma_rows_kernel<KIND, TOK>;
  auto two_groups = tma_rows_kernel<KIND, TOK, kTwoGroups ? 2 : 1>;
  if (!attr_set) {  // once per device, before any graph capture (the warm-up's call)
    if (int rc = set_rows_attributes<KIND, TOK>(one_group)) return rc;
    if constexpr (kTwoGroups) {
      if (int rc = set_rows_attributes<KIND, TOK, 2>(two_groups)) return rc;
    }
    attr_set = true;
  }
  const int groups = kTwoGroups ? rows_stage_groups(KIND, p.M, p.N, p.K, sm_count(), g_row_stage_groups) : 1;
  const Plan pl = make_rows_plan(KIND, p.M, p.N, p.K, groups);
  CUtensorMap ae_map, nib_map, x_map;
  if (int rc = encode_weight_maps<KIND>(p, kRowTile, kRowStageK, &ae_map, &nib_map, &x_map)) return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = pl.n_chunks;
  const auto kernel = groups > 1 ? two_groups : one_group;
  const cudaError_t e = launch_tma_kernel(kernel, dim3(pl.grid_x, 1, 1), rows_threads(KIND, groups), pl.smem_bytes, stream, p, ae_map,
                                          nib_map, x_map);
  if (e != cudaSuccess) return fail("tma_rows_kernel launch", e);
  return 0;
}

// The row-tile kernel of KIND for p.M tokens: one MMA n-tile for M <= 8, two for 9..16.
template <int KIND>
int launch_rows(Params p, cudaStream_t stream) {
  if (p.M > kMaxTokens) return launch_rows_tokens<KIND, kTmaMaxTokens>(p, stream);
  return launch_rows_tokens<KIND, kMaxTokens>(p, stream);
}

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

// The wide kernel's plan (tma_wide_kernel): kWideRows-row blocks, K split over k_splits CTAs a block (stages of
// kWideStageK weights, at least kWideMinStagesPerSplit / wide_ctas_per_sm a slice: with two CTAs an SM one CTA's ring
// fill overlaps the other's loop) where the blocks alone leave CTA slots idle (wide_ctas_per_sm an SM, by its shared
// memory). The split count maximises the share of the waves' CTA slots the call fills (ctas / (waves x slots)), less
// 3 % a split beyond the first (each CTA fills its ring again) and half the partials' bytes over the weights' (M
// tokens' rows of a [32 NB][128] fp32 tile a CTA, written and read back: 8 M s / (bytes a weight x K)); ties to fewer
// splits.
constexpr int kWideMinStagesPerSplit = 16;
constexpr double kWideSplitCost = 0.03;
constexpr double kWidePartialCost = 0.5;
Plan make_wide_plan(int kind, int M, int N, int K, int sms, bool pipe, int asked_ctas_per_sm) {
  Plan pl{};
  const int nb = wide_blocks(M), ctas_per_sm = wide_ctas_per_sm(nb, pipe, asked_ctas_per_sm);
  pl.rt_per_cta = kWideRows / 16;
  pl.n_chunks = K / kWideStageK;
  pl.grid_x = (N + kWideRows - 1) / kWideRows;
  pl.smem_bytes = wide_smem_bytes(kind, nb, ctas_per_sm);
  pl.partial_tokens = nb * kWideBlockTokens;
  const long long slots = sms > 0 ? static_cast<long long>(sms) * ctas_per_sm : 1;
  int most = pl.n_chunks / (kWideMinStagesPerSplit / ctas_per_sm);
  most = most < 1 ? 1 : most > kWideMaxSplits ? kWideMaxSplits : most;
  double best = -1.0;
  pl.k_splits = 1;
  for (int s = 1; s <= most; ++s) {
    const long long ctas = static_cast<long long>(pl.grid_x) * s;
    const long long waves = (ctas + slots - 1) / slots;
    const double partials = s > 1 ? 8.0 * M * s / ((kind == kW12 ? 1.5 : 1.0) * K) : 0.0;
    const double score =
        static_cast<double>(ctas) / static_cast<double>(waves * slots) - kWideSplitCost * (s - 1) - kWidePartialCost * partials;
    if (score > best + 1e-9) best = score, pl.k_splits = s;
  }
  return pl;
}

// The persistent wide kernel's plan (tma_wide_stream_k_kernel): one CTA an SM, at most one a kWideMinStagesPerSplit
// units so that every run has at least that many stages, and few enough that a row block meets at most
// kStreamKMaxPieces runs. The kernel does not read k_splits (1 here).
Plan make_wide_stream_k_plan(int kind, int M, int N, int K, int sms) {
  Plan pl{};
  const int nb = wide_blocks(M);
  pl.stream_k = true;
  pl.rt_per_cta = kWideRows / 16;
  pl.n_chunks = K / kWideStageK;
  pl.row_blocks = (N + kWideRows - 1) / kWideRows;
  pl.smem_bytes = wide_smem_bytes(kind, nb, 1);
  pl.partial_tokens = nb * kWideBlockTokens;
  const long long units = static_cast<long long>(pl.row_blocks) * pl.n_chunks;
  long long ctas = units / kWideMinStagesPerSplit;
  if (ctas > sms) ctas = sms;
  // a block meets at most ctas / blocks + 2 runs: keep that within kStreamKMaxPieces
  if (ctas > static_cast<long long>(pl.row_blocks) * (kStreamKMaxPieces - 2)) ctas = static_cast<long long>(pl.row_blocks) * (kStreamKMaxPieces - 2);
  pl.grid_x = static_cast<int>(ctas < 1 ? 1 : ctas);
  pl.k_splits = 1;
  return pl;
}

// Whether a wide call runs the persistent kernel under `mode` (specdec_set_wide_stream_k: 0 never, 1 wherever it
// applies, 2 where it was measured faster on the H100, benchmarks/NOTES.md, "Persistent wide CTAs without their own
// costs: measured" and the sections after it): where the split-K plan's CTAs take more than one wave and its last
// wave is under half full, for the Q kernel at every width and W12 up to 64 tokens (at 96-128 W12 was slower); for
// the Q kernel wherever the split plan takes two or three waves, and for W12 up to 64 tokens where it takes three
// (the 8B gate_up, faster in two calls; the 32B qkv's two were level); not on one-wave calls, nor on the lm_head's
// nine waves. It applies with one CTA an SM and the one-set loop, in the shipped and traced builds (not a
// SPECDEC_WIDE_ABLATE one), with the default two stage groups up to 64 tokens, and where its 32-bit unit arithmetic
// holds the call.
bool wide_stream_k_takes(int kind, int M, int N, int K, int sms, bool pipe, int asked_ctas, int groups, int mode) {
  const int nb = wide_blocks(M);
  if (SPECDEC_WIDE_ABLATE != 0 || pipe || mode == 0 || wide_ctas_per_sm(nb, pipe, asked_ctas) != 1)
    return false;
  if (nb <= 2 && groups != 2) return false;
  if (mode != 1) {
    const Plan split = make_wide_plan(kind, M, N, K, sms, pipe, asked_ctas);
    const long long ctas = static_cast<long long>(split.grid_x) * split.k_splits;
    const long long waves = (ctas + sms - 1) / sms;
    const long long last = ctas - (waves - 1) * sms;  // CTAs of the last wave
    bool gains = false;
    if (waves >= 2 && 2 * last < sms) gains = kind == kQ || nb <= 2;  // a short last wave
    else if (waves >= 2) gains = kind == kQ ? waves <= 3 : nb <= 2 && waves == 3;
    if (!gains) return false;
  }
  // the kernel's unit arithmetic is 32-bit (stream_k_unit_lo<int>, stream_k_cta_of<int>)
  const long long units = static_cast<long long>((N + kWideRows - 1) / kWideRows) * (K / kWideStageK);
  return units * (static_cast<long long>(make_wide_stream_k_plan(kind, M, N, K, sms).grid_x) + 1) <= INT_MAX;
}

int check_wide_sizes(int M, int N, int K) {
  if (M < 1 || M > kWideMaxTokens || N < 1 || K < kWideStageK || K % kWideStageK != 0) {
    snprintf(g_error, sizeof(g_error), "expected 1 <= M <= %d, N >= 1 and K a positive multiple of %d, got M=%d N=%d K=%d",
             kWideMaxTokens, kWideStageK, M, N, K);
    return 3;
  }
  return 0;
}

// Launches a wide kernel (`kernel`, `threads` a CTA, of NB token blocks) on p with the plan make_plan(sms) gives: the
// kernel's shared-memory attribute (`attr_bytes`) once per device, the plan's workspace buffers, the tensor maps, a
// grid of (grid_x, k_splits) CTAs. `what` names the kernel in errors.
template <int KIND, int NB, typename Kernel, typename MakePlan>
int launch_wide_kernel(Kernel kernel, PerDevice<bool>& attr_once, int threads, int attr_bytes, MakePlan make_plan, const char* what,
                       Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  bool& attr_set = attr_once.here();  // once per device, before any graph capture (the warm-up's call)
  if (!attr_set) {
    if (int rc = set_smem_attributes(kernel, attr_bytes)) return rc;
    attr_set = true;
  }
  const int sms = sm_count();
  if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  const Plan pl = make_plan(sms);
  float* partials = nullptr;
  unsigned int* counters = nullptr;
  if (int rc = split_buffers(pl, p, workspace, workspace_bytes, &partials, &counters)) return rc;
  CUtensorMap ae_map, nib_map, x_map;
  if (int rc = encode_weight_maps<KIND>(p, kWideRows, kWideStageK, &ae_map, &nib_map, &x_map, NB * kWideBlockTokens,
                                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_SWIZZLE_64B))
    return rc;
  p.rt_per_cta = pl.rt_per_cta;
  p.k_splits = pl.k_splits;
  p.n_chunks = pl.n_chunks;
  const cudaError_t e = launch_tma_kernel(kernel, dim3(pl.grid_x, pl.k_splits, 1), threads, pl.smem_bytes, stream, p, partials, counters,
                                          ae_map, nib_map, x_map);
  if (e != cudaSuccess) return fail(what, e);
  return 0;
}

// tma_wide_kernel<KIND, NB, PIPE, CTAS, GROUPS, UNROLL> on p (M <= 32 NB).
template <int KIND, int NB, bool PIPE, int CTAS, int GROUPS = 1, bool UNROLL = false>
int launch_wide_blocks(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  static PerDevice<bool> attr_once;
  return launch_wide_kernel<KIND, NB>(
      tma_wide_kernel<KIND, NB, PIPE, CTAS, GROUPS, UNROLL>, attr_once, wide_threads(KIND, NB, PIPE, GROUPS), wide_smem_bytes(KIND, NB, CTAS),
      [&](int sms) { return make_wide_plan(KIND, p.M, p.N, p.K, sms, PIPE, CTAS); }, "tma_wide_kernel launch", p, workspace,
      workspace_bytes, stream);
}

// Whether the wide kernels this thread launches from now on decode the next stage while a stage's MMAs run
// (specdec_set_wide_pipeline), and the CTAs an SM they ask for (specdec_set_wide_ctas_per_sm).
thread_local int g_wide_pipeline = 0;
thread_local int g_wide_ctas = 1;
// The consumer stage groups the wide kernels this thread launches from now on take with one CTA an SM and the one-set
// loop up to 64 tokens (specdec_set_wide_stage_groups): 2 or 1.
thread_local int g_wide_groups = 2;
// Which one-set wide kernels with one CTA an SM this thread launches from now on run their loop unrolled over a pass
// of the ring (specdec_set_wide_unroll): 1 all, 0 none, 2 (wide_unrolled's measured choice) all but W12 up to 32 tokens.
thread_local int g_wide_unroll = 2;
// Which wide calls this thread launches from now on run the persistent kernel (specdec_set_wide_stream_k; the modes of
// wide_stream_k_takes).
thread_local int g_wide_stream_k = 2;

// The plan a wide call of this thread launches with: the persistent kernel's where it runs, else the split-K one.
Plan wide_launch_plan(int kind, int M, int N, int K, int sms) {
  return wide_stream_k_takes(kind, M, N, K, sms, g_wide_pipeline != 0, g_wide_ctas, g_wide_groups, g_wide_stream_k)
             ? make_wide_stream_k_plan(kind, M, N, K, sms)
             : make_wide_plan(kind, M, N, K, sms, g_wide_pipeline != 0, g_wide_ctas);
}

// tma_wide_stream_k_kernel<KIND, NB, GROUPS, UNROLL> on p (M <= 32 NB).
template <int KIND, int NB, int GROUPS, bool UNROLL>
int launch_wide_stream_k(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  static PerDevice<bool> attr_once;
  return launch_wide_kernel<KIND, NB>(
      tma_wide_stream_k_kernel<KIND, NB, GROUPS, UNROLL>, attr_once, wide_threads(KIND, NB, false, GROUPS), wide_smem_bytes(KIND, NB, 1),
      [&](int sms) { return make_wide_stream_k_plan(KIND, p.M, p.N, p.K, sms); }, "tma_wide_stream_k_kernel launch", p, workspace,
      workspace_bytes, stream);
}

// Whether a one-set wide call of `kind` over M tokens runs the unrolled loop under `mode` (g_wide_unroll's values). The
// choice of mode 2 is measured (H100, benchmarks/NOTES.md, "The wide loop unrolled over a pass of the ring: measured"):
// the Q kernel up to 7 % faster at 32-128 tokens, W12 1-7 % at 128 and level at 64, but up to 6 % slower at 24-32.
__host__ __device__ constexpr bool wide_unrolled(int kind, int M, int mode) {
  return mode == 1 || (mode == 2 && (kind != kW12 || wide_blocks(M) >= 2));
}

template <int KIND, bool PIPE>
int launch_wide_pipe(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  if constexpr (!PIPE) {
    if (wide_stream_k_takes(KIND, p.M, p.N, p.K, sm_count(), PIPE, g_wide_ctas, g_wide_groups, g_wide_stream_k)) {
      if (wide_unrolled(KIND, p.M, g_wide_unroll)) {
        switch (wide_blocks(p.M)) {
          case 1: return launch_wide_stream_k<KIND, 1, 2, true>(p, workspace, workspace_bytes, stream);
          case 2: return launch_wide_stream_k<KIND, 2, 2, true>(p, workspace, workspace_bytes, stream);
          case 3: return launch_wide_stream_k<KIND, 3, 1, true>(p, workspace, workspace_bytes, stream);
          default: return launch_wide_stream_k<KIND, 4, 1, true>(p, workspace, workspace_bytes, stream);
        }
      }
      switch (wide_blocks(p.M)) {
        case 1: return launch_wide_stream_k<KIND, 1, 2, false>(p, workspace, workspace_bytes, stream);
        case 2: return launch_wide_stream_k<KIND, 2, 2, false>(p, workspace, workspace_bytes, stream);
        case 3: return launch_wide_stream_k<KIND, 3, 1, false>(p, workspace, workspace_bytes, stream);
        default: return launch_wide_stream_k<KIND, 4, 1, false>(p, workspace, workspace_bytes, stream);
      }
    }
    if (wide_ctas_per_sm(wide_blocks(p.M), PIPE, g_wide_ctas) == 2)
      return wide_blocks(p.M) == 1 ? launch_wide_blocks<KIND, 1, PIPE, 2>(p, workspace, workspace_bytes, stream)
                                   : launch_wide_blocks<KIND, 2, PIPE, 2>(p, workspace, workspace_bytes, stream);
    if (g_wide_groups == 2 && wide_blocks(p.M) <= 2) {
      if (wide_unrolled(KIND, p.M, g_wide_unroll))
        return wide_blocks(p.M) == 1 ? launch_wide_blocks<KIND, 1, PIPE, 1, 2, true>(p, workspace, workspace_bytes, stream)
                                     : launch_wide_blocks<KIND, 2, PIPE, 1, 2, true>(p, workspace, workspace_bytes, stream);
      return wide_blocks(p.M) == 1 ? launch_wide_blocks<KIND, 1, PIPE, 1, 2>(p, workspace, workspace_bytes, stream)
                                   : launch_wide_blocks<KIND, 2, PIPE, 1, 2>(p, workspace, workspace_bytes, stream);
    }
    if (wide_unrolled(KIND, p.M, g_wide_unroll)) {
      switch (wide_blocks(p.M)) {
        case 1: return launch_wide_blocks<KIND, 1, PIPE, 1, 1, true>(p, workspace, workspace_bytes, stream);
        case 2: return launch_wide_blocks<KIND, 2, PIPE, 1, 1, true>(p, workspace, workspace_bytes, stream);
        case 3: return launch_wide_blocks<KIND, 3, PIPE, 1, 1, true>(p, workspace, workspace_bytes, stream);
        default: return launch_wide_blocks<KIND, 4, PIPE, 1, 1, true>(p, workspace, workspace_bytes, stream);
      }
    }
  }
  switch (wide_blocks(p.M)) {
    case 1: return launch_wide_blocks<KIND, 1, PIPE, 1>(p, workspace, workspace_bytes, stream);
    case 2: return launch_wide_blocks<KIND, 2, PIPE, 1>(p, workspace, workspace_bytes, stream);
    case 3: return launch_wide_blocks<KIND, 3, PIPE, 1>(p, workspace, workspace_bytes, stream);
    default: return launch_wide_blocks<KIND, 4, PIPE, 1>(p, workspace, workspace_bytes, stream);
  }
}

template <int KIND>
int launch_wide(Params p, void* workspace, long long workspace_bytes, cudaStream_t stream) {
  return g_wide_pipeline ? launch_wide_pipe<KIND, true>(p, workspace, workspace_bytes, stream)
                         : launch_wide_pipe<KIND, false>(p, workspace, workspace_bytes, stream);
}

// The wide plan into out[0..6] as the split-K plans write theirs, for the loop and the CTAs an SM this thread launches.
int wide_plan(int kind, int M, int N, int K, int sms, long long* out) {
  if (sms < 0) return 3;
  if (int rc = check_wide_sizes(M, N, K)) return rc;
  if (sms == 0) {
    sms = sm_count();
    if (sms <= 0) return fail("cudaDeviceGetAttribute(multiProcessorCount)", cudaGetLastError());
  }
  write_split_plan(wide_launch_plan(kind, M, N, K, sms), M, true, out);
  out[6] = 1;
  return 0;
}

}  // namespace

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
