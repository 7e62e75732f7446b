#!/usr/bin/env bash
# Whether a wide kernel's extra cost among the model's other linears comes from the alternation of shapes: the lean
# 8B target's linears alone in one graph, in the step's order and grouped by linear (every layer's qkv, then every o,
# ...), without programmatic launch (each kernel's span its own cost): the Q view at 32 rows on the wide kernel
# ($SPECDEC_WIDE_GEMM=1) and on Triton (exact), the exact view's W12 at 64 rows; the 32-row Q-view step itself without
# programmatic launch; and chains of one linear (bench_wide_w12, 8B, same settings) for the same calls.
# Expected time on one H200: ~3 min (each profile ~15 s and the chains ~40 s on an H100, behind ~10 s of start-up).
# Caps: 6 x 60 + 90 = 450 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_order.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_order_build.log"
unset SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_WIDE_CTAS SPECDEC_WIDE_PIPELINE
export SPECDEC_PDL=0 SPECDEC_WIDE_GEMM=1
for order in step by-linear; do
  timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --view q --rows 32 --linears-only --order $order \
    --out "$OUT/order_q_wide_32_$order.json" > "$OUT/order_q_wide_32_$order.log" 2>&1
  echo "Q wide, 32 rows, linears alone in the $order order: exit $?"
  timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --rows 64 --linears-only --order $order \
    --out "$OUT/order_w12_wide_64_$order.json" > "$OUT/order_w12_wide_64_$order.log" 2>&1
  echo "W12 wide, 64 rows, linears alone in the $order order: exit $?"
done
timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --view q --rows 32 \
  --out "$OUT/order_q_wide_32_in_step.json" > "$OUT/order_q_wide_32_in_step.log" 2>&1
echo "Q wide, 32 rows, the step: exit $?"
export SPECDEC_WIDE_GEMM=exact
timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --view q --rows 32 --linears-only \
  --out "$OUT/order_q_triton_32_step.json" > "$OUT/order_q_triton_32_step.log" 2>&1
echo "Q Triton, 32 rows, linears alone in the step order: exit $?"
export SPECDEC_WIDE_GEMM=1
timeout 90 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 32,64 \
  --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide,triton_q --budget-s 60 --out "$OUT/order_chains.json" \
  > "$OUT/order_chains.log" 2>&1
echo "chains of one linear: exit $?"
for what in order_q_wide_32_step order_q_wide_32_by-linear order_q_wide_32_in_step order_q_triton_32_step \
  order_w12_wide_64_step order_w12_wide_64_by-linear; do
  echo "=== $what ==="
  tail -n 2 "$OUT/$what.log"
done
echo "=== chains (us and x cuBLAS bf16: cuBLAS, W12 wide, Q wide, Triton Q) ==="
grep -E "^checks|FAILED" "$OUT/order_chains.log" | head -2
grep -E "^qwen3" "$OUT/order_chains.log" | tail -n 10
