#!/usr/bin/env bash
# Second GPU call: decode steps after the GQA-as-rows attention change, eager-graph vs torch.compile'd graph.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 100 python3 benchmarks/decode/bench_ar.py --models qwen3-8b --ar-tokens 64 --out "$OUT/bench_ar_graph.json" 2>&1 | tee "$OUT/bench_ar_graph.log"
timeout 380 python3 benchmarks/decode/bench_ar.py --compile --models qwen3-8b,qwen3-32b --ms 1,4,16,64 --ar-tokens 64 --out "$OUT/bench_ar_compile.json" 2>&1 | tee "$OUT/bench_ar_compile.log"
echo "=== summary ==="
tail -n 10 "$OUT/bench_ar_graph.log"
tail -n 14 "$OUT/bench_ar_compile.log"
