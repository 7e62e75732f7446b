#!/usr/bin/env bash
# Where the Q view's 17-128-row linears should go (the two-level verifier's Q pass): the wide Q kernel (CUDA, the
# default unrolled loop) against the Triton Q kernel, beside cuBLAS bf16, on the 8B and 32B
# linears at 17, 24, 32, 48, 64, 96 and 128 rows, each call's checks first. Then the W12 wide kernel at 17, 24 and 32
# rows with its loop unrolled against rolled, twice each in alternation ($SPECDEC_WIDE_UNROLL 1 / 0: whether W12's
# rolled default up to 32 tokens holds on a second look).
# Expected time on one H200: ~5 min (a kernel call with Triton's autotuning ~90 s, each A/B call ~35 s; from the H100
# calls of 2026-12-06, 7 s of timing a call behind ~30 s of start-up).
# Caps: 200 + 4 x 70 = 480 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_q_route.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_q_route_build.log"
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_WIDE_CTAS SPECDEC_WIDE_PIPELINE
timeout 200 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b,qwen3-32b --rows 17,24,32,48,64,96,128 \
  --kernels cublas_bf16,cuda_q_wide,triton_q --budget-s 170 --out "$OUT/wide_q_route.json" > "$OUT/wide_q_route.log" 2>&1
echo "Q view routing: exit $?"
for pass in 1 2; do
  for value in 1 0; do
    export SPECDEC_WIDE_UNROLL=$value
    timeout 70 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b,qwen3-32b \
      --rows 17,24,32 --kernels cublas_bf16,cuda_w12_wide --budget-s 50 \
      --out "$OUT/wide_w12_unroll${value}_pass$pass.json" > "$OUT/wide_w12_unroll${value}_pass$pass.log" 2>&1
    echo "W12 at 17-32 rows, SPECDEC_WIDE_UNROLL=$value, pass $pass: exit $?"
  done
done
echo "=== Q view (us and x cuBLAS bf16: cuBLAS, Q wide, Triton Q) ==="
grep -E "^checks|FAILED" "$OUT/wide_q_route.log" | head -4
grep -E "^qwen3" "$OUT/wide_q_route.log" | tail -n 70
for value in 1 0; do
  for pass in 1 2; do
    echo "=== W12 wide, SPECDEC_WIDE_UNROLL=$value, pass $pass (us and x cuBLAS bf16) ==="
    grep -E "^checks|FAILED" "$OUT/wide_w12_unroll${value}_pass$pass.log" | head -2
    grep -E "^qwen3" "$OUT/wide_w12_unroll${value}_pass$pass.log" | tail -n 30
  done
done
