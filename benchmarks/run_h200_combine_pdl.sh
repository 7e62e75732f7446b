#!/usr/bin/env bash
# The split-KV attention's combine launch taking part in programmatic launch (it waits for the split launch, then lets
# the output projection after it start): the AR step of the Qwen3-8B-shaped lean target three times (bf16 and W12 with
# the default kernels, one token and the 16-row verify) for a spread, to compare with the steps of the same code
# without it (`ar_step_h200_2026-12-04_stream_k3_default.json`). Writes the three JSON to $OUT and the logs in one
# combine_pdl_logs.tgz.
# Expected time on one H200: ~1.5 min (measured 85 s with the library carried; AR step ~25 s each, three; nvcc 15-25 s
# when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, AR steps 75 s each (budget 55 s): at most ~5 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_combine_pdl.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_PDL=1
for i in 1 2 3; do
  timeout 75 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 55 --out "$OUT/ar_step_$i.json" > "$LOGS/ar_step_$i.log" 2>&1
  echo "AR step, run $i: exit $?"
done
tar -czf "$LOGS/../combine_pdl_logs.tgz" -C "$LOGS" . && mv "$LOGS/../combine_pdl_logs.tgz" "$OUT/"
for i in 1 2 3; do
  echo "=== AR step, run $i ==="
  grep -E "^AR step (bf16|w12):|^verify step (bf16|w12)" "$LOGS/ar_step_$i.log"
done
