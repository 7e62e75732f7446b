// A consumer warp of a ring: one stage's loads, decode and mma.sync, and its loop over a segment of stages.
#pragma once

#include "../common/params.cuh"
#include "../common/chunk_loads.cuh"
#include "../common/decode.cuh"
#include "ring.cuh"
#include "../common/ablate.cuh"

namespace {

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

}  // namespace
