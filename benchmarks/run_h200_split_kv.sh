#!/usr/bin/env bash
# The split-KV decode attention (specdec/kernels/attention) on the H200: the decode attention by backend with the
# Triton kernel beside cuDNN (1 and 16 rows, 256 and 2048 slots, each variant checked against the target's path),
# then the AR step of the Qwen3-8B-shaped lean target (bf16 and W12 weights, graphs) with SDPA and with the dense
# runtime's attention through the kernel. Writes JSON to $OUT and the logs in one split_kv_logs.tgz.
# Expected time on one H200: ~2 min (torch start ~10 s a process; decode attention ~20 s plus Triton compiles; AR
# step ~40 s with the split-KV steps captured again; nvcc 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, decode attention 120 s, AR step 120 s (budget 90 s): at most ~5 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_split_kv.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/split_kv_build.log"
export SPECDEC_PDL=1
timeout 120 python3 -m benchmarks.kernels.bench_decode_attention --out "$OUT/decode_attention_split_kv.json" > "$LOGS/decode_attention.log" 2>&1
echo "decode attention: exit $?"
timeout 120 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 90 \
  --out "$OUT/ar_step_split_kv.json" > "$LOGS/ar_step.log" 2>&1
echo "AR step: exit $?"
mv "$OUT"/*.png "$LOGS/" 2>/dev/null
tar -czf "$LOGS/../split_kv_logs.tgz" -C "$LOGS" . && mv "$LOGS/../split_kv_logs.tgz" "$OUT/"
echo "=== decode attention (us a call in a graph of 36) ==="
grep -E "^ *[0-9]+ +[0-9]+  " "$LOGS/decode_attention.log"
echo "=== AR step ==="
grep -E "^AR step|^verify step" "$LOGS/ar_step.log"
