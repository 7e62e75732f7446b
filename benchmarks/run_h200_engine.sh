#!/usr/bin/env bash
# The engine at concurrency 1, 4, 16, 24: batched speculative decoding (simulated SpecPilot-like acceptance,
# OracleDrafter "specpilot-one-level") vs batched AR on the same engine, Qwen3-8B shape, random float32 weights;
# ablations: global verify budget off, packed -> per_request layout; throughput-vs-concurrency plot.
# float32, not bf16: in bf16 the batched verify passes round differently from the runs the oracle's references
# come from, outputs drift (the 2026-12-02 bf16 runs: 10-22 of 24 requests), and past the drift the simulated
# drafter proposes nothing (1-2 accepted per round instead of ~4.8), so the speculative rows measured the drift.
# In float32 the packed GEMMs still differ from per-request ones in the last bits, but greedy outputs of random
# weights with float32 logits stay on the reference far longer; the JSON records every mismatch.
# Expected time on one H200: ~4 min (one 8B float32 target, 33 GB, built; the alone reference first, 24 requests x
# 48 tokens at c=1 with CUDA graphs, ~16-20 ms a step, ~25 s; then c=16 and c=24 AR and spec (goal cases), each run
# once untimed (graph capture, oracle references) and once timed; then the ablations while time lasts).
# The script stops starting new cases after 250 s (--wall-budget-s) and still writes the JSON, the plot and
# the summary table. Cap: 300 s. KV: 24 slots x ~215 tokens x 295 KB = 1.5 GB per layout.
# The bf16 form of 2026-12-02 (bench_engine_h200_2026-12-02_run2.json): `--dtype bfloat16 --wall-budget-s 115`.
# The IEEE-float32 form (run3, the same day: every output equal to AR, unmatched 0, but float32 GEMMs without tensor
# cores made a 16-row pass 39.8 ms and speculation 1.34x at c=16) is `--matmul-precision highest`; this form runs
# float32 matmuls on TF32 tensor cores (`high`), ~8x the GEMM rate, whose rounding still stays far below bf16's:
# the JSON's mismatch and unmatched counts say whether the simulated acceptance held.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_engine.sh   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 300 python3 -m benchmarks.decode.bench_engine --dtype float32 --matmul-precision high --wall-budget-s 250 --out "$OUT/bench_engine.json" 2>&1 | tee "$OUT/bench_engine.log"
