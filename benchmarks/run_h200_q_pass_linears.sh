#!/usr/bin/env bash
# Each linear's time in the lean 8B target's Q-view step (the two-level verifier's first pass) at 32 and 64 rows, with
# the Q view's wide calls (the default) and on Triton ($SPECDEC_WIDE_GEMM=exact), and at 32 rows the same linears
# alone in one graph: where the 32-row Q pass lost 0.66 ms with the wide kernel that chains of one linear called it
# faster (run_h200_two_level_wide.sh, H100, 2026-12-06).
# Expected time on one H200: ~2.5 min (each profile ~20 s on an H100 behind ~10 s of start-up).
# Caps: 6 x 60 = 360 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_q_pass_linears.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/q_pass_linears_build.log"
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS
for route in 1 exact; do
  export SPECDEC_WIDE_GEMM=$route
  for rows in 32 64; do
    timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --view q --rows $rows \
      --out "$OUT/q_pass_linears_${route}_$rows.json" > "$OUT/q_pass_linears_${route}_$rows.log" 2>&1
    echo "Q step linears, SPECDEC_WIDE_GEMM=$route, $rows rows: exit $?"
  done
  timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --view q --rows 32 --linears-only \
    --out "$OUT/q_pass_linears_only_${route}_32.json" > "$OUT/q_pass_linears_only_${route}_32.log" 2>&1
  echo "Q linears alone, SPECDEC_WIDE_GEMM=$route, 32 rows: exit $?"
done
for route in 1 exact; do
  for what in q_pass_linears_${route}_32 q_pass_linears_${route}_64 q_pass_linears_only_${route}_32; do
    echo "=== $what ==="
    tail -n 4 "$OUT/$what.log"
  done
done
