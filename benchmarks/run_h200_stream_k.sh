#!/usr/bin/env bash
# The tensor-map GEMMs in persistent CTAs over a stream of stages (W12 v8, Q v3, bf16 v3) beside their split-K forms
# (W12 v7, Q v2, bf16 v2): probes of the three new kernels (fp32 product, 1-16 tokens, three captured calls equal
# to the eager one); the fixed cost and streaming rate of all seven kernels on cold weights (and warm on the model
# shapes); the roofline with its one-hot decode checks (every shape, M = 1-16, cuBLAS bf16 and fp8 beside; v5 and v6
# left out); the AR step (bf16 and W12, one token and the 16-row verify) with the W12 linears on v7, then on v8;
# compute-sanitizer memcheck. Writes the JSON of the fixed cost, the roofline and both AR steps to $OUT, the logs,
# probes and plots in one stream_k_logs.tgz.
# Expected time on one H200: ~4 min (measured 180-240 s over three runs with the library carried; torch start ~10 s a
# process; probes ~10 s each; fixed cost ~60 s; roofline ~70 s; AR step ~25 s each; sanitizer ~30 s; nvcc 15-25 s when
# build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, probes 20 s each, fixed cost 110 s (budget 90 s), roofline 120 s (budget 100 s), AR steps 75 s each
# (budget 55 s), sanitizer 70 s: at most ~9.5 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_stream_k.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_PDL=1
failed=0
for v in v8 q_v3 bf16_v3; do
  timeout 20 python3 -m benchmarks.kernels.bench_roofline --probe "$v" --out "$LOGS/${v}_probe.json" > "$LOGS/${v}_probe.log" 2>&1
  rc=$?
  echo "$v probe: exit $rc ($(tail -n 1 "$LOGS/${v}_probe.log"))"
  [ "$rc" -eq 0 ] || failed=1
done
if [ "$failed" -ne 0 ]; then  # a kernel that is wrong or hangs: the logs, and none of the timed runs
  tail -n 30 "$LOGS"/*_probe.log
  tar -czf "$LOGS/../stream_k_logs.tgz" -C "$LOGS" . && mv "$LOGS/../stream_k_logs.tgz" "$OUT/"
  exit 1
fi
timeout 110 python3 -m benchmarks.kernels.bench_fixed_cost --budget-s 90 --out "$OUT/fixed_cost_stream_k.json" > "$LOGS/fixed_cost.log" 2>&1
echo "fixed cost: exit $?"
timeout 120 python3 -m benchmarks.kernels.bench_roofline --budget-s 100 --skip-variant v5 --skip-variant v6 \
  --out "$OUT/roofline_stream_k.json" > "$LOGS/roofline.log" 2>&1
echo "roofline: exit $? ($(grep -c '^qwen3' "$LOGS/roofline.log") table rows)"
export SPECDEC_W12_CUDA_VARIANT=v7
timeout 75 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 55 --out "$OUT/ar_step_v7.json" > "$LOGS/ar_step_v7.log" 2>&1
echo "AR step, W12 v7: exit $?"
export SPECDEC_W12_CUDA_VARIANT=v8
timeout 75 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 55 --out "$OUT/ar_step_v8.json" > "$LOGS/ar_step_v8.log" 2>&1
echo "AR step, W12 v8: exit $?"
unset SPECDEC_W12_CUDA_VARIANT
if command -v compute-sanitizer >/dev/null; then
  timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --sanitize \
    --skip-variant v5 --skip-variant v6 > "$LOGS/sanitize.log" 2>&1
  echo "compute-sanitizer memcheck: exit $? (0 = clean, 9 = errors, 124 = timed out); $(tail -n 1 "$LOGS/sanitize.log")"
fi
mv "$OUT"/*.png "$LOGS/" 2>/dev/null
tar -czf "$LOGS/../stream_k_logs.tgz" -C "$LOGS" . && mv "$LOGS/../stream_k_logs.tgz" "$OUT/"
echo "=== roofline: decode-check lines with a False: $(grep -E '^decode check' "$LOGS/roofline.log" | grep -c False) of $(grep -cE '^decode check' "$LOGS/roofline.log") ==="
grep -E '^decode check' "$LOGS/roofline.log" | grep False | head -n 4
echo "=== fixed cost ==="
grep -E "^(cublas|cuda)_" "$LOGS/fixed_cost.log" | head -n 28
for v in v7 v8; do
  echo "=== AR step, W12 $v ==="
  grep -E "^AR step|^verify step" "$LOGS/ar_step_$v.log"
done
