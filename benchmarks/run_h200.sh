#!/usr/bin/env bash
# One GPU call: decode-step benchmark, tree-verify benchmark and the bf16 token-forcing run.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200.sh   (writes JSON and logs to $OUT)
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.total --format=csv | tee "$OUT/gpu.txt"
timeout 200 python3 benchmarks/decode/bench_ar.py --out "$OUT/bench_ar.json" 2>&1 | tee "$OUT/bench_ar.log"
timeout 150 python3 benchmarks/decode/bench_tree.py --out "$OUT/bench_tree.json" 2>&1 | tee "$OUT/bench_tree.log"
timeout 200 python3 benchmarks/decode/forcing_gpu.py --out "$OUT" 2>&1 | tee "$OUT/forcing_gpu.log"
echo "=== summary ==="
tail -n 14 "$OUT/bench_ar.log"
tail -n 8 "$OUT/bench_tree.log"
tail -n 12 "$OUT/forcing_gpu.log"
