#!/usr/bin/env bash
# Where a kernel of the captured decode step lets the next one start ($SPECDEC_PDL, specdec/kernels/launch.py): "1"
# (the element-wise kernels signal before they wait, a tensor-map GEMM's producer once it has issued its last copy)
# against "late" (the element-wise kernels signal after their wait, a GEMM after its K loop), in one call: probes of
# the tensor-map kernels under "1" (fp32 product, three captured calls equal to the eager one); the AR step of the
# Qwen3-8B-shaped lean target (bf16, bf16 with skinny linears and W12, one token and the 16-row verify) four times,
# late / 1 / late / 1; the fixed cost of cuBLAS and the default kernels on the 8B shapes (20 cold calls back to back
# in a graph) under each mode; and the timing-order check of two default kernels against their fallbacks
# (bench_fixed_cost times a shape's kernels in the order --kernels names them: both orders, one process each).
# Writes the AR steps' and the fixed costs' JSON to $OUT, the logs, plots and the order check's JSON in one
# signal_logs.tgz.
# Expected time on one H200: ~5 min (torch start ~8 s a process; probes ~13 s each; AR steps ~25 s each; fixed cost
# ~25 s a mode, the order check ~20 s a process; nvcc 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, probes 25 s each, AR steps 60 s each (budget 40 s), fixed cost 50 s a mode (budget 35 s), order
# check 40 s a process (budget 25 s): at most ~9.7 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_signal.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_PDL=1
failed=0
for v in v7 v8 v9 bf16_v4; do
  timeout 25 python3 -m benchmarks.kernels.bench_roofline --probe "$v" --out "$LOGS/${v}_probe.json" > "$LOGS/${v}_probe.log" 2>&1
  rc=$?
  echo "$v probe: exit $rc ($(tail -n 1 "$LOGS/${v}_probe.log"))"
  [ "$rc" -eq 0 ] || failed=1
done
if [ "$failed" -ne 0 ]; then  # a kernel that is wrong or hangs: the logs, and none of the timed runs
  tail -n 30 "$LOGS"/*_probe.log
  tar -czf "$LOGS/../signal_logs.tgz" -C "$LOGS" . && mv "$LOGS/../signal_logs.tgz" "$OUT/"
  exit 1
fi
run=0
for mode in late 1 late 1; do
  run=$((run + 1))
  export SPECDEC_PDL=$mode
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 40 --out "$OUT/ar_step_${run}_$mode.json" \
    > "$LOGS/ar_step_${run}_$mode.log" 2>&1
  echo "AR step $run, SPECDEC_PDL=$mode: exit $?"
done
KERNELS=cublas_bf16,cuda_w12_v10,cuda_q_v5,cuda_bf16_v5
for mode in late 1; do
  export SPECDEC_PDL=$mode
  timeout 50 python3 -m benchmarks.kernels.bench_fixed_cost --models qwen3-8b --kernels "$KERNELS" --no-read-floor --budget-s 35 \
    --out "$OUT/fixed_cost_$mode.json" > "$LOGS/fixed_cost_$mode.log" 2>&1
  echo "fixed cost, SPECDEC_PDL=$mode: exit $?"
done
export SPECDEC_PDL=1
for order in cuda_w12_v10,cuda_w12_v8,cuda_q_v5,cuda_q_v2 cuda_q_v2,cuda_q_v5,cuda_w12_v8,cuda_w12_v10; do
  name=$(echo "$order" | cut -d, -f1)
  timeout 40 python3 -m benchmarks.kernels.bench_fixed_cost --models qwen3-8b --kernels "$order" --no-read-floor --budget-s 25 \
    --out "$LOGS/fixed_cost_order_$name.json" > "$LOGS/fixed_cost_order_$name.log" 2>&1
  echo "order check, $order: exit $?"
done
mv "$OUT"/*.png "$LOGS/" 2>/dev/null
tar -czf "$LOGS/../signal_logs.tgz" -C "$LOGS" . && mv "$LOGS/../signal_logs.tgz" "$OUT/"
for f in "$LOGS"/ar_step_*.log; do
  echo "=== $(basename "$f" .log) ==="
  grep -E "^AR step|^verify step" "$f"
done
for f in "$LOGS"/fixed_cost_*.log; do
  echo "=== $(basename "$f" .log) ==="
  grep -E "^(cublas|cuda)_" "$f" | head -n 24
done
