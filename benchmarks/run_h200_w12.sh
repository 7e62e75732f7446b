#!/usr/bin/env bash
# W12 and Q-view GEMMs against cuBLAS bf16 / fp8 on the Qwen3-8B and Qwen3-32B linear shapes.
# Expected time on one H200: ~5 min (--budget-s 300 stops starting new shapes after 5 min). Cap: 480 s,
# within one 10-minute call.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_w12.sh   (writes JSON and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 480 python3 -m benchmarks.kernels.bench_w12 --budget-s 300 --out "$OUT/w12_h200.json" 2>&1 | tee "$OUT/w12.log"
echo "=== summary ==="
tail -n 6 "$OUT/w12.log"
