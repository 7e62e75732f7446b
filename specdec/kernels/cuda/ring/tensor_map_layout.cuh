// The tensor-map kernels' stages, warps and shared memory, and their build-time switches.
#pragma once

#include "../common/params.cuh"
#include "ring.cuh"

namespace {

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

}  // namespace
