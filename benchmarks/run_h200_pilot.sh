#!/usr/bin/env bash
# The pilot on one H200: from plain AR to the best spec it finds, beside the best hand-configured system,
# and the memory-carry experiment (see benchmarks/pilot/run_pilot.py).
#   sim  (default): Qwen3-8B shape, random bf16 weights, OracleDrafter "specpilot-one-level" (simulated
#        acceptance); then the Qwen3-32B shape twice, from deployment 1's memory and from an empty one.
#        Expected time: ~3.5 min (estimated, not measured: 8B AR step 5.7-8.8 ms, one 16-row 8B pass 10.4 ms,
#        ~1 s per candidate evaluation on 48 tokens, ~4-6 s per gate call; the 32B runs at ~3x those).
#        Cap: 240 s; the script's own wall budget is 225 s (no round or measurement starts past its share).
#   real: SmolLM2-135M with its trained DFlash drafter (bf16). Expected ~1.5 min (estimated); cap 120 s,
#        script budget 105 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_pilot.sh [sim|real]
#   (writes pilot_<mode>.json, the log, and per deployment the report, memory and spec under $OUT/pilot_<mode>)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
MODE=${1:-sim}
case "$MODE" in
  sim) CAP=240; BUDGET=225 ;;
  real) CAP=120; BUDGET=105 ;;
  *) echo "usage: $0 [sim|real]" >&2; exit 2 ;;
esac
mkdir -p "$OUT/pilot_$MODE"
timeout $CAP python3 -m benchmarks.pilot.run_pilot --mode "$MODE" --budget-seconds $BUDGET --out "$OUT/pilot_$MODE" 2>&1 | tee "$OUT/pilot_$MODE.log"
