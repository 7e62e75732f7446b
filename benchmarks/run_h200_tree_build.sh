#!/usr/bin/env bash
# Best-first tree build: host heap vs fixed-shape device ops (eager and in a CUDA graph), V = 151936, D = 16.
# Expected time on one H200: ~1 min (imports, three graph captures, 50 timed reps per variant). Cap: 180 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_tree_build.sh   (writes JSON and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 180 python3 -m benchmarks.kernels.bench_tree_build --out "$OUT/bench_tree_build.json" 2>&1 | tee "$OUT/bench_tree_build.log"
