#!/usr/bin/env bash
# Tree verify forward vs the AR step (uncompiled CUDA graphs, Qwen3-8B shape) and the bf16 token-forcing run.
# Expected time on one H200: ~4 min (bench_tree ~2 min, forcing_gpu ~2 min). Caps: 240 + 240 s, within one
# 10-minute call.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_tree.sh   (writes JSON and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 240 python3 -m benchmarks.decode.bench_tree --out "$OUT/bench_tree.json" 2>&1 | tee "$OUT/bench_tree.log"
timeout 240 python3 -m benchmarks.decode.forcing_gpu --out "$OUT" 2>&1 | tee "$OUT/forcing_gpu.log"
echo "=== summary ==="
tail -n 10 "$OUT/bench_tree.log"
tail -n 12 "$OUT/forcing_gpu.log"
