#!/usr/bin/env bash
# The wide W12 / Q kernels in persistent CTAs ($SPECDEC_WIDE_PERSISTENT=1: tma_wide_persistent_kernel, one ring over a
# CTA's items) against one CTA an item (0), one CTA an SM both: the 8B and 32B linears at 32 / 64 / 128 rows beside
# cuBLAS bf16, no programmatic launch, each call's checks first (one of them three items a persistent CTA); then the
# lean 8B target's 64-row verify step and its linears in the step (profile_verify_linears) in both forms, and memcheck
# over the checks in persistent CTAs (benchmarks/NOTES.md, "Persistent wide CTAs").
# Expected time on one H200: ~4 min (each kernel call ~25 s, a verify-step call ~30 s, a profile ~20 s, memcheck ~45 s,
# from the H100 calls of the one-CTA form).
# Caps: 2 x 80 + 2 x 60 + 2 x 60 + 120 = 520 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_persistent.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_persistent_build.log"
export SPECDEC_PDL=0 SPECDEC_WIDE_PIPELINE=0 SPECDEC_WIDE_CTAS=1
unset SPECDEC_WIDE_GEMM
for persistent in 1 0; do
  export SPECDEC_WIDE_PERSISTENT=$persistent
  timeout 80 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b,qwen3-32b --rows 32,64,128 \
    --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide --budget-s 55 --out "$OUT/wide_persistent$persistent.json" \
    > "$OUT/wide_persistent$persistent.log" 2>&1
  echo "wide kernels, SPECDEC_WIDE_PERSISTENT=$persistent: exit $?"
done
for persistent in 1 0; do
  export SPECDEC_WIDE_PERSISTENT=$persistent
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 30 \
    --out "$OUT/wide_persistent${persistent}_ar_step_verify64.json" > "$OUT/wide_persistent${persistent}_ar_step_verify64.log" 2>&1
  echo "AR step, verify 64 rows, SPECDEC_WIDE_PERSISTENT=$persistent: exit $?"
  timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --rows 64 \
    --out "$OUT/wide_persistent${persistent}_verify_linears.json" > "$OUT/wide_persistent${persistent}_verify_linears.log" 2>&1
  echo "verify step linears, SPECDEC_WIDE_PERSISTENT=$persistent: exit $?"
done
export SPECDEC_WIDE_PERSISTENT=1
timeout 120 compute-sanitizer --tool memcheck python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/wide_persistent_memcheck.json" > "$OUT/wide_persistent_memcheck.log" 2>&1
echo "memcheck, persistent: exit $?"
for persistent in 1 0; do
  echo "=== SPECDEC_WIDE_PERSISTENT=$persistent (us and x cuBLAS bf16: cuBLAS, W12 wide, Q wide) ==="
  grep -E "^checks|FAILED" "$OUT/wide_persistent$persistent.log" | head -4
  grep -E "^qwen3" "$OUT/wide_persistent$persistent.log" | tail -n 30
  grep -E "^verify step of" "$OUT/wide_persistent${persistent}_ar_step_verify64.log"
  tail -n 2 "$OUT/wide_persistent${persistent}_verify_linears.log"
done
tail -n 2 "$OUT/wide_persistent_memcheck.log"
