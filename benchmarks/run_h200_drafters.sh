#!/usr/bin/env bash
# Block drafters at the Qwen3-8B shape (draft step eager vs CUDA graph, simulated-acceptance runs) and the
# graph == eager check of every block drafter on a tiny target.
# Expected time on one H200: ~5 min (bench_drafters ~4 min: its --budget-s 215 stops part 2 in time;
# check_drafter_graphs ~0.5 min). Caps: 330 + 120 s, within one 10-minute call.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_drafters.sh   (writes JSON and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 330 python3 -m benchmarks.decode.bench_drafters --budget-s 215 --out "$OUT/bench_drafters.json" 2>&1 | tee "$OUT/bench_drafters.log"
timeout 120 python3 -m benchmarks.decode.check_drafter_graphs --out "$OUT/check_drafter_graphs.json" 2>&1 | tee "$OUT/check_drafter_graphs.log"
echo "=== summary ==="
tail -n 14 "$OUT/bench_drafters.log"
tail -n 7 "$OUT/check_drafter_graphs.log"
