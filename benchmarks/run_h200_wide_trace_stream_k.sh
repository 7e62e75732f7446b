#!/usr/bin/env bash
# Where the persistent wide kernel's time goes against the split-K one's, from a build with -DSPECDEC_WIDE_TRACE=1
# (benchmarks/kernels/wide_trace.py): the 8B lm_head and gate_up at 64 rows, W12 and Q, every wide call persistent
# ($SPECDEC_WIDE_STREAM_K=1: each CTA's K loops, waits, segment epilogues, the rest of its run and the sums it owes
# after it, summed over its segments) and then split-K (0: each CTA's phases), both without programmatic launch; the
# traced build's products are checked against float32 in each case.
# Expected time on one H200: ~2 min (each process ~40-60 s: torch start ~10 s, the lm_head's W12 encoding and cold
# copies, 9 traced calls a case; nvcc ~45 s where build/ lacks the traced library). Caps: 2 x 90 = 180 s, plus the
# build (90 s; carry build/wide_trace.so built with `-Xfatbin -compress-all`, ~2 MB, to skip it).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_trace_stream_k.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_library_with "-DSPECDEC_WIDE_TRACE=1" build/wide_trace.so 90 "$OUT/wide_trace_stream_k_build.log"
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_SPLIT_WORKSPACE SPECDEC_WIDE_PIPELINE SPECDEC_WIDE_CTAS
export SPECDEC_PDL=0
export SPECDEC_CUDA_KERNELS=build/wide_trace.so
for mode in 1 0; do
  export SPECDEC_WIDE_STREAM_K=$mode
  timeout 90 python3 -m benchmarks.kernels.wide_trace --linears lm_head,gate_up --rows 64 --kinds w12,q --budget-s 60 \
    --out "$OUT/wide_trace_stream_k_$mode.json" > "$OUT/wide_trace_stream_k_$mode.log" 2>&1
  echo "trace, SPECDEC_WIDE_STREAM_K=$mode: exit $?"
done
unset SPECDEC_CUDA_KERNELS SPECDEC_WIDE_STREAM_K SPECDEC_PDL
for mode in 1 0; do
  echo "=== SPECDEC_WIDE_STREAM_K=$mode ==="
  grep -E "^(model|  persistent|qwen3|FAILED)" "$OUT/wide_trace_stream_k_$mode.log"
done
