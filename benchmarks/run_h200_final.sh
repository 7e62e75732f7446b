#!/usr/bin/env bash
# Tree verify with compiled graphs (issue 4 goal) and the hybrid Qwen3.5-4B-shaped verify step (issue 6).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 170 python3 benchmarks/decode/bench_tree_compiled.py --out "$OUT/bench_tree_compiled.json" 2>&1 | tee "$OUT/bench_tree_compiled.log"
timeout 80 python3 benchmarks/decode/bench_hybrid.py --out "$OUT/bench_hybrid.json" 2>&1 | tee "$OUT/bench_hybrid.log"
echo "=== summary ==="
tail -n 4 "$OUT/bench_tree_compiled.log"
tail -n 14 "$OUT/bench_hybrid.log"
