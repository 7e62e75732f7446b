#!/usr/bin/env bash
# The wide W12 / Q kernels part by part, in one call: the shipped library, then libraries built with
# -DSPECDEC_WIDE_ABLATE=A (bits of what the wide kernels leave out: 1 the decode, 2 the MMAs, 4 x's box, 8 the
# epilogue, 16 W12's escape warps): 3 (the ring with x, barriers, shared loads, escape warps, epilogue), 7 (also no
# x), 11 (x kept, no epilogue), 15 (the ring of the weights and the escape warps only), 19 (3 without the escape
# warps), 31 (the weights' ring alone); or the values given as arguments (32: the escape warps without their loads of
# x). Each times the wide kernels on the 8B and 32B linears at 32 and 64 rows beside
# cuBLAS bf16, without programmatic launch; the ablated ones unchecked (wrong products by design), the shipped one
# after its checks.
# Expected time on one H200: ~3.5 min (nvcc ~40 s for the six libraries not carried in build/, built at once; each
# timing ~25 s with torch's start, from the H100 call of 2026-12-06). Caps: 7 x 60 = 420 s, plus the builds (90 s at
# most, at once).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_parts.sh [A ...]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_parts_build.log"
ablations=${*:-3 7 11 15 19 31}
for a in $ablations; do
  [ "$a" = 0 ] && continue
  build_cuda_library_with "-DSPECDEC_WIDE_ABLATE=$a" "build/wide_ablate$a.so" 90 "$OUT/wide_parts_build_$a.log" &
done
wait
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_SPLIT_WORKSPACE
export SPECDEC_PDL=0
for a in 0 $ablations; do
  if [ "$a" = 0 ]; then export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so; else export SPECDEC_CUDA_KERNELS=build/wide_ablate$a.so; fi
  timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --rows 32,64 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide \
    --budget-s 40 --out "$OUT/wide_parts_$a.json" > "$OUT/wide_parts_$a.log" 2>&1
  echo "wide kernels, SPECDEC_WIDE_ABLATE=$a: exit $?"
done
unset SPECDEC_CUDA_KERNELS SPECDEC_PDL
grep -E "^checks|FAILED" "$OUT/wide_parts_0.log" | head -3
for a in 0 $ablations; do
  echo "=== SPECDEC_WIDE_ABLATE=$a ==="
  grep -E "^qwen3-(8b|32b) (gate_up|o|lm_head) (32|64):" "$OUT/wide_parts_$a.log"
done
