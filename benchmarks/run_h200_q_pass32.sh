#!/usr/bin/env bash
# The lean 8B target's 32-row Q-view pass (the two-level verifier's first pass; W12 weights, packed Q view, graphs
# captured first) with the Q view's 17-32 rows on the wide Q kernel ($SPECDEC_WIDE_GEMM=1) and on Triton
# ($SPECDEC_WIDE_GEMM=auto, the default), the whole pass timed: the GEMM kernels alone (run_h200_q_pass_linears.sh)
# leave out what the pass does around them.
# Expected time on one H200: ~2 min (each process builds the 8B target and captures its graphs, ~45 s on an H100).
# Caps: 2 x 75 = 150 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_q_pass32.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$OUT/q_pass32_build.log"
unset SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_ROW_STAGE_GROUPS
for route in 1 auto; do
  export SPECDEC_WIDE_GEMM=$route
  timeout 75 python3 -m benchmarks.decode.bench_two_level --variants w12-packed --profiles none --reps 10 --pass-rows 32 \
    --out "$OUT/q_pass32_$route.json" > "$OUT/q_pass32_$route.log" 2>&1
  echo "32-row passes, SPECDEC_WIDE_GEMM=$route: exit $?"
done
unset SPECDEC_WIDE_GEMM
for route in 1 auto; do
  echo "=== SPECDEC_WIDE_GEMM=$route ==="
  grep -E "^variant +rows|^w12-packed +32" "$OUT/q_pass32_$route.log"
done
