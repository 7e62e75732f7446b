#!/usr/bin/env bash
# The pilot on one H200: from plain AR to the best spec it finds, beside the best hand-configured system,
# and the memory-carry experiment (see benchmarks/pilot/run_pilot.py).
# Expected time on one H200: ~9.5 min (the whole budget: rounds start while time is left).
#   Qwen3-8B shape, random bf16 weights, OracleDrafter "specpilot-one-level" (simulated
#        acceptance); then the Qwen3-32B shape twice, from deployment 1's memory and from an empty one.
#        Measured 2026-12-02 with a 225 s budget: target build + references ~20 s, one pilot round on the 8B
#        shape 73 s, so deployment 1 got one round (4.29x AR, below the hand chain's 13.16x), one hand config was
#        not measured and the empty-memory run of deployment 2 did not start. Now: cap 570 s, budget 550 s, a
#        whole 10-minute call (room for the 3 rounds the sizes allow on the 8B shape and both 32B runs).
# The SmolLM2 pair: run_h200_pilot_real.sh.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_pilot.sh
#   (writes pilot_sim.json, the log, and per deployment the report, memory and spec under $OUT/pilot_sim)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
mkdir -p "$OUT/pilot_sim"
timeout 570 python3 -m benchmarks.pilot.run_pilot --mode sim --budget-seconds 550 --out "$OUT/pilot_sim" 2>&1 | tee "$OUT/pilot_sim.log"
