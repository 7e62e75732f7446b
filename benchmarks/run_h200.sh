#!/usr/bin/env bash
# Decode steps of the Qwen3-8B and Qwen3-32B shapes (bf16 CUDA graphs; gate: float32 reference computed
# layer by layer, so the 32B gate fits on one H200).
# Expected time on one H200: ~3 min (bench_ar ~3 min). Cap: 420 s (timeout), within one 10-minute call.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200.sh   (writes JSON and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.total --format=csv | tee "$OUT/gpu.txt"
timeout 420 python3 -m benchmarks.decode.bench_ar --out "$OUT/bench_ar.json" 2>&1 | tee "$OUT/bench_ar.log"
echo "=== summary ==="
tail -n 16 "$OUT/bench_ar.log"
