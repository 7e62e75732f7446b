#!/usr/bin/env bash
# The pilot on one H200: from plain AR to the best spec it finds, beside the best hand-configured system,
# and the memory-carry experiment (see benchmarks/pilot/run_pilot.py).
#   sim  (default): Qwen3-8B shape, random bf16 weights, OracleDrafter "specpilot-one-level" (simulated
#        acceptance); then the Qwen3-32B shape twice, from deployment 1's memory and from an empty one.
#        Measured 2026-12-02 with a 225 s budget: target build + references ~20 s, one pilot round on the 8B
#        shape 73 s, so deployment 1 got one round (4.29x AR, below the hand chain's 13.16x), one hand config was
#        not measured and the empty-memory run of deployment 2 did not start. Now: cap 570 s, budget 550 s, a
#        whole 10-minute call (~5 rounds on the 8B shape and both 32B runs by the same per-round costs).
#   real: SmolLM2-135M with its trained DFlash drafter (bf16). 65 s measured on 2026-12-02; cap 120 s,
#        script budget 105 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_pilot.sh [sim|real]
#   (writes pilot_<mode>.json, the log, and per deployment the report, memory and spec under $OUT/pilot_<mode>)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
MODE=${1:-sim}
case "$MODE" in
  sim) CAP=570; BUDGET=550 ;;
  real) CAP=120; BUDGET=105 ;;
  *) echo "usage: $0 [sim|real]" >&2; exit 2 ;;
esac
mkdir -p "$OUT/pilot_$MODE"
timeout $CAP python3 -m benchmarks.pilot.run_pilot --mode "$MODE" --budget-seconds $BUDGET --out "$OUT/pilot_$MODE" 2>&1 | tee "$OUT/pilot_$MODE.log"
