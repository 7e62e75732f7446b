#!/usr/bin/env bash
# The engine at concurrency 1, 4, 16, 24: batched speculative decoding (simulated SpecPilot-like acceptance,
# OracleDrafter "specpilot-one-level") vs batched AR on the same engine, Qwen3-8B shape, random bf16 weights;
# ablations: global verify budget off, packed -> per_request layout; throughput-vs-concurrency plot.
# Expected time on one H200: ~2-2.5 min (one 8B target built; the alone reference first: 24 requests x 48 tokens
# by AR at c=1, CUDA-graph replays at ~8-12 ms a step, ~15 s; then c=16 and c=24 AR and spec (goal cases),
# each run once untimed (graph capture, oracle references) and once timed; then the ablations while time lasts).
# The script stops starting new cases after 140 s (--wall-budget-s) and still writes the JSON, the plot and
# the summary table. Cap: 180 s. KV: 24 slots x ~215 tokens x 147 KB = 0.76 GB per layout.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_engine.sh   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 180 python3 -m benchmarks.decode.bench_engine --out "$OUT/bench_engine.json" 2>&1 | tee "$OUT/bench_engine.log"
