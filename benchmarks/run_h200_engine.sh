#!/usr/bin/env bash
# The engine at concurrency 1, 4, 16, 24: batched speculative decoding (simulated SpecPilot-like acceptance,
# OracleDrafter "specpilot-one-level") vs batched AR on the same engine, Qwen3-8B shape, bf16; ablations: global
# verify budget off, packed -> per_request layout; throughput-vs-concurrency plot.
# The weights are random with a planted successor rule (`--weights planted`, specdec.models.plant_successor_rule):
# the greedy continuation is known and wins by a margin no bf16 rounding of any batch shape reaches, so the
# simulated acceptance holds in bf16 and every speculative output must equal batched AR (exit 1 otherwise).
# With plain random bf16 weights (the 2026-12-02 bf16 run, run2) the batched verify passes rounded near-ties
# differently from the oracle's references, outputs drifted, and the speculative rows measured the drift.
# Expected time on one H200: ~4 min (one 8B bf16 target, 16 GB, built and planted ~15 s; the alone reference first,
# 24 requests x 128 tokens at c=1 with CUDA graphs, ~10 ms a step, ~38 s; then c=16 and c=24 AR and spec (goal
# cases) with --waves 3 (48 and 72 requests through 16 and 24 slots: continuous batching, the tail of the last
# requests a third of the run), each run once untimed (graph capture, references) and once timed, ~50 s; c=4 (12
# requests) ~35 s; c=1 ~90 s). The packed layout only: the per_request ablation (490 ms an AR pass at c=16) was
# measured in run4 and would not fit here. The script stops starting new cases after 230 s (--wall-budget-s) and
# still writes the JSON, the plot and the summary table. Cap: 290 s. KV: 24 slots x 295 tokens x 147 KB = 1.0 GB.
# Earlier forms: float32 IEEE (run3, `--dtype float32 --matmul-precision highest`), random bf16 (run2), planted bf16
# with 48 new tokens and both layouts (run4, `--new-tokens 48 --layouts packed,per_request`), one closed batch of c
# requests per case (run5, run6 goal: `--waves 1`).
# `bash benchmarks/run_h200_engine.sh goal`: the goal cases only (c = 16 and 24, after the alone reference), ~2 min,
# cap 160 s (wall budget 120 s). `... goal split`: the same cases with every target forward also timed between two
# device syncs (`--split-forward`: a pass split into the forward and the rest, the engine's host work).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_engine.sh [goal [split]]   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
SPLIT=()
if [ "${2:-}" = split ]; then SPLIT=(--split-forward); fi
if [ "${1:-}" = goal ]; then
  timeout 160 python3 -m benchmarks.decode.bench_engine --dtype bfloat16 --weights planted --new-tokens 128 --waves 3 --layouts packed --concurrency 16,24 --wall-budget-s 120 ${SPLIT[@]+"${SPLIT[@]}"} --out "$OUT/bench_engine.json" 2>&1 | tee "$OUT/bench_engine.log"
else
  timeout 290 python3 -m benchmarks.decode.bench_engine --dtype bfloat16 --weights planted --new-tokens 128 --waves 3 --layouts packed --wall-budget-s 230 --out "$OUT/bench_engine.json" 2>&1 | tee "$OUT/bench_engine.log"
fi
