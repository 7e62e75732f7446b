#!/usr/bin/env bash
# The default GEMMs against cuBLAS with each kernel signalling once past its wait ($SPECDEC_PDL "1") and as early as it
# can ("early": a GEMM's producer once it has issued its last copy; specdec/kernels/launch.py), in one call: the fixed
# cost of cuBLAS bf16 and the default W12, Q and bf16 kernels on the Qwen3-8B and Qwen3-32B shapes at 1, 8 and 16
# tokens (20 cold calls of one GEMM back to back in a graph, so each call follows the same GEMM), under "1" then
# "early"; then the timing-order check of two default kernels against their fallbacks (bench_fixed_cost times a
# shape's kernels in the order --kernels names them: both orders, one process each, under "1"). Writes the two fixed
# costs' JSON to $OUT, the logs, plots and the order check's JSON in one signal_kernels_logs.tgz.
# Expected time on one H200: ~4 min (torch start ~8 s a process; fixed cost ~60 s a mode; the order check ~20 s a
# process; nvcc 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, fixed cost 150 s a mode (budget 120 s), order check 60 s a process (budget 40 s): at most ~8.5 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_signal_kernels.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_L2_PREFETCH_MB=0
for mode in 1 early; do
  export SPECDEC_PDL=$mode
  timeout 150 python3 -m benchmarks.kernels.bench_fixed_cost --kernels cublas_bf16,cuda_w12_v10,cuda_q_v5,cuda_bf16_v5 --no-read-floor \
    --budget-s 120 --out "$OUT/fixed_cost_pdl_$mode.json" > "$LOGS/fixed_cost_pdl_$mode.log" 2>&1
  echo "fixed cost, SPECDEC_PDL=$mode: exit $?"
done
export SPECDEC_PDL=1
for order in cuda_w12_v10,cuda_w12_v8,cuda_q_v5,cuda_q_v2 cuda_q_v2,cuda_q_v5,cuda_w12_v8,cuda_w12_v10; do
  name=$(echo "$order" | cut -d, -f1)
  timeout 60 python3 -m benchmarks.kernels.bench_fixed_cost --models qwen3-8b --kernels "$order" --no-read-floor --budget-s 40 \
    --out "$LOGS/fixed_cost_order_$name.json" > "$LOGS/fixed_cost_order_$name.log" 2>&1
  echo "order check, $order: exit $?"
done
mv "$OUT"/*.png "$LOGS/" 2>/dev/null
tar -czf "$LOGS/../signal_kernels_logs.tgz" -C "$LOGS" . && mv "$LOGS/../signal_kernels_logs.tgz" "$OUT/"
for f in "$LOGS"/fixed_cost_*.log; do
  echo "=== $(basename "$f" .log) ==="
  grep -E "^(cublas|cuda)_" "$f" | head -n 40
done
