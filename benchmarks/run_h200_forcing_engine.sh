#!/usr/bin/env bash
# Batch invariance of the engine in bf16 through the token-forcing checker, Qwen3-0.6B shape (random weights, logit
# std 4): 16 prompts of 16-64 tokens x 768 new tokens decoded together by sd.Engine (packed layout, CUDA graphs,
# n-gram drafter, k = 6; once with every draft verified, once with verify_budget="auto") must PASS against the null
# of each prompt decoded alone (sd.generate, AR); the same engine on SlotLogitBiasFault (+2 on every 7th id of ONE
# slot's logits from generated position 512 on) must FAIL, in its pos >= 512 stratum only, with every large-margin
# event in the faulted request. Exit 0 iff that expected outcome holds.
# Expected time on one H200: ~3 min (2.5-3.7 min). From the committed H200 numbers of the same target
# (forcing_gpu_h200_2026-12-01.json, forcing_two_level_gpu_h200_2026-12-02.json): build ~25 s (random init of the
# 0.6B HF model on the CPU); stock AR 16 x 768 = 12,288 batch-1 steps at 4.5-6 ms, ~55-75 s (the longest part);
# three engine runs of ~620 rounds at ~15-25 ms a round (one packed forward of <= 112 rows, ~2-3 ms, plus the host
# work of 16 requests; bench_engine measured ~11 ms of host work a round at 16 requests), ~10-15 s each, plus graph
# captures per (rows, span) bucket of each ragged target, ~5-10 s each, in an untimed run of each case before its timed
# one (committed 2026-12-02: engine 16.9 s, faulty 13.3, budget auto 8.3, timed with their captures: each case now
# ~1.5-2x that in all); the step-time profile ~2 s; the four forcing passes (16 x ~800 tokens each, 512-row chunks)
# ~5-10 s. KV: two ragged targets of 17 slots x 846 tokens, 1.6 GB each. The script starts no engine case past 200 s
# (--wall-budget-s; the budget-auto case is last) and still writes the JSON and the summary table. Cap: 270 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_forcing_engine.sh   (writes JSON and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 270 python3 -m benchmarks.decode.forcing_engine_gpu --wall-budget-s 200 --out "$OUT" 2>&1 | tee "$OUT/forcing_engine_gpu.log"
