#!/usr/bin/env bash
# The wide W12 / Q kernels at 32-128 rows with one CTA an SM and with two ($SPECDEC_WIDE_CTAS 1 / 2: two up to 64
# tokens with the one-set loop and its tile-column epilogue; 65-128 rows run one either way, as a control), cuBLAS
# bf16 and Triton W12 beside them on the Qwen3-8B linears, the Qwen3-32B ones at 32 / 64 rows; each call's checks
# first; the lean 8B target's 64-row verify step in each form; memcheck over the checks with two CTAs an SM. Most
# wanted first: a call cut short keeps what it finished under $OUT.
# Expected time on one H200: ~3 min (140 s on an H100 on 2026-12-06: each call 10-30 s with its start and checks).
# Caps: 2 x 75 + 2 x 50 + 2 x 60 + 90 = 460 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_ctas.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_ctas_build.log"
export SPECDEC_PDL=1 SPECDEC_WIDE_PIPELINE=0
unset SPECDEC_WIDE_GEMM
for ctas in 2 1; do
  export SPECDEC_WIDE_CTAS=$ctas
  timeout 75 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 32,64,128 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide,triton_w12 --budget-s 60 --out "$OUT/wide_ctas$ctas.json" > "$OUT/wide_ctas$ctas.log" 2>&1
  echo "wide kernels, 8B, SPECDEC_WIDE_CTAS=$ctas: exit $?"
done
for ctas in 2 1; do
  export SPECDEC_WIDE_CTAS=$ctas
  timeout 50 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 25 --out "$OUT/ar_step_verify64_ctas$ctas.json" > "$OUT/ar_step_verify64_ctas$ctas.log" 2>&1
  echo "AR step, verify 64 rows, SPECDEC_WIDE_CTAS=$ctas: exit $?"
done
for ctas in 2 1; do
  export SPECDEC_WIDE_CTAS=$ctas
  timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-32b --rows 32,64 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide --budget-s 45 --out "$OUT/wide32_ctas$ctas.json" > "$OUT/wide32_ctas$ctas.log" 2>&1
  echo "wide kernels, 32B, SPECDEC_WIDE_CTAS=$ctas: exit $?"
done
export SPECDEC_WIDE_CTAS=2
timeout 90 compute-sanitizer --tool memcheck python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b --out "$OUT/wide_ctas_memcheck.json" > "$OUT/wide_ctas_memcheck.log" 2>&1
echo "memcheck, two CTAs an SM: exit $?"
for ctas in 2 1; do
  echo "=== SPECDEC_WIDE_CTAS=$ctas (us and x cuBLAS bf16) ==="
  grep -E "FAILED" "$OUT/wide_ctas$ctas.log" | head -4
  grep -E "^qwen3" "$OUT/wide_ctas$ctas.log" | tail -n 15
  grep -E "^qwen3" "$OUT/wide32_ctas$ctas.log" | tail -n 10
  grep -E "^AR step (bf16|w12):|^verify step" "$OUT/ar_step_verify64_ctas$ctas.log"
done
tail -n 2 "$OUT/wide_ctas_memcheck.log"
