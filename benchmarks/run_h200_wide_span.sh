#!/usr/bin/env bash
# Whether the memory a chain of identical calls walks sets its time: the wide W12 / Q kernels (one and two CTAs an SM,
# $SPECDEC_WIDE_CTAS) and cuBLAS bf16 on the 8B linears at 64 rows, without programmatic launch, over cold copies
# spanning 3x the L2 (the benchmarks' usual) and 100x (up to 64 copies: 1.6 GB for the 8B o, ~5 GB for gate_up),
# 64 calls a graph either way. Against `profile_verify_linears` (the same linears in the verify step's order over
# the model's 6 GB: "Two wide CTAs an SM up to 64 tokens: measured" in benchmarks/NOTES.md).
# Expected time on one H200: ~3 min (an estimate: this runner has not run yet; each call ~30-45 s with its copies).
# Caps: 4 x 60 = 240 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_span.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_span_build.log"
export SPECDEC_PDL=0 SPECDEC_WIDE_PIPELINE=0
unset SPECDEC_WIDE_GEMM
for factor in 100 3; do
  for ctas in 2 1; do
    export SPECDEC_WIDE_CTAS=$ctas
    timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 64 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide --l2-factor $factor --calls 64 --budget-s 40 --out "$OUT/wide_span${factor}_ctas$ctas.json" > "$OUT/wide_span${factor}_ctas$ctas.log" 2>&1
    echo "wide kernels, copies over ${factor}x the L2, SPECDEC_WIDE_CTAS=$ctas: exit $?"
  done
done
for factor in 100 3; do
  for ctas in 2 1; do
    echo "=== copies over ${factor}x the L2, SPECDEC_WIDE_CTAS=$ctas (us and x cuBLAS bf16: cuBLAS, W12 wide, Q wide) ==="
    grep -E "^checks|FAILED" "$OUT/wide_span${factor}_ctas$ctas.log" | head -4
    grep -E "^qwen3" "$OUT/wide_span${factor}_ctas$ctas.log" | tail -n 5
  done
done
