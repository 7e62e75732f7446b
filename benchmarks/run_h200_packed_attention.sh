#!/usr/bin/env bash
# Packed verify rows' attention, one layer at Qwen3-8B head shapes (32 q / 8 kv heads, head_dim 128), 16 and 24
# requests with tree masks: SDPA over padded slots vs FlexAttention (compiled) over the slots' long KV.
# Expected time on one H200: ~1.5 min (the timed calls take well under a second each; the run is torch.compile of
# flex_attention: about 20-40 s for the first shape, a recompile per further shape, dtype or block size; the
# script starts no case past 60 s). Cap: 120 s, within one 10-minute call.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_packed_attention.sh   (writes JSON and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 120 python3 -m benchmarks.kernels.bench_packed_attention --budget-s 60 --out "$OUT/bench_packed_attention.json" 2>&1 | tee "$OUT/bench_packed_attention.log"
