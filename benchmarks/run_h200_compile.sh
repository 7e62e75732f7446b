#!/usr/bin/env bash
# Decode steps of the Qwen3-8B shape: CUDA graph of the eager body vs of the torch.compile'd body,
# both gated by the error budget against a float32 reference of the same weights.
# Expected time on one H200: ~4 min (graphs ~1 min, compiled ~3 min). Caps: 120 + 300 s, within one
# 10-minute call.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_compile.sh   (writes JSON and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 120 python3 -m benchmarks.decode.bench_ar --models qwen3-8b --ms 1,4,16,64 --ar-tokens 64 --out "$OUT/bench_ar_graph.json" 2>&1 | tee "$OUT/bench_ar_graph.log"
timeout 300 python3 -m benchmarks.decode.bench_ar --compile --models qwen3-8b --ms 1,4,16,64 --ar-tokens 64 --out "$OUT/bench_ar_compile.json" 2>&1 | tee "$OUT/bench_ar_compile.log"
echo "=== summary ==="
tail -n 9 "$OUT/bench_ar_graph.log"
tail -n 9 "$OUT/bench_ar_compile.log"
