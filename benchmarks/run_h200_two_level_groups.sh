#!/usr/bin/env bash
# The two-level verifier's Q-view pass with the Q view's two consumer stage groups (the default at 1-8 rows where the
# row tiles' CTAs all fit at three an SM) and without them ($SPECDEC_ROW_STAGE_GROUPS=1), Qwen3-8B shape, random
# weights, W12 and bf16 targets with the packed Q view, in one call: the single passes (exact and Q view at 8, 16 and
# 65 rows) under the default with the tree and two-level systems on SpecPilot's one-level acceptance profile, then the
# passes alone under one group. Writes both JSON files and logs to $OUT.
# Expected time on one H200: ~3 min (two 8B targets built and graphs captured a process, ~60 s; the systems ~40 s).
# Caps: 240 s with the systems (budget 150 s), 150 s for the passes: at most 6.5 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_two_level_groups.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$OUT/two_level_groups_build.log"
unset SPECDEC_ROW_STAGE_GROUPS
timeout 240 python3 -m benchmarks.decode.bench_two_level --variants w12-packed,bf16-packed --system-variants w12-packed \
  --profiles specpilot-one-level --systems 'tree,two-level always' --tokens 64 --reps 10 --pass-rows 8,16,65 --budget-s 150 \
  --out "$OUT/two_level_groups_default.json" > "$OUT/two_level_groups_default.log" 2>&1
echo "two-level, default stage groups: exit $?"
export SPECDEC_ROW_STAGE_GROUPS=1
timeout 150 python3 -m benchmarks.decode.bench_two_level --variants w12-packed,bf16-packed --profiles none --reps 10 \
  --pass-rows 8,16,65 --out "$OUT/two_level_groups_1.json" > "$OUT/two_level_groups_1.log" 2>&1
echo "two-level passes, one stage group: exit $?"
tail -n 12 "$OUT/two_level_groups_default.log" "$OUT/two_level_groups_1.log"
