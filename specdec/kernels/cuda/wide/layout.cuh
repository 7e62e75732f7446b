// The wide kernels' (17-128 tokens) CTA, stages and shared memory.
#pragma once

#include "../common/params.cuh"

namespace {

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

}  // namespace
