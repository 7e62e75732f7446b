#!/usr/bin/env bash
# Where a kernel of the captured decode step lets the next one start, and the next GEMM's weights prefetched into the
# L2 while the kernels before it run (specdec/kernels/launch.py), in one call. Probes of the tensor-map kernels under
# $SPECDEC_PDL "early" with a prefetch budget (fp32 product, three captured calls equal to the eager one); the AR step
# of the Qwen3-8B-shaped lean target (bf16, bf16 with skinny linears and W12, one token and the 16-row verify) under
# four settings, twice in turn: "1" (the element-wise kernels wait, then signal; a GEMM signals after its K loop),
# "early" (they signal first; a GEMM's producer at its last copy), "early" with $SPECDEC_L2_PREFETCH_MB 16 and 32 (a
# one-wave row-tile GEMM prefetches the stages past its ring into the L2 before its wait); then the timing-order check
# of two default kernels against their fallbacks (bench_fixed_cost times a shape's kernels in the order --kernels
# names them: both orders, one process each, default settings). Writes the AR steps' JSON to $OUT, the logs and the
# order check's JSON and plots in one signal_logs.tgz.
# Expected time on one H200: ~6 min (torch start ~8 s a process; probes ~13 s each; AR steps ~25 s each; the order
# check ~20 s a process; nvcc 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, probes 25 s each, AR steps 45 s each (budget 30 s), order check 40 s a process (budget 25 s): at
# most ~9.6 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_signal.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_PDL=early SPECDEC_L2_PREFETCH_MB=32
failed=0
for v in v8 v9 bf16_v4; do
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
for setting in 1:0 early:0 early:16 early:32 1:0 early:0 early:16 early:32; do
  run=$((run + 1))
  export SPECDEC_PDL=${setting%:*} SPECDEC_L2_PREFETCH_MB=${setting#*:}
  name="${run}_pdl_${SPECDEC_PDL}_l2_${SPECDEC_L2_PREFETCH_MB}"
  timeout 45 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 30 --out "$OUT/ar_step_$name.json" \
    > "$LOGS/ar_step_$name.log" 2>&1
  echo "AR step $name: exit $?"
done
export SPECDEC_PDL=1 SPECDEC_L2_PREFETCH_MB=0
for order in cuda_w12_v10,cuda_w12_v8,cuda_q_v5,cuda_q_v2 cuda_q_v2,cuda_q_v5,cuda_w12_v8,cuda_w12_v10; do
  name=$(echo "$order" | cut -d, -f1)
  timeout 40 python3 -m benchmarks.kernels.bench_fixed_cost --models qwen3-8b --kernels "$order" --no-read-floor --budget-s 25 \
    --out "$LOGS/fixed_cost_order_$name.json" > "$LOGS/fixed_cost_order_$name.log" 2>&1
  echo "order check, $order: exit $?"
done
tar -czf "$LOGS/../signal_logs.tgz" -C "$LOGS" . && mv "$LOGS/../signal_logs.tgz" "$OUT/"
for f in "$LOGS"/ar_step_*.log; do
  echo "=== $(basename "$f" .log) ==="
  grep -E "^AR step (bf16|w12|greedy)|^AR step bf16 with skinny|^verify step" "$f"
done
for f in "$LOGS"/fixed_cost_order_*.log; do
  echo "=== $(basename "$f" .log) ==="
  grep -E "^cuda_" "$f" | head -n 24
done
