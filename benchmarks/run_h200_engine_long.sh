#!/usr/bin/env bash
# The engine at 900-token prompts, c = 16, the SpecPilot-like simulated profile on the Qwen3-8B shape (planted bf16
# weights, as run_h200_engine.sh): once with the packed target's tall-request rule (a prompt chunk attends its own
# slot apart once its padding of the other slots' blocks passes LONG_REQUEST_PADDING) and once with the rule off
# (`--long-request-rows none`: every forward one padded SDPA call), the pass split by row bucket in both.
# Expected time on one H200: ~4.5 min (each run: the 8B target built and planted ~15 s, the alone reference of 24
# requests of ~900 + 128 tokens ~30 s, c = 16 AR and spec over two waves, each once untimed and once timed, ~60-80 s
# with graph capture of the longer spans). Caps: 170 s a run (wall budget 120 s: no new case starts past it).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_engine_long.sh   (writes JSONs, PNGs and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
for RULE in default none; do
  timeout 170 python3 -m benchmarks.decode.bench_engine --dtype bfloat16 --weights planted --prompt-len 900 --new-tokens 128 --waves 2 --layouts packed --concurrency 16 --split-forward --long-request-rows "$RULE" --wall-budget-s 120 --out "$OUT/bench_engine_long_$RULE.json" 2>&1 | tee "$OUT/bench_engine_long_$RULE.log"
done
