#!/usr/bin/env bash
# Where a kernel of the captured decode step lets the next one start, and the next GEMM's weights prefetched into the
# L2 while the kernels before it run (specdec/kernels/launch.py), in one call. Probes of the tensor-map kernels under
# $SPECDEC_PDL "early" with a prefetch budget (fp32 product, three captured calls equal to the eager one); the AR step
# of the Qwen3-8B-shaped lean target (bf16, bf16 with skinny linears and W12, one token and the 16-row verify) under
# four settings, twice in turn: "1" (the element-wise kernels wait, then signal; a GEMM signals after its K loop),
# "early" (they signal first; a GEMM's producer at its last copy), "early" with $SPECDEC_L2_PREFETCH_MB 16 and 32 (a
# one-wave row-tile GEMM prefetches the stages past its ring into the L2 before its wait). The kernels alone, by
# mode: run_h200_signal_kernels.sh. Writes the AR steps' JSON (eight: more than a call brings back one by one) and the
# logs in one signal_logs.tgz in $OUT.
# Expected time on one H200: ~5 min (torch start ~8 s a process; probes ~13 s each; AR steps ~25 s each; nvcc 15-25 s
# when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, probes 25 s each, AR steps 50 s each (budget 35 s): at most ~8.9 min.
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
  timeout 50 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 35 --out "$LOGS/ar_step_$name.json" \
    > "$LOGS/ar_step_$name.log" 2>&1
  echo "AR step $name: exit $?"
done
tar -czf "$LOGS/../signal_logs.tgz" -C "$LOGS" . && mv "$LOGS/../signal_logs.tgz" "$OUT/"
for f in "$LOGS"/ar_step_*.log; do
  echo "=== $(basename "$f" .log) ==="
  grep -E "^AR step (bf16|w12|greedy)|^AR step bf16 with skinny|^verify step" "$f"
done
