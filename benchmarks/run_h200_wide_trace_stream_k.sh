#!/usr/bin/env bash
# Where the persistent wide kernel's time goes against the split-K one's, from a build with -DSPECDEC_WIDE_TRACE=1
# (benchmarks/kernels/wide_trace.py): the 8B lm_head and gate_up at 64 rows, W12 and Q, every wide call persistent
# ($SPECDEC_WIDE_STREAM_K=1: each CTA's K loops, waits, segment epilogues, the rest of its run and the sums it owes
# after it, summed over its segments) and then split-K (0: each CTA's phases), both without programmatic launch; the
# traced build's products are checked against float32 in each case. With FLAGS (nvcc -D switches of skinny_gemm.cu),
# a third case first: every call persistent with the library built with -DSPECDEC_WIDE_TRACE=1 FLAGS
# (build/wide_trace_flagged.so), labelled `flagged`.
# Expected time on one H200: ~1 min, ~1.5 min with FLAGS (an H100 took ~30 s for the two cases: torch start ~10 s a
# process, the lm_head's W12 encoding and cold copies, 9 traced calls a case; nvcc ~45 s a traced library build/
# lacks). Caps: 3 x 90 = 270 s, plus the builds (90 s each; carry build/wide_trace.so and build/wide_trace_flagged.so
# built with `-Xfatbin -compress-all`, ~2 MB each, to skip them).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_trace_stream_k.sh [FLAGS]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
FLAGS=${1:-}
source benchmarks/cuda_kernels.sh
build_traced_libraries "$FLAGS" "$OUT/wide_trace_stream_k_build"
modes="1 0"
[ -n "$FLAGS" ] && modes="flagged 1 0"
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_SPLIT_WORKSPACE SPECDEC_WIDE_PIPELINE SPECDEC_WIDE_CTAS
export SPECDEC_PDL=0
for mode in $modes; do
  if [ "$mode" = flagged ]; then
    export SPECDEC_CUDA_KERNELS=build/wide_trace_flagged.so SPECDEC_WIDE_STREAM_K=1
  else
    export SPECDEC_CUDA_KERNELS=build/wide_trace.so SPECDEC_WIDE_STREAM_K=$mode
  fi
  timeout 90 python3 -m benchmarks.kernels.wide_trace --linears lm_head,gate_up --rows 64 --kinds w12,q --budget-s 60 \
    --out "$OUT/wide_trace_stream_k_$mode.json" > "$OUT/wide_trace_stream_k_$mode.log" 2>&1
  echo "trace, $mode: exit $?"
done
[ -n "$FLAGS" ] && echo "$FLAGS" > "$OUT/wide_trace_stream_k_flags.txt"
unset SPECDEC_CUDA_KERNELS SPECDEC_WIDE_STREAM_K SPECDEC_PDL
for mode in $modes; do
  echo "=== $mode (1: persistent, 0: split-K, flagged: persistent with FLAGS) ==="
  grep -E "^(model|  persistent|qwen3|FAILED)" "$OUT/wide_trace_stream_k_$mode.log"
done
