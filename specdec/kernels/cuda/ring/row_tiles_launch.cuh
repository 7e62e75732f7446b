// The row tiles' plan, the rule that sends a default call to them, and their launch.
#pragma once

#include "../common/params.cuh"
#include "tensor_map_layout.cuh"
#include "row_tiles.cuh"
#include "../common/plan.cuh"
#include "plans.cuh"
#include "../common/launch_support.cuh"
#include "tensor_maps.cuh"

namespace {

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

}  // namespace
