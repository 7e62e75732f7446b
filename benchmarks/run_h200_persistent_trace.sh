#!/usr/bin/env bash
# Where the 1-16 token persistent tensor-map kernel's time goes (tma_stream_k_kernel: 64-row blocks, one equal run of
# stages a CTA), from a build with -DSPECDEC_WIDE_TRACE=1 (benchmarks/kernels/wide_trace.py, kinds bf16_v3, w12_v8,
# q_v3): each CTA's K loops, waits, segment epilogues, the rest of its run, the sums it owes after it and when its
# producer issued its last copy, at 1, 8 and 16 tokens, on the 32B qkv (the worst bf16 call of the goals) and the 8B
# gate_up (a multi-wave call), without programmatic launch as the goals time them; the traced build's products are
# checked against float32 in each case. With FLAGS (nvcc -D switches of skinny_gemm.cu), the same cases first with the
# library built with -DSPECDEC_WIDE_TRACE=1 FLAGS (build/wide_trace_flagged.so), labelled `flagged`, then the
# shipped one's, labelled `shipped`. KERNEL=rows traces the row tiles instead (tma_rows_kernel: 16-row CTAs over the
# whole of K, the one-wave calls' kernel; kinds bf16_v4, w12_v9, q_v4): each CTA's loop, its warps' lags, its sums and
# store, on the 8B qkv, o and down at 1, 8 and 16 tokens (output files persistent_trace_rows_*).
# Expected time on one H200: ~1 min, ~2 min with FLAGS (an H100 took 19-30 s without FLAGS, the library carried; nvcc
# ~45 s a traced library build/ lacks; torch start ~10 s a process, the encodings and cold copies, 9 traced calls a
# case: ~10 s a model and linear).
# Caps: 90 s a build, 90 s a model and linear.
# Usage (repo root, on the GPU machine): [KERNEL=rows] bash benchmarks/run_h200_persistent_trace.sh [FLAGS]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
FLAGS=${1:-}
KERNEL=${KERNEL:-persistent}
case $KERNEL in
  persistent) cases="qwen3-32b:qkv qwen3-8b:gate_up" kinds=bf16_v3,w12_v8,q_v3 prefix=persistent_trace ;;
  rows) cases="qwen3-8b:qkv qwen3-8b:o qwen3-8b:down" kinds=bf16_v4,w12_v9,q_v4 prefix=persistent_trace_rows ;;
  *) echo "KERNEL: expected persistent or rows, got $KERNEL" >&2; exit 2 ;;
esac
source benchmarks/cuda_kernels.sh
build_traced_libraries "$FLAGS" "$OUT/persistent_trace_build"
labels="shipped"
[ -n "$FLAGS" ] && labels="flagged shipped"
unset SPECDEC_W12_CUDA_VARIANT SPECDEC_Q_CUDA_VARIANT SPECDEC_BF16_CUDA_VARIANT
export SPECDEC_PDL=0
for label in $labels; do
  case $label in
    flagged) export SPECDEC_CUDA_KERNELS=build/wide_trace_flagged.so ;;
    *) export SPECDEC_CUDA_KERNELS=build/wide_trace.so ;;
  esac
  for case in $cases; do
    model=${case%%:*} linear=${case##*:}
    timeout 90 python3 -m benchmarks.kernels.wide_trace --models "$model" --linears "$linear" --rows 1,8,16 \
      --kinds "$kinds" --budget-s 70 --out "$OUT/${prefix}_${label}_${model}_$linear.json" \
      > "$OUT/${prefix}_${label}_${model}_$linear.log" 2>&1
    echo "trace, $label, $model $linear: exit $?"
  done
done
[ -n "$FLAGS" ] && echo "$FLAGS" > "$OUT/${prefix}_flags.txt"
unset SPECDEC_CUDA_KERNELS SPECDEC_PDL
for label in $labels; do
  for case in $cases; do
    model=${case%%:*} linear=${case##*:}
    echo "=== $label: $model $linear ==="
    grep -E "^(model|  persistent|qwen3|FAILED)" "$OUT/${prefix}_${label}_${model}_$linear.log"
  done
done
