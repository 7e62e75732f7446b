#!/usr/bin/env bash
# One split-K workspace a device for every launch ($SPECDEC_SPLIT_WORKSPACE=shared: each launch's partials land on the
# lines the launch before it wrote) against one per plan layout (per-layout): first, with the shared one, every CUDA
# kernel's checks (bench_roofline's decode checks, 8B, timing cut by its budget; the wide kernels' checks) and
# compute-sanitizer memcheck over every kernel; then in both modes the lean 8B target's AR step and 64-row verify step
# (bench_roofline --ar-step), each W12 linear's time in the 64-row verify step, and each Q linear's in the 32-row Q
# pass on the wide Q kernel ($SPECDEC_WIDE_GEMM=1).
# Expected time on one H200: ~5 min (checks ~60 s, memcheck ~70 s, each AR-step call ~35 s and profile ~20 s on an
# H100, behind ~10 s of start-up each).
# Caps: 110 + 60 + 100 + 2 x (60 + 45 + 45) = 570 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_split_workspace.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/split_workspace_build.log"
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_PDL
export SPECDEC_SPLIT_WORKSPACE=shared
timeout 110 python3 -m benchmarks.kernels.bench_roofline --models qwen3-8b --budget-s 1 \
  --out "$OUT/split_workspace_checks.json" > "$OUT/split_workspace_checks.log" 2>&1
echo "every kernel's checks, shared workspace: exit $?"
timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/split_workspace_wide_checks.json" > "$OUT/split_workspace_wide_checks.log" 2>&1
echo "wide kernels' checks, shared workspace: exit $?"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --sanitize \
  --out "$OUT/split_workspace_sanitize.json" > "$OUT/split_workspace_sanitize.log" 2>&1
echo "memcheck, shared workspace: exit $? (0 clean, 9 errors)"
for mode in shared per-layout; do
  export SPECDEC_SPLIT_WORKSPACE=$mode
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 30 \
    --out "$OUT/split_workspace_${mode}_ar_step.json" > "$OUT/split_workspace_${mode}_ar_step.log" 2>&1
  echo "AR step, verify 64 rows, $mode: exit $?"
  timeout 45 python3 -m benchmarks.kernels.profile_verify_linears --rows 64 \
    --out "$OUT/split_workspace_${mode}_w12_64.json" > "$OUT/split_workspace_${mode}_w12_64.log" 2>&1
  echo "W12 verify step linears, $mode: exit $?"
  export SPECDEC_WIDE_GEMM=1
  timeout 45 python3 -m benchmarks.kernels.profile_verify_linears --view q --rows 32 \
    --out "$OUT/split_workspace_${mode}_q_32.json" > "$OUT/split_workspace_${mode}_q_32.log" 2>&1
  echo "Q pass linears, $mode: exit $?"
  unset SPECDEC_WIDE_GEMM
done
grep -E "checks|FAILED|passed" "$OUT/split_workspace_checks.log" | tail -n 3
grep -E "^checks|FAILED" "$OUT/split_workspace_wide_checks.log" | head -2
tail -n 2 "$OUT/split_workspace_sanitize.log"
for mode in shared per-layout; do
  echo "=== $mode ==="
  grep -E "^AR step (bf16|w12):|^verify step" "$OUT/split_workspace_${mode}_ar_step.log"
  tail -n 2 "$OUT/split_workspace_${mode}_w12_64.log"
  tail -n 2 "$OUT/split_workspace_${mode}_q_32.log"
done
