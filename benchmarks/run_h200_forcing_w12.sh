#!/usr/bin/env bash
# Lossless on the GPU where the W12 kernels verify: the token-forcing checker over n-gram speculative decoding of the
# lean Qwen3-8B-shaped target converted to W12 (random weights, logit std 4; every linear of every pass the W12 CUDA
# kernels, the attention the split-KV kernels, programmatic launch as the library sets it), with up to 15 drafts a
# round so that the speculative passes are the 9-16 row verify steps the goals time (the JSON counts them by rows).
# The lossless candidate must PASS against stock AR of the same target; the same system with LogitBiasFault (+2 on
# every 7th id from generated position 1024) must FAIL, in its pos >= 1024 stratum only. Exit 0 iff so.
# Expected time on one H200: ~2 min. Build ~15 s (random init of 8.2 B parameters on the GPU, W12 conversion); stock
# AR 2 x 1600 batch-1 steps at ~6-10 ms (the 0.6B shape's steps took ~6 ms of host work each on 2026-12-01, the 8B
# W12 step's GPU time is ~4.7 ms), 20-32 s; the speculative and faulty runs ~15-30 s each (16-row verify passes of
# ~5.4 ms); the three forcing passes over 2 x 1600 tokens in 512-row chunks, ~10-20 s. Cap: 240 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_forcing_w12.sh   (writes JSON and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 240 python3 -m benchmarks.decode.forcing_gpu --shape qwen3-8b --weight-format w12 --num-draft-tokens 15 \
  --graph-buckets 1,2,4,8,16 --max-new-tokens 1600 --after 1024 --out "$OUT" 2>&1 | tee "$OUT/forcing_gpu_qwen3-8b_w12.log"
