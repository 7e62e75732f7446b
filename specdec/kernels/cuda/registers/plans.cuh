// The plans of the register kernels: row tiles and cluster splits, and independent K splits.
#pragma once

#include "../common/params.cuh"
#include "stream_kernel.cuh"
#include "../common/plan.cuh"

namespace {

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

}  // namespace
