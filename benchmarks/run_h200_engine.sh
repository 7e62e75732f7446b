#!/usr/bin/env bash
# The engine at concurrency 1, 4, 16, 24: batched speculative decoding (simulated SpecPilot-like acceptance,
# OracleDrafter "specpilot-one-level") vs batched AR on the same engine, Qwen3-8B shape, random bf16 weights;
# ablations: global verify budget off, packed -> per_request layout; throughput-vs-concurrency plot.
# Expected time on one H200: ~2-2.5 min (one 8B target built; 24 requests x 48 tokens decoded alone by AR at
# ~8-12 ms a step; the engine's per-request attention loop costs host time that grows with concurrency).
# The script stops starting new cases after 140 s (--wall-budget-s) and still writes the JSON, the plot and
# the summary table. Cap: 180 s. KV: 24 slots x ~215 tokens x 147 KB = 0.76 GB per layout.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_engine.sh   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 180 python3 -m benchmarks.decode.bench_engine --out "$OUT/bench_engine.json" 2>&1 | tee "$OUT/bench_engine.log"
