#!/usr/bin/env bash
# Two consumer stage groups in the Q view's row-tile GEMMs, the default at up to 8 tokens where every CTA fits at three
# an SM ($SPECDEC_ROW_STAGE_GROUPS unset; `1` turns it off; specdec/kernels/cuda/README.md, "Two stage groups"), against
# one group, in one call: the Q v4 probe under each setting (one-hot exact, three captured calls equal to the eager one,
# the crowded call), compute-sanitizer memcheck over the default's probe; the fixed cost of cuBLAS bf16 and the default
# Q kernel (v5) on the Qwen3-8B and Qwen3-32B shapes at 1, 8 and 16 tokens under one group, the default, one group, the
# default. Writes the four fixed costs' JSON to $OUT, the probes, logs and plots in one stage_groups_logs.tgz.
# Expected time on one H200: ~2 min (torch start ~8 s a process; probes ~13 s each; memcheck ~30 s; fixed cost ~15 s a
# setting with two kernels; nvcc 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, probes 25 s each, memcheck 60 s, fixed cost 60 s a setting (budget 40 s): at most ~6.2 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_stage_groups.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
failed=0
for groups in default 1; do
  if [ "$groups" = default ]; then unset SPECDEC_ROW_STAGE_GROUPS; else export SPECDEC_ROW_STAGE_GROUPS=$groups; fi
  timeout 25 python3 -m benchmarks.kernels.bench_roofline --probe q_v4 --out "$LOGS/q_v4_probe_$groups.json" > "$LOGS/q_v4_probe_$groups.log" 2>&1
  rc=$?
  echo "q_v4 probe, stage groups $groups: exit $rc ($(tail -n 1 "$LOGS/q_v4_probe_$groups.log"))"
  [ "$rc" -eq 0 ] || failed=1
done
unset SPECDEC_ROW_STAGE_GROUPS
if [ "$failed" -ne 0 ]; then  # a kernel that is wrong or hangs: the logs, and none of the timed runs
  tail -n 30 "$LOGS"/*_probe_*.log
  tar -czf "$LOGS/../stage_groups_logs.tgz" -C "$LOGS" . && mv "$LOGS/../stage_groups_logs.tgz" "$OUT/"
  exit 1
fi
if command -v compute-sanitizer >/dev/null; then
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --probe q_v4 \
    --out "$LOGS/q_v4_probe_memcheck.json" > "$LOGS/memcheck.log" 2>&1
  echo "compute-sanitizer memcheck, Q v4 probe, default stage groups: exit $? (0 = clean, 9 = errors, 124 = timed out)"
fi
run=0
for groups in 1 default 1 default; do
  run=$((run + 1))
  if [ "$groups" = default ]; then unset SPECDEC_ROW_STAGE_GROUPS; else export SPECDEC_ROW_STAGE_GROUPS=$groups; fi
  timeout 60 python3 -m benchmarks.kernels.bench_fixed_cost --kernels cublas_bf16,cuda_q_v5 --no-read-floor --budget-s 40 \
    --out "$OUT/fixed_cost_stage_groups_${run}_$groups.json" > "$LOGS/fixed_cost_stage_groups_${run}_$groups.log" 2>&1
  echo "fixed cost $run, stage groups $groups: exit $?"
done
mv "$OUT"/*.png "$LOGS/" 2>/dev/null
tar -czf "$LOGS/../stage_groups_logs.tgz" -C "$LOGS" . && mv "$LOGS/../stage_groups_logs.tgz" "$OUT/"
for f in "$LOGS"/fixed_cost_*.log; do
  echo "=== $(basename "$f" .log) ==="
  grep -E "^qwen3-(8b|32b) (qkv|o|down) .*cuda_q_v5" "$f"
done
