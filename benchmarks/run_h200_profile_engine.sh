#!/usr/bin/env bash
# Where an engine pass goes outside its target forward: `benchmarks/decode/profile_engine.py` on the Qwen3-8B shape
# (random bf16 weights with a planted successor rule, packed target with CUDA graphs) at c = 16, batched AR and the
# speculative engine with the SpecPilot-like oracle and the global verify budget (the goal case of
# `run_h200_engine.sh goal`); every pass timed to a device sync with its forward between two more, then 8 decode
# passes of each under cProfile and torch.profiler (host functions by own and cumulative time, CUDA runtime calls by
# self CPU time). Exit 1 if a speculative output differs from AR.
# Expected time on one H200: ~2 min (target built and planted ~15 s, step-time table ~10 s, AR and spec each run
# untimed (graph capture) then timed, 16 requests x 64 tokens at ~7-12 ms a pass, then profiled; the profiler's own
# overhead a few seconds; measured 30 s on 2026-12-04). Cap: 150 s.
# `... goal`: the goal case's continuous batching (`run_h200_engine.sh goal`: 3 waves of 16 requests joining as
# slots free up, 128 new tokens), passes classed by whether a request joined or left; ~1.5 min, cap 200 s.
# `... hybrid`: the Qwen3.5-4B hybrid (planted successor rule as well), budget off (the 2026-12-03 form; ~65 s), cap 150 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_profile_engine.sh [goal|hybrid]   (writes JSON and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
if [ "${1:-}" = goal ]; then
  timeout 200 python3 -m benchmarks.decode.profile_engine --waves 3 --new-tokens 128 --out "$OUT/profile_engine_goal.json" 2>&1 | tee "$OUT/profile_engine_goal.log"
elif [ "${1:-}" = hybrid ]; then
  timeout 150 python3 -m benchmarks.decode.profile_engine --model qwen3.5-4b --budget off --new-tokens 32 --out "$OUT/profile_engine_hybrid.json" 2>&1 | tee "$OUT/profile_engine_hybrid.log"
else
  timeout 150 python3 -m benchmarks.decode.profile_engine --out "$OUT/profile_engine.json" 2>&1 | tee "$OUT/profile_engine.log"
fi
