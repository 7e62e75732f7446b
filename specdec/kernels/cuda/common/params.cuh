// The kernels' shared constants, the weight kinds and Params, a call's operands and sizes.
#pragma once

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

// The 64-row block of the streaming, split-K and ring kernels: four warps of 16 rows.
constexpr int kStreamWarps = 4;
constexpr int kStreamThreads = kStreamWarps * 32;
constexpr int kStreamRows = kStreamWarps * 16;

}  // namespace
