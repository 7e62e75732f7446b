#!/usr/bin/env bash
# The engine on the Qwen3.5-4B hybrid shape (24 Gated DeltaNet + 8 gated attention layers) at concurrency 4, 16, 24:
# batched speculative decoding (simulated SpecPilot-like acceptance, OracleDrafter "specpilot-one-level") vs batched
# AR on the same engine, bf16, RaggedHybridTarget layout "packed" (every linear layer once over all requests, the GDN
# kernels batched over the requests' padded trees); ablation: global verify budget off; throughput-vs-concurrency plot.
# The weights are random with a planted successor rule (`--weights planted`): every speculative output must equal
# batched AR (exit 1 otherwise), and the alone outputs must follow the planted chain.
# The packed layout replays CUDA graphs for forwards whose requests have at most 64 rows each (decode and verify
# rounds), checked bitwise against its eager static path before the cases (JSON graphs.mode / check_equal); prefill
# chunks of more rows, the commits and the per_request layout run eagerly (the batch-1 eager AR step of this shape
# is 76.8 ms, its graphed step 7.16 ms; README, NOTES).
# Expected time on one H200: ~4 min (240 s measured on 2026-12-02, when c = 4 did not fit the wall budget and was
# skipped; the estimate below assumed faster rounds). Target built and planted ~15 s; the alone reference first (every request
# alone, untimed; it also stands for c = 1, whose timed cases would repeat it three times and do not fit): 24
# requests x 32 tokens at ~85 ms a step, ~70 s; then the goal cases c = 16 (~40 s: step-time profile, AR, spec with
# the budget, each run once untimed and once timed, spec with the budget off) and c = 24 (~55 s at ~0.3 s a round);
# c = 4 last (~20 s). 32 new tokens a request (not the dense run's 128): eager rounds are slow, and the alone
# reference grows with requests x tokens. The script starts no new case after 230 s (--wall-budget-s) and still
# writes the JSON, the plot and the summary table; one c = 24 case takes at most ~35 s. Cap: 290 s.
# KV and GDN states per layout: 24 slots x 199 tokens of KV (0.16 GB) + 2 ring entries of GDN states per slot (2.5 GB).
# `bash benchmarks/run_h200_engine_hybrid.sh ablation`: the layout ablation at c = 4 (4 requests): packed and
# per_request (each request through the batch-1 code path, every weight read once per request: ~4 x 80 ms a round),
# ~1.7 min, cap 160 s (wall budget 120 s).
# The 128-token run at c = 16 and 24: benchmarks/run_h200_engine_hybrid_long.sh.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_engine_hybrid.sh [ablation]   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
if [ "${1:-}" = ablation ]; then
  timeout 160 python3 -m benchmarks.decode.bench_engine --model qwen3.5-4b --dtype bfloat16 --weights planted --new-tokens 32 --requests 4 --concurrency 4 --layouts packed,per_request --wall-budget-s 120 --out "$OUT/bench_engine_hybrid_ablation.json" 2>&1 | tee "$OUT/bench_engine_hybrid_ablation.log"
else
  timeout 290 python3 -m benchmarks.decode.bench_engine --model qwen3.5-4b --dtype bfloat16 --weights planted --new-tokens 32 --requests 24 --concurrency 4,16,24 --layouts packed --wall-budget-s 230 --out "$OUT/bench_engine_hybrid.json" 2>&1 | tee "$OUT/bench_engine_hybrid.log"
fi
