#!/usr/bin/env bash
# DRAM bytes read and written by each wide W12 launch (ncu: dram__bytes_read.sum, dram__bytes_write.sum,
# gpu__time_duration.sum; one pass, the graph's kernel nodes profiled one by one) for the lean 8B target's linears
# alone at 64 rows, in the step's order and grouped by linear, with the shared split-K workspace: whether the launches
# of the step's order write more to DRAM than the grouped ones (what is left of the order's cost, benchmarks/NOTES.md,
# "One split-K workspace: measured").
# Expected time on one H200: ~2 min (two profiles of ~145 launches a replay, one metric pass each, ~40 s each with
# start-up; an estimate: this form has not run yet).
# Caps: 2 x 100 = 200 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_order_dram.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_order_dram_build.log"
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_SPLIT_WORKSPACE
export SPECDEC_PDL=0
NCU_DRAM=(--kernel-name regex:tma_wide --launch-count 300 --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum --csv --page raw)
for order in step by-linear; do
  timeout 100 ncu "${NCU_DRAM[@]}" python3 -m benchmarks.kernels.profile_verify_linears --rows 64 --linears-only \
    --order $order --steps 1 --launch-only --out "$OUT/order_dram_$order.json" > "$OUT/order_dram_$order.csv" 2> "$OUT/order_dram_$order.err"
  echo "ncu DRAM bytes, the linears alone in the $order order: exit $?"
done
for order in step by-linear; do
  echo "=== $order: profiled launches (the CSV's rows; summed by linear on the CPU machine) ==="
  grep -c "tma_wide" "$OUT/order_dram_$order.csv"
  tail -n 2 "$OUT/order_dram_$order.err"
done
