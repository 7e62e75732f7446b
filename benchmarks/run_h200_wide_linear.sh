#!/usr/bin/env bash
# The Qwen3-8B linears at verify widths (16-256 rows) on cold weights, three cuBLAS formulations of the same
# product (F.linear, operands swapped, cuBLASLt preferred), summed into a decode pass's GEMM time against the
# weights' read floor. Writes wide_linear.json and a log.
# Expected time on one H200: ~1 min (torch start ~10 s, 5 shapes x 7 widths x 3 variants, ~40 s). Cap: 120 s
# (budget 80 s: no new shape starts past it).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_linear.sh   (writes JSON and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 120 python3 -m benchmarks.kernels.bench_wide_linear --budget-s 80 --out "$OUT/wide_linear.json" 2>&1 | tee "$OUT/wide_linear.log"
