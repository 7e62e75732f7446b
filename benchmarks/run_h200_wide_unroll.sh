#!/usr/bin/env bash
# The wide W12 / Q kernels with their one-set loop unrolled over a pass of the ring ($SPECDEC_WIDE_UNROLL=1: the MMA
# descriptors uniform) against the rolled loop (0), with the default stage groups: the 8B and 32B linears at 32, 64 and
# 128 rows beside cuBLAS bf16, no programmatic launch, each call's checks first; the lean 8B target's 64-row verify step
# and its linears in the step in both forms; memcheck over the checks unrolled (benchmarks/NOTES.md, "The wide loop
# unrolled over a pass of the ring").
# Expected time on one H200: ~4 min (each kernel call ~45 s, a verify-step call ~30 s, a profile ~20 s, memcheck ~45 s,
# from the H100 calls of the rolled form).
# Caps: 2 x 90 + 2 x 60 + 2 x 60 + 120 = 540 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_unroll.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_unroll_build.log"
export SPECDEC_PDL=0 SPECDEC_WIDE_PIPELINE=0 SPECDEC_WIDE_CTAS=1
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_GROUPS
for unroll in 1 0; do
  export SPECDEC_WIDE_UNROLL=$unroll
  timeout 90 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b,qwen3-32b --rows 32,64,128 \
    --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide --budget-s 65 --out "$OUT/wide_unroll$unroll.json" \
    > "$OUT/wide_unroll$unroll.log" 2>&1
  echo "wide kernels, SPECDEC_WIDE_UNROLL=$unroll: exit $?"
done
for unroll in 1 0; do
  export SPECDEC_WIDE_UNROLL=$unroll
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 30 \
    --out "$OUT/wide_unroll${unroll}_ar_step_verify64.json" > "$OUT/wide_unroll${unroll}_ar_step_verify64.log" 2>&1
  echo "AR step, verify 64 rows, SPECDEC_WIDE_UNROLL=$unroll: exit $?"
  timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --rows 64 \
    --out "$OUT/wide_unroll${unroll}_verify_linears.json" > "$OUT/wide_unroll${unroll}_verify_linears.log" 2>&1
  echo "verify step linears, SPECDEC_WIDE_UNROLL=$unroll: exit $?"
done
export SPECDEC_WIDE_UNROLL=1
timeout 120 compute-sanitizer --tool memcheck python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/wide_unroll_memcheck.json" > "$OUT/wide_unroll_memcheck.log" 2>&1
echo "memcheck, unrolled: exit $?"
for unroll in 1 0; do
  echo "=== SPECDEC_WIDE_UNROLL=$unroll (us and x cuBLAS bf16: cuBLAS, W12 wide, Q wide) ==="
  grep -E "^checks|FAILED" "$OUT/wide_unroll$unroll.log" | head -4
  grep -E "^qwen3" "$OUT/wide_unroll$unroll.log" | tail -n 30
  grep -E "^verify step of" "$OUT/wide_unroll${unroll}_ar_step_verify64.log"
  tail -n 2 "$OUT/wide_unroll${unroll}_verify_linears.log"
done
tail -n 2 "$OUT/wide_unroll_memcheck.log"
