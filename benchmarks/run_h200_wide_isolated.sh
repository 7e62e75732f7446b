#!/usr/bin/env bash
# The wide W12 / Q kernels with one and two CTAs an SM ($SPECDEC_WIDE_CTAS) timed without programmatic dependent
# launch ($SPECDEC_PDL=0): each call of a timed chain then starts after the one before has ended, as in a decode step
# whose previous kernel lets nothing start early; beside them cuBLAS bf16 and Triton Q, 8B linears at 32 / 64 rows.
# Against `run_h200_wide_ctas.sh` (the same chains with PDL), what a call's ring fill and epilogue cost when no
# previous call of the same kernel overlaps them.
# Expected time on one H200: ~1 min (45 s on an H100 on 2026-12-06).
# Caps: 2 x 70 = 140 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_isolated.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_isolated_build.log"
export SPECDEC_PDL=0 SPECDEC_WIDE_PIPELINE=0
unset SPECDEC_WIDE_GEMM
for ctas in 2 1; do
  export SPECDEC_WIDE_CTAS=$ctas
  timeout 70 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 32,64 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide,triton_q --budget-s 50 --out "$OUT/wide_isolated_ctas$ctas.json" > "$OUT/wide_isolated_ctas$ctas.log" 2>&1
  echo "wide kernels without PDL, 8B, SPECDEC_WIDE_CTAS=$ctas: exit $?"
done
for ctas in 2 1; do
  echo "=== SPECDEC_PDL=0 SPECDEC_WIDE_CTAS=$ctas (us and x cuBLAS bf16: cuBLAS, W12 wide, Q wide, Triton Q) ==="
  grep -E "^checks|FAILED" "$OUT/wide_isolated_ctas$ctas.log" | head -4
  grep -E "^qwen3" "$OUT/wide_isolated_ctas$ctas.log" | tail -n 10
done
