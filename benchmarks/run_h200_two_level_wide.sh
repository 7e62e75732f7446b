#!/usr/bin/env bash
# The two-level verifier with the Q view's 17-128-row passes on the wide Q kernel (the default) and on the Triton Q
# kernel ($SPECDEC_WIDE_GEMM=exact), Qwen3-8B shape, random weights, W12 and bf16 targets with the packed Q view, in
# one call: the single passes (exact and Q view at 8, 16, 32 and 65 rows) under the default with the tree and
# two-level systems on SpecPilot's one-level acceptance profile, then the 32- and 65-row passes alone with the Q view
# on Triton. Writes both JSON files and logs to $OUT.
# Expected time on one H200: ~4 min (two 8B targets built and graphs captured a process, ~60 s; the systems ~40 s;
# from run_h200_two_level_extra.sh's calls of 2026-12-02).
# Caps: 240 s with the systems (budget 150 s), 150 s for the passes: at most 6.5 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_two_level_wide.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$OUT/two_level_wide_build.log"
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_ROW_STAGE_GROUPS
timeout 240 python3 -m benchmarks.decode.bench_two_level --variants w12-packed,bf16-packed --system-variants w12-packed \
  --profiles specpilot-one-level --systems 'tree,two-level always' --tokens 64 --reps 10 --pass-rows 8,16,32,65 \
  --budget-s 150 --out "$OUT/two_level_wide_default.json" > "$OUT/two_level_wide_default.log" 2>&1
echo "two-level, the Q view's wide calls: exit $?"
export SPECDEC_WIDE_GEMM=exact
timeout 150 python3 -m benchmarks.decode.bench_two_level --variants w12-packed,bf16-packed --profiles none --reps 10 \
  --pass-rows 32,65 --out "$OUT/two_level_wide_exact_only.json" > "$OUT/two_level_wide_exact_only.log" 2>&1
echo "two-level passes, the Q view on Triton past 16 rows: exit $?"
tail -n 14 "$OUT/two_level_wide_default.log"
tail -n 7 "$OUT/two_level_wide_exact_only.log"
