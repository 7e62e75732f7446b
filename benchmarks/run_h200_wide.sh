#!/usr/bin/env bash
# The wide W12 / Q kernels (17-128 rows, wgmma from registers): their checks (one-hot decode bit for bit, products,
# determinism, graph replay) and cold timings against cuBLAS bf16, Triton and two 16-row calls on the Qwen3-8B and
# 32B linears; the checks again under compute-sanitizer memcheck; the 8B timings again with the kernels in the reverse
# order (an order check); then the lean 8B target's 64-row verify step with W12 weights, wide kernels on and off
# ($SPECDEC_WIDE_GEMM).
# Expected time on one H200: ~7 min (torch start ~10 s a process; nvcc ~15 s when build/ was not carried;
# the timings stop starting new linears after their budgets; memcheck of the small checks ~60 s). The checks run
# first, alone: if they fail or hang, the wide kernels' timings and memcheck are skipped.
# Caps: 60 + 200 + 100 + 80 + 2 x 50 = 540 s, plus the build.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$LOGS/build.log"
export SPECDEC_PDL=1
timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --out "$LOGS/wide_checks.json" > "$LOGS/wide_checks.log" 2>&1
rc_checks=$?
echo "wide kernels, checks: exit $rc_checks (124 = timed out)"
if [ "$rc_checks" -eq 0 ]; then
  timeout 200 python3 -m benchmarks.kernels.bench_wide_w12 --budget-s 140 --out "$OUT/wide_w12.json" > "$LOGS/wide.log" 2>&1
  echo "wide kernels, checks and timings: exit $?"
  if command -v compute-sanitizer >/dev/null; then
    timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only \
      --out "$LOGS/wide_sanitize.json" > "$LOGS/wide_sanitize.log" 2>&1
    echo "compute-sanitizer memcheck: exit $? (0 = clean, 9 = errors, 124 = timed out)"
  else
    echo "compute-sanitizer not found: memcheck not run"
  fi
  timeout 80 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 32,64,128 \
    --kernels cuda_q_wide,cuda_w12_wide,cublas_bf16 --budget-s 40 --out "$OUT/wide_w12_reversed.json" > "$LOGS/wide_reversed.log" 2>&1
  echo "wide kernels, 8B, reverse order: exit $?"
else
  echo "=== the checks failed or hung: timings and memcheck skipped ==="
  tail -n 30 "$LOGS/wide_checks.log"
fi
for v in 0 1; do
  export SPECDEC_WIDE_GEMM=$v
  timeout 50 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 30 \
    --out "$OUT/ar_step_verify64_wide$v.json" > "$LOGS/ar_step_wide$v.log" 2>&1
  echo "AR step, verify 64 rows, SPECDEC_WIDE_GEMM=$v: exit $?"
done
tar -czf "$LOGS/../wide_logs.tgz" -C "$LOGS" . && mv "$LOGS/../wide_logs.tgz" "$OUT/"
if [ "$rc_checks" -eq 0 ]; then
  echo "=== memcheck: $(grep -cE '^ok' "$LOGS/wide_sanitize.log") checks passed ==="
  grep -E "^FAILED" "$LOGS/wide_sanitize.log" | head -3
  tail -n 4 "$LOGS/wide_sanitize.log"
fi
for v in 0 1; do
  echo "=== verify 64 rows, SPECDEC_WIDE_GEMM=$v ==="
  grep -E "^AR step (bf16|w12)|^verify step|budget" "$LOGS/ar_step_wide$v.log"
done
if [ "$rc_checks" -eq 0 ]; then
  echo "=== 8B, reverse order ==="
  tail -n 16 "$LOGS/wide_reversed.log"
  echo "=== wide kernels ==="
  tail -n 100 "$LOGS/wide.log"
fi
