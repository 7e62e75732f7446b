#!/usr/bin/env bash
# The wide W12 / Q kernels with two consumer stage groups ($SPECDEC_WIDE_GROUPS=2: 16 consumer warps, even and odd
# stages) against one (1), one CTA an SM and the one-set loop both: the 8B and 32B linears at 32 and 64 rows beside
# cuBLAS bf16, no programmatic launch, each call's checks first; the lean 8B target's 64-row verify step and its
# linears in the step (profile_verify_linears) in both forms; memcheck over the checks with two groups
# (benchmarks/NOTES.md, "Two consumer stage groups in the wide kernels").
# Expected time on one H200: ~3.5 min (each kernel call ~35 s, a verify-step call ~30 s, a profile ~20 s, memcheck ~45 s,
# from the H100 calls of the one-group form).
# Caps: 2 x 80 + 2 x 60 + 2 x 60 + 120 = 520 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_groups.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_groups_build.log"
export SPECDEC_PDL=0 SPECDEC_WIDE_PIPELINE=0 SPECDEC_WIDE_CTAS=1
unset SPECDEC_WIDE_GEMM
for groups in 2 1; do
  export SPECDEC_WIDE_GROUPS=$groups
  timeout 80 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b,qwen3-32b --rows 32,64 \
    --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide --budget-s 55 --out "$OUT/wide_groups$groups.json" \
    > "$OUT/wide_groups$groups.log" 2>&1
  echo "wide kernels, SPECDEC_WIDE_GROUPS=$groups: exit $?"
done
for groups in 2 1; do
  export SPECDEC_WIDE_GROUPS=$groups
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 30 \
    --out "$OUT/wide_groups${groups}_ar_step_verify64.json" > "$OUT/wide_groups${groups}_ar_step_verify64.log" 2>&1
  echo "AR step, verify 64 rows, SPECDEC_WIDE_GROUPS=$groups: exit $?"
  timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --rows 64 \
    --out "$OUT/wide_groups${groups}_verify_linears.json" > "$OUT/wide_groups${groups}_verify_linears.log" 2>&1
  echo "verify step linears, SPECDEC_WIDE_GROUPS=$groups: exit $?"
done
export SPECDEC_WIDE_GROUPS=2
timeout 120 compute-sanitizer --tool memcheck python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/wide_groups_memcheck.json" > "$OUT/wide_groups_memcheck.log" 2>&1
echo "memcheck, two stage groups: exit $?"
for groups in 2 1; do
  echo "=== SPECDEC_WIDE_GROUPS=$groups (us and x cuBLAS bf16: cuBLAS, W12 wide, Q wide) ==="
  grep -E "^checks|FAILED" "$OUT/wide_groups$groups.log" | head -4
  grep -E "^qwen3" "$OUT/wide_groups$groups.log" | tail -n 20
  grep -E "^verify step of" "$OUT/wide_groups${groups}_ar_step_verify64.log"
  tail -n 2 "$OUT/wide_groups${groups}_verify_linears.log"
done
tail -n 2 "$OUT/wide_groups_memcheck.log"
