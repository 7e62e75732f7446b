#!/usr/bin/env bash
# The wide kernels of this tree against a library built from an earlier tree (BASE, a .so carried to the machine), in
# one call, most needed first: this tree's library runs the wide checks with its defaults and compute-sanitizer
# memcheck over them; both libraries time the wide kernels (8B and 32B linears, 32 and 64 rows) beside cuBLAS bf16,
# without programmatic launch, and the lean 8B target's 64-row verify step; this tree's library runs the wide checks
# with the pipelined loop ($SPECDEC_WIDE_PIPELINE=1) and with two CTAs an SM ($SPECDEC_WIDE_CTAS=2); a build of this
# tree with -DSPECDEC_WIDE_TRACE=1 (made meanwhile) records every CTA's phases on the 8B linears at 32 and 64 rows
# (benchmarks/kernels/wide_trace.py).
# Expected time on one H200: ~6 min (nvcc ~30 s where build/ lacks the library, the traced build meanwhile; each checks run
# ~25 s, memcheck ~60 s, the trace ~35 s, each timing ~35 s, each AR step ~35 s, torch start ~10 s a process).
# Caps: 60 + 90 + 2 x 50 + 2 x 60 + 2 x 60 + 50 = 540 s, plus the build of this tree's library where build/ lacks it
# (90 s; the traced one is built meanwhile).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_against.sh BASE_SO
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: bash benchmarks/run_h200_wide_against.sh BASE_SO  (a library built from an earlier tree; got: ${1:-nothing})" >&2
  exit 2
fi
BASE=$1
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_against_build.log"
build_cuda_library_with "-DSPECDEC_WIDE_TRACE=1" build/wide_trace.so 90 "$OUT/wide_against_build_trace.log" &
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_SPLIT_WORKSPACE SPECDEC_WIDE_PIPELINE SPECDEC_WIDE_CTAS
export SPECDEC_PDL=0
export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so
timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/wide_against_checks_default.json" > "$OUT/wide_against_checks_default.log" 2>&1
echo "wide checks, default: exit $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only \
  --models qwen3-8b --out "$OUT/wide_against_memcheck.json" > "$OUT/wide_against_memcheck.log" 2>&1
echo "memcheck: exit $? (0 clean, 9 errors)"
for pass in base this; do
  case $pass in base) export SPECDEC_CUDA_KERNELS=$BASE ;; *) export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so ;; esac
  timeout 50 python3 -m benchmarks.kernels.bench_wide_w12 --rows 32,64 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide \
    --budget-s 32 --out "$OUT/wide_against_$pass.json" > "$OUT/wide_against_$pass.log" 2>&1
  echo "wide kernels, $pass: exit $?"
done
unset SPECDEC_PDL
for lib in base this; do
  case $lib in base) export SPECDEC_CUDA_KERNELS=$BASE ;; *) export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so ;; esac
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 40 \
    --out "$OUT/wide_against_ar_step_$lib.json" > "$OUT/wide_against_ar_step_$lib.log" 2>&1
  echo "AR step, verify 64 rows, $lib: exit $?"
done
export SPECDEC_PDL=0
export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so
for form in pipeline ctas2; do
  case $form in pipeline) export SPECDEC_WIDE_PIPELINE=1 ;; *) export SPECDEC_WIDE_CTAS=2 ;; esac
  timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
    --out "$OUT/wide_against_checks_$form.json" > "$OUT/wide_against_checks_$form.log" 2>&1
  echo "wide checks, $form: exit $?"
  unset SPECDEC_WIDE_PIPELINE SPECDEC_WIDE_CTAS
done
wait
export SPECDEC_CUDA_KERNELS=build/wide_trace.so
timeout 50 python3 -m benchmarks.kernels.wide_trace --rows 32,64 --budget-s 35 \
  --out "$OUT/wide_against_trace.json" > "$OUT/wide_against_trace.log" 2>&1
echo "trace: exit $?"
unset SPECDEC_CUDA_KERNELS SPECDEC_PDL
grep -E "^checks|FAILED" "$OUT"/wide_against_checks_*.log | head -6
tail -n 2 "$OUT/wide_against_memcheck.log"
for pass in base this; do
  echo "=== $pass ==="
  grep -E "^qwen3-(8b|32b) (gate_up|o|qkv|down|lm_head) [0-9]+:" "$OUT/wide_against_$pass.log"
done
for lib in base this; do
  echo "=== AR step, $lib ==="
  grep -E "^AR step (bf16|w12):|^verify step" "$OUT/wide_against_ar_step_$lib.log"
done
echo "=== trace ==="
grep -E "^qwen3-8b |^model|FAILED" "$OUT/wide_against_trace.log"
