#!/usr/bin/env bash
# What x's box costs the 1-16 token row-tile kernels (tma_rows_kernel: 16 weight rows a CTA over the whole of K, x's
# [M][256] box a stage from the L2; at 16 tokens 8 KB of x against 6 KB of W12 weights, 4 KB of Q): the shipped library
# against one built with -DSPECDEC_WIDE_ABLATE=64 (their ring loads the weights only; products wrong by design,
# timed unchecked), each timing the 8B linears at 1, 8 and 16 tokens (bench_fixed_cost: cuBLAS bf16, W12 v10, Q v5,
# bf16 v5, cold, no programmatic launch) twice in alternation (shipped, ablated, shipped, ablated).
# Expected time on one H200: ~2.5 min (each process ~30 s: torch start ~10 s, the 8B shapes' encodings and cold copies;
# nvcc ~30 s a library not carried in build/). Caps: 4 x 60 = 240 s, plus the builds (90 s each; carry
# build/specdec_cuda_kernels.so and build/rows_no_x.so built with `-Xfatbin -compress-all`, ~2 MB each, to skip them).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_rows_x.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/rows_x_build.log"
build_cuda_library_with "-DSPECDEC_WIDE_ABLATE=64" build/rows_no_x.so 90 "$OUT/rows_x_build_ablated.log"
unset SPECDEC_W12_CUDA_VARIANT SPECDEC_Q_CUDA_VARIANT SPECDEC_BF16_CUDA_VARIANT
export SPECDEC_PDL=0
for pass in shipped1 no_x1 shipped2 no_x2; do
  case $pass in shipped*) export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so ;; *) export SPECDEC_CUDA_KERNELS=build/rows_no_x.so ;; esac
  timeout 60 python3 -m benchmarks.kernels.bench_fixed_cost --models qwen3-8b --no-read-floor --budget-s 40 \
    --kernels cublas_bf16,cuda_w12_v10,cuda_q_v5,cuda_bf16_v5 --out "$OUT/rows_x_$pass.json" > "$OUT/rows_x_$pass.log" 2>&1
  echo "8B linears at 1-16 tokens, $pass: exit $?"
done
unset SPECDEC_CUDA_KERNELS SPECDEC_PDL
for pass in shipped1 no_x1 shipped2 no_x2; do
  echo "=== $pass ==="
  grep -E "^qwen3-8b [a-z_]+ +[0-9]+ +cuda_" "$OUT/rows_x_$pass.log"
done
