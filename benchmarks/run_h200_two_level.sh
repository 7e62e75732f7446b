#!/usr/bin/env bash
# Two-level verification vs chain and tree verification, Qwen3-8B shape (random bf16 weights, simulated
# acceptance), both Q-view storages.
# Expected time on one H200: ~1.5 min (64 s measured on 2026-12-02: two 8B targets built, graphs captured per
# row bucket and weight view, Q kernels compiled). Cap: 420 s, within one 10-minute call.
# float32 variant (outputs do not drift from the AR reference on random weights):
#   python3 -m benchmarks.decode.bench_two_level --dtype float32 --storages dense --tokens 96 --reps 10   (23 s measured)
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_two_level.sh   (writes JSON and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 420 python3 -m benchmarks.decode.bench_two_level --out "$OUT/bench_two_level.json" 2>&1 | tee "$OUT/bench_two_level.log"
