#!/usr/bin/env bash
# The tensor-map GEMMs' K splits as one thread-block cluster ($SPECDEC_TMA_CLUSTER=1: partials summed through
# distributed shared memory, finish_split_in_cluster) against the global partials and counter: the W12 v7, Q v2 and
# bf16 v2 probes with clusters (one-hot exact and deterministic at 1, 8, 16 tokens); W12 v7 and Q v2 timed on the
# Qwen3-8B o, qkv and down shapes at 1, 8 and 16 tokens (Gaussian weights) with clusters off and on; the AR step with
# clusters on; compute-sanitizer memcheck with clusters on. Writes the AR step's JSON and cluster_logs.tgz to $OUT.
# Expected time on one H200: ~2.5 min (torch start ~10 s a process; probes ~12 s each; timings ~20 s each; AR step
# ~30 s; sanitizer ~40 s; nvcc 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, probes 20 s each, timings 35 s each (budget 25 s), AR step 60 s (budget 30 s), sanitizer 45 s: at
# most ~5 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_tma_cluster.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_PDL=1
export SPECDEC_TMA_CLUSTER=1
for v in v7 q_v2 bf16_v2; do
  timeout 20 python3 -m benchmarks.kernels.bench_roofline --probe "$v" --out "$LOGS/${v}_probe.json" > "$LOGS/${v}_probe.log" 2>&1
  echo "$v probe, clusters on: exit $? ($(tail -n 1 "$LOGS/${v}_probe.log"))"
done
for c in 0 1; do
  export SPECDEC_TMA_CLUSTER=$c
  timeout 35 python3 -m benchmarks.kernels.profile_ncu --launch --cases qwen3-8b/o,qwen3-8b/qkv,qwen3-8b/down \
    --only-kernel cuda_w12_v7 --only-kernel cuda_q_v2 --ms 1,8,16 --weights gaussian --time-reps 10 --budget-s 25 \
    --out "$LOGS/time_cluster_$c.json" > "$LOGS/time_cluster_$c.log" 2>&1
  echo "timing, SPECDEC_TMA_CLUSTER=$c: exit $?"
done
export SPECDEC_TMA_CLUSTER=1
timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 30 --out "$OUT/ar_step_tma_cluster.json" > "$LOGS/ar_step.log" 2>&1
echo "AR step, clusters on: exit $?"
if command -v compute-sanitizer >/dev/null; then
  timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --sanitize > "$LOGS/sanitize.log" 2>&1
  echo "compute-sanitizer memcheck, clusters on: exit $? (0 = clean, 9 = errors, 124 = timed out); $(tail -n 1 "$LOGS/sanitize.log")"
fi
tar -czf "$LOGS/../cluster_logs.tgz" -C "$LOGS" . && mv "$LOGS/../cluster_logs.tgz" "$OUT/"
for c in 0 1; do
  echo "=== SPECDEC_TMA_CLUSTER=$c (us a call) ==="
  grep -E "^cuda_" "$LOGS/time_cluster_$c.log"
done
echo "=== AR step, clusters on ==="
grep -E "^AR step (bf16|w12):|^verify step" "$LOGS/ar_step.log"
