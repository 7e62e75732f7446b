#!/usr/bin/env bash
# The wide W12 kernel as the exact view's default for 17-128 rows ($SPECDEC_WIDE_GEMM unset = "exact") and the wide
# kernels' pipelined form ($SPECDEC_WIDE_PIPELINE=1: a stage decoded while the MMAs of the one before run), Qwen3-8B
# linears, cuBLAS bf16 in each call: (1) both wide kernels in each form, each call's checks (one-hot decode bit for
# bit, products, determinism, graph replay) first; (2) the lean 8B target's 64-row verify step in each form; (3) the
# Triton W12 kernel the default replaces above 32 rows, beside it (the warm-up now meets every cold copy before the
# graph capture). Most wanted first: a call cut short keeps what it finished under $OUT.
# Expected time on one H200: ~6 min (each kernel call ~50-60 s with its ~15 s start and checks; each AR-step call
# ~40-50 s).
# Caps: 3 x 70 + 2 x 60 = 330 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_default.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_default_build.log"
export SPECDEC_PDL=1
unset SPECDEC_WIDE_GEMM
for pipe in 0 1; do
  export SPECDEC_WIDE_PIPELINE=$pipe
  timeout 70 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 32,64,128 \
    --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide --budget-s 40 --out "$OUT/wide_pipeline$pipe.json" > "$OUT/wide_pipeline$pipe.log" 2>&1
  echo "wide kernels, SPECDEC_WIDE_PIPELINE=$pipe: exit $?"
done
for pipe in 0 1; do
  export SPECDEC_WIDE_PIPELINE=$pipe
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 30 \
    --out "$OUT/ar_step_verify64_pipeline$pipe.json" > "$OUT/ar_step_verify64_pipeline$pipe.log" 2>&1
  echo "AR step, verify 64 rows, default wide rule, SPECDEC_WIDE_PIPELINE=$pipe: exit $?"
done
export SPECDEC_WIDE_PIPELINE=0
timeout 70 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 64,128 \
  --kernels cublas_bf16,cuda_w12_wide,triton_w12 --budget-s 40 --out "$OUT/wide_vs_triton_w12.json" > "$OUT/wide_vs_triton.log" 2>&1
echo "wide W12 against Triton W12, 8B: exit $?"
for pipe in 0 1; do
  echo "=== SPECDEC_WIDE_PIPELINE=$pipe ==="
  grep -E "^AR step (bf16|w12)|^verify step" "$OUT/ar_step_verify64_pipeline$pipe.log"
  grep -E "^checks|FAILED" "$OUT/wide_pipeline$pipe.log" | head -4
  tail -n 15 "$OUT/wide_pipeline$pipe.log" | grep -E "^qwen3"
done
echo "=== wide W12 against Triton W12 ==="
tail -n 12 "$OUT/wide_vs_triton.log" | grep -E "^qwen3|^checks"
