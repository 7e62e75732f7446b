#!/usr/bin/env bash
# The wide W12 / Q kernels with the decode's sign bits through the FMA pipe (benchmarks/NOTES.md, "The sign through
# the FMA pipe"): the 8B linears at 32 and 64 rows beside cuBLAS bf16 without programmatic launch, each call's checks
# first; with $BASE_SO (another build of the library, e.g. the previous commit's) the same calls on it first, for an
# A/B in one call; then the lean 8B target's 64-row verify step, and memcheck over the checks.
# Expected time on one H200: ~2.5 min (each kernel call ~20 s on an H100, the AR-step call ~30 s, memcheck ~40 s).
# Caps: 2 x 60 + 60 + 90 = 270 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): [BASE_SO=path/to/old.so] bash benchmarks/run_h200_wide_sign.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_sign_build.log"
export SPECDEC_PDL=0 SPECDEC_WIDE_PIPELINE=0 SPECDEC_WIDE_CTAS=1
unset SPECDEC_WIDE_GEMM
libs=(new)
if [ -n "${BASE_SO:-}" ]; then libs=(base new); fi
for lib in "${libs[@]}"; do
  if [ "$lib" = base ]; then export SPECDEC_CUDA_KERNELS=$BASE_SO; else unset SPECDEC_CUDA_KERNELS; fi
  timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 32,64 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide \
    --budget-s 40 --out "$OUT/wide_sign_$lib.json" > "$OUT/wide_sign_$lib.log" 2>&1
  echo "wide kernels, $lib library: exit $?"
done
unset SPECDEC_CUDA_KERNELS
timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 30 \
  --out "$OUT/wide_sign_ar_step_verify64.json" > "$OUT/wide_sign_ar_step_verify64.log" 2>&1
echo "AR step, verify 64 rows: exit $?"
timeout 90 compute-sanitizer --tool memcheck python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/wide_sign_memcheck.json" > "$OUT/wide_sign_memcheck.log" 2>&1
echo "memcheck: exit $?"
for lib in "${libs[@]}"; do
  echo "=== $lib library (us and x cuBLAS bf16: cuBLAS, W12 wide, Q wide) ==="
  grep -E "^checks|FAILED" "$OUT/wide_sign_$lib.log" | head -4
  grep -E "^qwen3" "$OUT/wide_sign_$lib.log" | tail -n 10
done
echo "=== AR step ==="
grep -E "^AR step (bf16|w12):|^verify step" "$OUT/wide_sign_ar_step_verify64.log"
tail -n 2 "$OUT/wide_sign_memcheck.log"
