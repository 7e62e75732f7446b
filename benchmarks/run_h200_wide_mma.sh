#!/usr/bin/env bash
# The wide W12 / Q kernels after the split epilogue's rewrite (float4 partial tiles, the last CTA loading every other
# split's before it sums; the Q kernel one wgmma of n = 32 NB a k16 step, W12 NB of n = 32), in both consumer loops
# ($SPECDEC_WIDE_PIPELINE 0 / 1; the one-set loop with its default two stage groups up to 64 rows, the pipelined one
# with one), on the Qwen3-8B linears at 32 / 64 / 128 rows beside cuBLAS bf16 and the Triton
# W12 / Q kernels, each call's checks first; the lean 8B target's 64-row verify step; then ncu's stall samples by SASS
# line of one W12 and one Q wide call at 32 and 128 rows (8B o).
# Expected time on one H200: ~4 min (each kernel call ~40 s, the AR-step call ~20 s, the ncu source page ~60 s; an
# estimate from the H100 calls of its first form: this form has not run yet).
# Caps: 2 x 70 + 60 + 150 = 350 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_mma.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_mma_build.log"
export SPECDEC_PDL=1
unset SPECDEC_WIDE_GEMM
KERNELS=cublas_bf16,cuda_w12_wide,cuda_q_wide,triton_w12,triton_q
for pipe in 0 1; do
  export SPECDEC_WIDE_PIPELINE=$pipe
  timeout 70 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 32,64,128 --kernels $KERNELS \
    --budget-s 45 --out "$OUT/wide_pipe$pipe.json" > "$OUT/wide_pipe$pipe.log" 2>&1
  echo "wide kernels, SPECDEC_WIDE_PIPELINE=$pipe: exit $?"
done
export SPECDEC_WIDE_PIPELINE=0
timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 30 \
  --out "$OUT/ar_step_verify64.json" > "$OUT/ar_step_verify64.log" 2>&1
echo "AR step, verify 64 rows: exit $?"
NCU_SOURCE=(--clock-control none --profile-from-start off --section SourceCounters --section WarpStateStats --page source --print-source sass --csv)
timeout 150 ncu "${NCU_SOURCE[@]}" python3 -m benchmarks.kernels.probe_wide --rows 32,128 --out "$OUT/probe_wide.json" \
  > "$OUT/wide_source.csv" 2> "$OUT/wide_source.err"
echo "ncu source page: exit $?"
for pipe in 0 1; do
  echo "=== SPECDEC_WIDE_PIPELINE=$pipe (us and x cuBLAS bf16: cuBLAS, W12 wide, Q wide, Triton W12, Triton Q) ==="
  grep -E "^checks|FAILED" "$OUT/wide_pipe$pipe.log" | head -4
  tail -n 15 "$OUT/wide_pipe$pipe.log" | grep -E "^qwen3"
done
echo "=== AR step ==="
grep -E "^AR step (bf16|w12):|^verify step" "$OUT/ar_step_verify64.log"
