#!/usr/bin/env bash
# Two consumer stage groups in the row-tile GEMMs ($SPECDEC_ROW_STAGE_GROUPS 2: eight consumer warps a CTA, warps 0-3 on
# the even stages and 4-7 on the odd ones, for calls whose CTAs all fit at three an SM; specdec/kernels/cuda/README.md,
# "Two stage groups"), against one group, in one call: the row-tile probes under two groups (one-hot exact, three
# captured calls equal to the eager one, the crowded call on one group), compute-sanitizer memcheck over the row-tile
# probes; the fixed cost of cuBLAS bf16 and the default W12, Q and bf16 kernels on the Qwen3-8B and Qwen3-32B shapes at
# 1, 8 and 16 tokens under one then two groups; the AR step (bf16, bf16 with skinny linears and W12, one token and the
# 16-row verify) under one, two, one, two groups (the logits digests must agree). Writes the two fixed costs' JSON
# to $OUT, the AR steps, probes, logs and plots in one stage_groups_logs.tgz.
# Expected time on one H200: ~6 min (torch start ~8 s a process; probes ~13 s each; memcheck ~30 s; fixed cost ~60 s a
# setting; AR steps ~25 s each; nvcc 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, probes 25 s each, memcheck 60 s, fixed cost 90 s a setting (budget 70 s), AR steps 40 s each
# (budget 28 s): at most ~8.9 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_stage_groups.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_ROW_STAGE_GROUPS=2
failed=0
for v in v9 q_v4 bf16_v4; do
  timeout 25 python3 -m benchmarks.kernels.bench_roofline --probe "$v" --out "$LOGS/${v}_probe.json" > "$LOGS/${v}_probe.log" 2>&1
  rc=$?
  echo "$v probe, two stage groups: exit $rc ($(tail -n 1 "$LOGS/${v}_probe.log"))"
  [ "$rc" -eq 0 ] || failed=1
done
if [ "$failed" -ne 0 ]; then  # a kernel that is wrong or hangs: the logs, and none of the timed runs
  tail -n 30 "$LOGS"/*_probe.log
  tar -czf "$LOGS/../stage_groups_logs.tgz" -C "$LOGS" . && mv "$LOGS/../stage_groups_logs.tgz" "$OUT/"
  exit 1
fi
if command -v compute-sanitizer >/dev/null; then
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --probe v9 \
    --out "$LOGS/v9_probe_memcheck.json" > "$LOGS/memcheck.log" 2>&1
  echo "compute-sanitizer memcheck, W12 v9 probe, two stage groups: exit $? (0 = clean, 9 = errors, 124 = timed out)"
fi
for groups in 1 2; do
  export SPECDEC_ROW_STAGE_GROUPS=$groups
  timeout 90 python3 -m benchmarks.kernels.bench_fixed_cost --kernels cublas_bf16,cuda_w12_v10,cuda_q_v5,cuda_bf16_v5 --no-read-floor \
    --budget-s 70 --out "$OUT/fixed_cost_stage_groups_$groups.json" > "$LOGS/fixed_cost_stage_groups_$groups.log" 2>&1
  echo "fixed cost, stage groups $groups: exit $?"
done
run=0
for groups in 1 2 1 2; do
  run=$((run + 1))
  export SPECDEC_ROW_STAGE_GROUPS=$groups
  timeout 40 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 28 --out "$LOGS/ar_step_${run}_groups_$groups.json" \
    > "$LOGS/ar_step_${run}_groups_$groups.log" 2>&1
  echo "AR step $run, stage groups $groups: exit $?"
done
mv "$OUT"/*.png "$LOGS/" 2>/dev/null
tar -czf "$LOGS/../stage_groups_logs.tgz" -C "$LOGS" . && mv "$LOGS/../stage_groups_logs.tgz" "$OUT/"
for f in "$LOGS"/fixed_cost_*.log; do
  echo "=== $(basename "$f" .log) ==="
  grep -E "^(cublas|cuda)_" "$f" | head -n 40
done
for f in "$LOGS"/ar_step_*.log; do
  echo "=== $(basename "$f" .log) ==="
  grep -E "^AR step (bf16|w12|greedy)|^AR step bf16 with skinny|^verify step" "$f"
done
