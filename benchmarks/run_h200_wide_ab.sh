#!/usr/bin/env bash
# One setting of the wide W12 / Q kernels against another in one call (VAR=A, then VAR=B: e.g. SPECDEC_WIDE_UNROLL 1 0,
# the loop unrolled over a pass of the ring against the rolled one; SPECDEC_WIDE_GROUPS 2 1, two consumer stage groups
# against one): the 8B and 32B linears at ROWS (default 32,64,128) beside cuBLAS bf16, no programmatic launch, each
# call's checks first; the lean 8B target's 64-row verify step and its linears in the step (profile_verify_linears) in
# both; memcheck over the checks with A. The other wide settings stay at their defaults (one CTA an SM, the one-set
# loop) unless VAR is one of them.
# Expected time on one H200: ~4 min (each kernel call ~45 s, a verify-step call ~30 s, a profile ~20 s, memcheck ~45 s,
# from the H100 calls of 2026-12-06: 150 s at 32,64 rows).
# Caps: 2 x 90 + 2 x 60 + 2 x 60 + 120 = 540 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_ab.sh VAR A B [ROWS]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
if [ $# -lt 3 ]; then
  echo "usage: bash benchmarks/run_h200_wide_ab.sh VAR A B [ROWS]  (e.g. SPECDEC_WIDE_UNROLL 1 0)" >&2
  exit 2
fi
VAR=$1 A=$2 B=$3 ROWS=${4:-32,64,128}
case $VAR in
  SPECDEC_WIDE_*) ;;
  *) echo "VAR: expected a SPECDEC_WIDE_* setting, got $VAR" >&2; exit 2 ;;
esac
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_ab_build.log"
export SPECDEC_PDL=0 SPECDEC_WIDE_PIPELINE=0 SPECDEC_WIDE_CTAS=1
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_GROUPS SPECDEC_WIDE_UNROLL
name=$(echo "${VAR#SPECDEC_WIDE_}" | tr 'A-Z' 'a-z')
for value in "$A" "$B"; do
  export "$VAR=$value"
  timeout 90 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b,qwen3-32b --rows "$ROWS" \
    --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide --budget-s 65 --out "$OUT/wide_${name}$value.json" \
    > "$OUT/wide_${name}$value.log" 2>&1
  echo "wide kernels, $VAR=$value: exit $?"
done
for value in "$A" "$B"; do
  export "$VAR=$value"
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 30 \
    --out "$OUT/wide_${name}${value}_ar_step_verify64.json" > "$OUT/wide_${name}${value}_ar_step_verify64.log" 2>&1
  echo "AR step, verify 64 rows, $VAR=$value: exit $?"
  timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --rows 64 \
    --out "$OUT/wide_${name}${value}_verify_linears.json" > "$OUT/wide_${name}${value}_verify_linears.log" 2>&1
  echo "verify step linears, $VAR=$value: exit $?"
done
export "$VAR=$A"
timeout 120 compute-sanitizer --tool memcheck python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/wide_${name}_memcheck.json" > "$OUT/wide_${name}_memcheck.log" 2>&1
echo "memcheck, $VAR=$A: exit $?"
for value in "$A" "$B"; do
  echo "=== $VAR=$value (us and x cuBLAS bf16: cuBLAS, W12 wide, Q wide) ==="
  grep -E "^checks|FAILED" "$OUT/wide_${name}$value.log" | head -4
  grep -E "^qwen3" "$OUT/wide_${name}$value.log" | tail -n 30
  grep -E "^verify step of" "$OUT/wide_${name}${value}_ar_step_verify64.log"
  tail -n 2 "$OUT/wide_${name}${value}_verify_linears.log"
done
tail -n 2 "$OUT/wide_${name}_memcheck.log"
