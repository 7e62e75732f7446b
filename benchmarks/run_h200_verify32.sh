#!/usr/bin/env bash
# The 32-row verify step of the Qwen3-8B-shaped lean target with W12 weights: its linears as two 16-row calls of the
# tensor-map kernel (the default for 17-32 rows), then with every W12 linear on Triton ($SPECDEC_W12_CUDA=0); the bf16
# target's steps beside each. Writes the two AR-step JSON files and the logs in one verify32_logs.tgz to $OUT.
# Expected time on one H200: ~1.5 min (torch start ~10 s a process; each AR step ~30 s with its budget of 20 s
# stopping it after the verify step; nvcc 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, AR steps 60 s each: at most ~3 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_verify32.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_PDL=1
timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 32 --ar-budget-s 20 \
  --out "$OUT/ar_step_verify32_cuda.json" > "$LOGS/ar_step_cuda.log" 2>&1
echo "AR step, verify 32 rows, W12 linears on CUDA: exit $?"
export SPECDEC_W12_CUDA=0
timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 32 --ar-budget-s 20 \
  --out "$OUT/ar_step_verify32_triton.json" > "$LOGS/ar_step_triton.log" 2>&1
echo "AR step, verify 32 rows, W12 linears on Triton: exit $?"
tar -czf "$LOGS/../verify32_logs.tgz" -C "$LOGS" . && mv "$LOGS/../verify32_logs.tgz" "$OUT/"
for v in cuda triton; do
  echo "=== W12 linears: $v ==="
  grep -E "^AR step (bf16|w12)|^verify step|budget" "$LOGS/ar_step_$v.log"
done
