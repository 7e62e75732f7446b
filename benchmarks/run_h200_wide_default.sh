#!/usr/bin/env bash
# The wide W12 kernel as the exact view's default for 17-128 rows ($SPECDEC_WIDE_GEMM unset = "exact"): the Triton W12
# kernel it replaces above 32 rows, timed beside it on the Qwen3-8B linears (the warm-up now meets every cold copy
# before the graph capture), then the lean 8B target's 32- and 64-row verify steps under the default.
# Expected time on one H200: ~4 min (the kernel timings ~70 s after a ~15 s start; each AR-step call ~40-50 s).
# Caps: 100 + 2 x 60 = 220 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_default.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_default_build.log"
export SPECDEC_PDL=1
unset SPECDEC_WIDE_GEMM
timeout 100 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 33,64,96,128 \
  --kernels cublas_bf16,cuda_w12_wide,triton_w12 --budget-s 60 --out "$OUT/wide_vs_triton_w12.json" > "$OUT/wide_vs_triton.log" 2>&1
echo "wide W12 against Triton W12, 8B: exit $?"
for rows in 32 64; do
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows $rows --ar-budget-s 30 \
    --out "$OUT/ar_step_verify${rows}_wide_default.json" > "$OUT/ar_step_verify$rows.log" 2>&1
  echo "AR step, verify $rows rows, default wide rule: exit $?"
done
for rows in 32 64; do
  grep -E "^AR step (bf16|w12)|^verify step" "$OUT/ar_step_verify$rows.log"
done
tail -n 22 "$OUT/wide_vs_triton.log"
