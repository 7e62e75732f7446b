// The plans of the ring kernels: split-K by the length of the last wave, and persistent runs.
#pragma once

#include "../common/params.cuh"
#include "ring.cuh"
#include "tensor_map_layout.cuh"
#include "stream_k_units.cuh"
#include "../common/plan.cuh"
#include "../registers/plans.cuh"

namespace {

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

}  // namespace
