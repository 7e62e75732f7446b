#!/usr/bin/env bash
# Each W12 linear's GPU time inside the lean 8B target's captured 64-row verify step (profile_verify_linears), with one
# and two wide CTAs an SM ($SPECDEC_WIDE_CTAS): set beside the chains of identical calls of `run_h200_wide_ctas.sh` /
# `run_h200_wide_isolated.sh`, which linear's time changes in the step; then the same linears alone in the step's
# order (one graph, nothing between them); then the one-token decode step's linears (W12, bf16 through cuBLAS and
# through the skinny GEMM) against their read floors (where the AR step's 1.25-1.29x over its floor goes), without
# programmatic launch: under it a kernel starts early behind the one before and its span includes the wait.
# Expected time on one H200: ~3 min (the first four calls 70 s on an H100 on 2026-12-06, each one-token call ~16 s).
# Caps: 7 x 60 = 420 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_verify_linears.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/verify_linears_build.log"
export SPECDEC_PDL=1 SPECDEC_WIDE_PIPELINE=0
unset SPECDEC_WIDE_GEMM
for ctas in 2 1; do
  export SPECDEC_WIDE_CTAS=$ctas
  timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --rows 64 --out "$OUT/verify_linears_ctas$ctas.json" > "$OUT/verify_linears_ctas$ctas.log" 2>&1
  echo "verify step linears, 64 rows, SPECDEC_WIDE_CTAS=$ctas: exit $?"
done
for ctas in 2 1; do
  export SPECDEC_WIDE_CTAS=$ctas
  timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --rows 64 --linears-only --out "$OUT/verify_linears_only_ctas$ctas.json" > "$OUT/verify_linears_only_ctas$ctas.log" 2>&1
  echo "the step's linears alone, 64 rows, SPECDEC_WIDE_CTAS=$ctas: exit $?"
done
unset SPECDEC_WIDE_CTAS
export SPECDEC_PDL=0
for weights in w12 bf16 bf16_skinny; do
  timeout 60 python3 -m benchmarks.kernels.profile_verify_linears --rows 1 --weights $weights --out "$OUT/step_linears_$weights.json" > "$OUT/step_linears_$weights.log" 2>&1
  echo "the one-token step's linears, $weights: exit $?"
done
for weights in w12 bf16 bf16_skinny; do
  tail -n 3 "$OUT/step_linears_$weights.log"
done
for ctas in 2 1; do
  echo "=== SPECDEC_WIDE_CTAS=$ctas ==="
  tail -n 3 "$OUT/verify_linears_ctas$ctas.log"
  tail -n 3 "$OUT/verify_linears_only_ctas$ctas.log"
done
