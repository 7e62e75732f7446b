#!/usr/bin/env bash
# The W12 escape warp summing in shared memory (lane m does token m, one step an escape) and the tensor-map kernels
# at 1-16 tokens: the W12 v7, Q v2 and bf16 v2 probes (one-hot exact and deterministic at 1, 8, 16 tokens);
# W12 v7 and Q v2 timed on the Qwen3-8B o, down and lm_head shapes at 1, 8 and 16 tokens with Gaussian weights,
# and W12 v7 with the planted weights (a crowded escape tile); the roofline (every shape, M = 1-16, cuBLAS bf16 and fp8
# beside); the AR step (bf16 and W12, one token and the 16-row verify);
# compute-sanitizer memcheck. Writes the roofline's and the AR step's JSON, the roofline PNG and one
# escape_warp_logs.tgz (timings, probe, logs) to $OUT.
# Expected time on one H200: ~3.5 min (measured 137 s with one probe, 213 s with three and M up to 32; torch start
# ~10 s a process; probes ~15 s each; timings ~25 s and ~15 s; roofline ~60 s; AR step ~45 s; sanitizer ~40 s; nvcc
# 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, probes 20 s each, timings 40 s each (budget 30 s), roofline 112 s (budget 92 s), AR step 80 s (budget
# 60 s), sanitizer 70 s: at most ~8 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_escape_warp.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_PDL=1
for v in v7 q_v2 bf16_v2; do
  timeout 20 python3 -m benchmarks.kernels.bench_roofline --probe "$v" --out "$LOGS/${v}_probe.json" > "$LOGS/${v}_probe.log" 2>&1
  echo "$v probe: exit $? ($(tail -n 1 "$LOGS/${v}_probe.log"))"
done
timeout 40 python3 -m benchmarks.kernels.profile_ncu --launch --cases qwen3-8b/o,qwen3-8b/down,qwen3-8b/lm_head \
  --only-kernel cuda_w12_v7 --only-kernel cuda_q_v2 --ms 1,8,16 --weights gaussian --time-reps 10 --budget-s 30 \
  --out "$LOGS/time_gaussian.json" > "$LOGS/time_gaussian.log" 2>&1
echo "timing, Gaussian weights: exit $?"
timeout 40 python3 -m benchmarks.kernels.profile_ncu --launch --cases qwen3-8b/o,qwen3-8b/down --only-kernel cuda_w12_v7 \
  --ms 1,8,16 --weights planted --time-reps 10 --budget-s 30 --out "$LOGS/time_planted.json" > "$LOGS/time_planted.log" 2>&1
echo "timing, planted weights: exit $?"
timeout 112 python3 -m benchmarks.kernels.bench_roofline --budget-s 92 --out "$OUT/roofline_escape_warp.json" > "$LOGS/roofline.log" 2>&1
echo "roofline: exit $? ($(grep -c '^qwen3' "$LOGS/roofline.log") table rows)"
timeout 80 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 60 --out "$OUT/ar_step_escape_warp.json" > "$LOGS/ar_step.log" 2>&1
echo "AR step: exit $?"
if command -v compute-sanitizer >/dev/null; then
  timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --sanitize > "$LOGS/sanitize.log" 2>&1
  echo "compute-sanitizer memcheck: exit $? (0 = clean, 9 = errors, 124 = timed out); $(tail -n 1 "$LOGS/sanitize.log")"
fi
tar -czf "$LOGS/../escape_warp_logs.tgz" -C "$LOGS" . && mv "$LOGS/../escape_warp_logs.tgz" "$OUT/"
echo "=== Gaussian weights (us a call) ==="
grep -E "^cuda_" "$LOGS/time_gaussian.log"
echo "=== planted weights ==="
grep -E "^cuda_" "$LOGS/time_planted.log"
echo "=== roofline: decode checks ==="
grep -iE "decode check|checks passed|kernels left out" "$LOGS/roofline.log" | head -n 5
echo "=== AR step ==="
grep -E "^AR step|^verify step" "$LOGS/ar_step.log"
