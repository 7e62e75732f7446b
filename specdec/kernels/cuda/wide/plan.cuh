// The wide kernels' plans: split-K by the waves' fill, persistent runs, and when they are taken.
#pragma once

#include "../common/params.cuh"
#include "../common/ablate.cuh"
#include "../ring/stream_k_units.cuh"
#include "layout.cuh"
#include "../common/plan.cuh"
#include "../common/launch_support.cuh"

namespace {

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

}  // namespace
