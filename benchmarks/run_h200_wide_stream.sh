#!/usr/bin/env bash
# The wide kernels' ring without math (bench_stream_layout's wide_w12 / wide_q / wide128_w12 layouts beside the others,
# every probe launch checked: each byte read once) on the 8B shapes, then the wide GEMMs at 64 rows beside cuBLAS bf16
# in the same call (benchmarks/NOTES.md, "The wide kernels' ring without math").
# Expected time on one H200: ~1.5 min (the probe ~45 s with its build carried in build/, the GEMMs ~20 s).
# Caps: 120 + 60 = 180 s, plus the builds (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_stream.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_stream_build.log"
export SPECDEC_PDL=0 SPECDEC_WIDE_PIPELINE=0 SPECDEC_WIDE_CTAS=1
unset SPECDEC_WIDE_GEMM
timeout 120 python3 -m benchmarks.kernels.bench_stream_layout --no-gemms --out "$OUT/wide_stream.json" > "$OUT/wide_stream.log" 2>&1
echo "stream probe: exit $?"
timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 64 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide \
  --budget-s 40 --out "$OUT/wide_stream_gemms.json" > "$OUT/wide_stream_gemms.log" 2>&1
echo "wide GEMMs: exit $?"
grep -E "checks|FAILED|Error" "$OUT/wide_stream.log" | head -5
grep -E "^copy|^shape|(rows_w12|rows_q|rows16_w12|wide_w12|wide_q|wide128_w12) .* plan " "$OUT/wide_stream.log"
grep -E "^qwen3" "$OUT/wide_stream_gemms.log" | tail -n 5
