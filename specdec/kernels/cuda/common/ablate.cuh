// SPECDEC_WIDE_ABLATE, the build-time switch that leaves kernel parts out for timing.
#pragma once

namespace {

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

}  // namespace
