#!/usr/bin/env bash
# The decode step's pieces after the split-KV attention and the shared-memory escape warp: the decode attention by
# kernel and backend (split-KV beside cuDNN in one run), the tensor-map GEMMs' fixed cost and streaming rate (cold
# weights, programmatic launch on), and the AR step of the Qwen3-8B-shaped lean target three times (bf16 and W12, one
# token and the 16-row verify, the SDPA step beside) to put a spread on its ratios. Writes the JSON to $OUT and the
# logs and plots in one step_spread_logs.tgz.
# Expected time on one H200: ~4 min (torch start ~10 s a process; decode attention ~25 s; fixed cost ~60 s; AR step
# ~45 s each, three; nvcc 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, decode attention 60 s, fixed cost 75 s (budget 55 s), AR steps 70 s each (budget 50 s): at most
# ~7 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_step_spread.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_PDL=1
timeout 60 python3 -m benchmarks.kernels.bench_decode_attention --out "$OUT/decode_attention.json" > "$LOGS/decode_attention.log" 2>&1
echo "decode attention: exit $?"
timeout 75 python3 -m benchmarks.kernels.bench_fixed_cost --budget-s 55 --out "$OUT/fixed_cost.json" > "$LOGS/fixed_cost.log" 2>&1
echo "fixed cost: exit $?"
for i in 1 2 3; do
  timeout 70 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 50 --out "$OUT/ar_step_$i.json" > "$LOGS/ar_step_$i.log" 2>&1
  echo "AR step, run $i: exit $?"
done
mv "$OUT"/*.png "$LOGS/" 2>/dev/null
tar -czf "$LOGS/../step_spread_logs.tgz" -C "$LOGS" . && mv "$LOGS/../step_spread_logs.tgz" "$OUT/"
echo "=== decode attention (us a call in a graph of 36) ==="
grep -E "^ *[0-9]+ +[0-9]+  " "$LOGS/decode_attention.log"
echo "=== fixed cost: fits ==="
grep -E "^(cublas|cuda)_" "$LOGS/fixed_cost.log" | head -n 16
for i in 1 2 3; do
  echo "=== AR step, run $i ==="
  grep -E "^AR step (bf16|w12)|^verify step" "$LOGS/ar_step_$i.log"
done
