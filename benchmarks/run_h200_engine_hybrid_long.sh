#!/usr/bin/env bash
# The engine on the Qwen3.5-4B hybrid shape at concurrency 16 and 24 with 128 new tokens a request (the dense runs'
# length), so that the prefill passes weigh on the ratio as little as there: batched speculative decoding (oracle
# "specpilot-one-level", budget auto and off) against batched AR on the packed layout under CUDA graphs, bf16 planted
# weights (every output must equal batched AR and alone: exit 1 otherwise); throughput-vs-concurrency plot.
# Expected time on one H200: ~2.5 min (146 s measured on 2026-12-03: the alone reference of 24 x 128 tokens with its
# graph captures ~70 s, then six cases run twice each). Cap 290 s; no new case after 230 s (--wall-budget-s).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_engine_hybrid_long.sh   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 290 python3 -m benchmarks.decode.bench_engine --model qwen3.5-4b --dtype bfloat16 --weights planted --new-tokens 128 --requests 24 --concurrency 16,24 --layouts packed --wall-budget-s 230 --out "$OUT/bench_engine_hybrid_long.json" 2>&1 | tee "$OUT/bench_engine_hybrid_long.log"
