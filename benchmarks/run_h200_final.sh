#!/usr/bin/env bash
# Tree verify with compiled graphs and the hybrid Qwen3.5-4B-shaped verify step.
# Expected time on one H200: ~4 min (bench_tree_compiled ~2.5 min, bench_hybrid ~1.5 min). Caps: 240 + 180 s,
# within one 10-minute call.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_final.sh   (writes JSON and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 240 python3 -m benchmarks.decode.bench_tree_compiled --out "$OUT/bench_tree_compiled.json" 2>&1 | tee "$OUT/bench_tree_compiled.log"
timeout 180 python3 -m benchmarks.decode.bench_hybrid --out "$OUT/bench_hybrid.json" 2>&1 | tee "$OUT/bench_hybrid.log"
echo "=== summary ==="
tail -n 5 "$OUT/bench_tree_compiled.log"
tail -n 15 "$OUT/bench_hybrid.log"
