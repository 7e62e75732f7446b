#!/usr/bin/env bash
# The persistent wide kernel (tma_wide_stream_k_kernel, $SPECDEC_WIDE_STREAM_K) against the split-K one, in one call,
# most needed first: the wide checks and compute-sanitizer memcheck over them with every wide call persistent
# ($SPECDEC_WIDE_STREAM_K=1); the wide kernels (8B and 32B linears, 32 and 64 rows) beside cuBLAS bf16 without
# programmatic launch, split-K (0) then persistent (1), and persistent with BEFORE_SO (a library built from an earlier
# commit, labelled `before`) where one is given; the lean 8B target's 64-row Q-view pass (the two-level verifier's
# first pass, W12 packed) with the split-K kernel (0) and the default rule (auto: its gate_up goes persistent), the
# two taken in turn three times in one process (bench_two_level --alternate: between processes the pass moves more
# than the rule does); then 17, 96 and 128 rows, split-K (0) and auto.
# --kernels-only: the checks, memcheck and the 32 / 64-row timings alone (no passes, no 17 / 96 / 128 rows).
# Expected time on one H200: ~4 min, ~1.5 min with --kernels-only (an H100 took 105 s for the whole; nvcc ~40 s
# where build/ lacks the library; checks ~10-25 s, memcheck ~30-60 s, each timing ~15-35 s, the Q passes ~40-75 s,
# torch start ~10 s a process). Caps: 60 + 90 + 3 x 50 + 120 + 2 x 60 = 540 s (--kernels-only 300 s), plus the
# build where build/ lacks the library (90 s). Two libraries fit the 64 MiB a call carries when built with
# `-Xfatbin -compress-all` (~2 MB each, ~5.4 MB without).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_stream_k.sh [--kernels-only] [BEFORE_SO]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
PASSES=1
if [ "${1:-}" = --kernels-only ]; then
  PASSES=0
  shift
fi
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_stream_k_build.log"
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_SPLIT_WORKSPACE SPECDEC_WIDE_PIPELINE SPECDEC_WIDE_CTAS
export SPECDEC_PDL=0
export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so
export SPECDEC_WIDE_STREAM_K=1
timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/wide_stream_k_checks.json" > "$OUT/wide_stream_k_checks.log" 2>&1
echo "wide checks, persistent: exit $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only \
  --models qwen3-8b --out "$OUT/wide_stream_k_memcheck.json" > "$OUT/wide_stream_k_memcheck.log" 2>&1
echo "memcheck, persistent: exit $? (0 clean, 9 errors)"
modes="0 1"
for mode in 0 1 before; do
  if [ "$mode" = before ]; then
    [ -f "${1:-}" ] || continue
    export SPECDEC_CUDA_KERNELS=$1 SPECDEC_WIDE_STREAM_K=1
    modes="0 1 before"
  else
    export SPECDEC_WIDE_STREAM_K=$mode
  fi
  timeout 50 python3 -m benchmarks.kernels.bench_wide_w12 --rows 32,64 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide \
    --budget-s 32 --out "$OUT/wide_stream_k_$mode.json" > "$OUT/wide_stream_k_$mode.log" 2>&1
  echo "wide kernels, SPECDEC_WIDE_STREAM_K=$mode: exit $?"
done
export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so
unset SPECDEC_PDL SPECDEC_WIDE_STREAM_K
if [ "$PASSES" = 1 ]; then
  timeout 120 python3 -m benchmarks.decode.bench_two_level --variants w12-packed --profiles none --reps 10 --pass-rows 64 \
    --alternate SPECDEC_WIDE_STREAM_K=0,auto --alternate-rounds 3 \
    --out "$OUT/wide_stream_k_q_pass64.json" > "$OUT/wide_stream_k_q_pass64.log" 2>&1
  echo "64-row Q passes, SPECDEC_WIDE_STREAM_K 0 and auto in turn: exit $?"
  export SPECDEC_PDL=0
  for mode in 0 auto; do
    export SPECDEC_WIDE_STREAM_K=$mode
    timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --rows 17,96,128 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide \
      --budget-s 42 --out "$OUT/wide_stream_k_rows_$mode.json" > "$OUT/wide_stream_k_rows_$mode.log" 2>&1
    echo "wide kernels at 17, 96, 128 rows, SPECDEC_WIDE_STREAM_K=$mode: exit $?"
  done
fi
unset SPECDEC_CUDA_KERNELS SPECDEC_WIDE_STREAM_K SPECDEC_PDL
grep -E "^checks|FAILED" "$OUT"/wide_stream_k_checks.log | head -3
tail -n 2 "$OUT/wide_stream_k_memcheck.log"
for mode in $modes; do
  echo "=== SPECDEC_WIDE_STREAM_K=$mode ==="
  grep -E "^qwen3-(8b|32b) (gate_up|o|qkv|down|lm_head) [0-9]+:" "$OUT/wide_stream_k_$mode.log"
done
[ "$PASSES" = 1 ] || exit 0
for mode in 0 auto; do
  echo "=== 17, 96, 128 rows, SPECDEC_WIDE_STREAM_K=$mode ==="
  grep -E "^qwen3-(8b|32b) (gate_up|o|qkv|down|lm_head) [0-9]+:" "$OUT/wide_stream_k_rows_$mode.log"
done
echo "=== 64-row passes, SPECDEC_WIDE_STREAM_K 0 and auto in turn, one process ==="
grep -A 3 "^in one process" "$OUT/wide_stream_k_q_pass64.log"
